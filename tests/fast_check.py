#!/usr/bin/env python3
"""π0-FAST's action tokenizer in C (src/fast_*.c, tokenizer_decode) against the Python it restates.
Runs BUILD/tests/test_fast in its `serve` mode and compares every answer with:
  - SentencePiece itself (sentencepiece from PyPI) for DecodeIds, on models trained here in four configurations
    (Gemma's; add_dummy_prefix + remove_extra_whitespaces; add_dummy_prefix alone with a custom unk_surface; some
    pieces marked UNUSED): random id sequences rich in control, unknown, byte and whitespace pieces;
  - Hugging Face tokenizers + transformers (openpi's pinned 4.53.2) for the FAST BPE: tokenizers trained here as the
    FAST processor's `fit` trains them (ByteLevelBPETokenizer's inner model, BpeTrainer with the whole coefficient
    range as initial alphabet, min_frequency 2, no special tokens), saved by PreTrainedTokenizerFast and loaded back
    by AutoTokenizer, as AutoProcessor loads the processor's tokenizer; random ids, ids past the vocabulary, negative
    ids, cut UTF-8;
  - the FAST processor's decode and openpi's FASTTokenizer.extract_actions restated below with numpy / scipy
    (the processor class itself comes from the Hugging Face hub, which tests do not reach; its decode is a dozen
    lines, restated in `processor_decode`, and its BPE call is transformers' own): round trips of random action
    chunks, the zero fallbacks (no "Action: ", a <seg> id, a size mismatch, text in the action), the id map, and a
    PaliGemma-like vocabulary where high FAST ids land on ordinary pieces, as in the real one;
  - openpi's FAST prompt restated (prompt.lower().strip().replace("_", " "), np.digitize bins, BOS, padding): non-ASCII
    prompts where ASCII-only lowering would differ, Unicode whitespace, state bins at -1, 1 and outside, truncation;
  - Python's str.lower() on every code point and on random final-sigma contexts; src/fast_unicode.h against
    tests/fast_unicode_table.py's output;
  - bad FAST directories: malformed JSON (line and column), other tokenizer types, clean-up of spaces, missing files.
The packages come from PyPI into a virtualenv made once (tests/fast_venv.py: PI0_FAST_VENV, default build/venv-fast);
no network for PyPI is a failure, not a skip. Seeds are fixed and printed. Prints `fast: N passed, M failed`.
Usage: fast_check.py BUILD"""
import os
import subprocess
import sys

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_venv  # noqa: E402

fast_venv.enter("fast", BUILD)

import json
import random
import tempfile
import unicodedata

import numpy as np
import sentencepiece as spm
from scipy.fft import dct
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
SEED = 20250117
rnd = random.Random(SEED)
rng = np.random.default_rng(SEED)
print("fast_check: seed %d" % SEED)
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)
    return ok


class Engine:
    """BUILD/tests/test_fast serve: one request line, one answer line."""

    def __init__(self):
        self.p = subprocess.Popen([os.path.join(BUILD, "tests", "test_fast"), "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8")

    def ask(self, line):
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
            answer = self.p.stdout.readline()
        except OSError:
            answer = ""
        return answer.rstrip("\n") if answer else "error: test_fast serve died (exit %s)" % self.p.poll()


if not os.access(os.path.join(BUILD, "tests", "test_fast"), os.X_OK):
    print("FAIL %s/tests/test_fast is missing (make builds it)" % BUILD)
    print("fast: 0 passed, 1 failed")
    sys.exit(1)
eng = Engine()


def ids_str(ids):
    return " ".join(str(int(i)) for i in ids)


# ---------------------------------------------------------------- SentencePiece models made here

import fast_ref  # noqa: E402  (tests/, the script's folder)
from fast_ref import fast_encode, fit_fast, openpi_extract, openpi_prompt, processor_decode  # noqa: E402
from protobuf_wire import enc, fields   # noqa: E402


def user_piece(text):   # a ModelProto.pieces entry: piece, score 0, type USER_DEFINED
    return enc(1, 2, enc(1, 2, text.encode()) + enc(2, 5, b"\0\0\0\0") + enc(3, 0, 4))


WORDS = ("pick up the red block and place it in top drawer open close move left right bowl plate cup fork "
         "Task: State: Action: , ; | 0 1 2 3 4 5 6 7 8 9 café naïve Straße 東京 ロボット 机器人 🤖 "
         "grasp the handle, then pull! (slowly) - 3.5cm; turn 90° wipe table").split()


def train(tmp, name, vocab, **kw):
    corpus = os.path.join(tmp, "corpus.txt")
    if not os.path.exists(corpus):
        with open(corpus, "w", encoding="utf-8") as f:
            for _ in range(3000):
                f.write(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12))) + "\n")
    prefix = os.path.join(tmp, name)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="bpe",
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2, **kw)
    return prefix + ".model"


GEMMA = dict(byte_fallback=True, split_digits=True, add_dummy_prefix=False, normalization_rule_name="identity",
             remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3)


def paligemma_like(tmp, name, n_loc):
    """A Gemma-configured model with n_loc <locXXXX> and 128 <segXXX> user-defined pieces appended, as PaliGemma's
    vocabulary ends (so FAST ids map onto the <loc> pieces first)."""
    base = open(train(tmp, name + "_base", 700, **GEMMA), "rb").read()
    extra = b"".join(user_piece("<loc%04d>" % i) for i in range(n_loc)) + b"".join(user_piece("<seg%03d>" % i) for i in range(128))
    path = os.path.join(tmp, name + ".model")
    open(path, "wb").write(base + extra)
    return path


def mark_unused(src, dst, every):
    out, k = bytearray(), 0
    for f, wt, v in fields(open(src, "rb").read()):
        if f == 1 and wt == 2:
            sub = list(fields(v))
            kind = next((x for g, _, x in sub if g == 3), 1)
            if kind == 1:
                k += 1
                if k % every == 0:
                    sub = [(g, w, x) for g, w, x in sub if g != 3] + [(3, 0, 5)]
            v = b"".join(enc(*x) for x in sub)
        out += enc(f, wt, v)
    open(dst, "wb").write(bytes(out))


def spdecode_check(name, model):
    sp = spm.SentencePieceProcessor(model_file=model)
    check(eng.ask("pg " + model) == "ok", "load %s" % name)
    V = sp.get_piece_size()
    kinds = {"control": [], "unknown": [], "byte": [], "ws": [], "unused": [], "other": []}
    for i in range(V):
        p = sp.id_to_piece(i)
        k = ("control" if sp.is_control(i) else "unknown" if sp.is_unknown(i) else "byte" if sp.is_byte(i) else
             "unused" if sp.is_unused(i) else "ws" if p.startswith("\u2581") else "other")
        kinds[k].append(i)
    pools = [v for v in kinds.values() if v]
    bad, cases = 0, 0
    for n in range(700):
        length = rnd.choice([0, 1, 2, 3, 5, 8, 13, 30])
        ids = [rnd.choice(rnd.choice(pools)) if rnd.random() < 0.8 else rnd.randrange(V) for _ in range(length)]
        if n % 7 == 0 and kinds["byte"]:   # runs of byte pieces: whole characters, cut ones, lone continuation bytes
            b = rnd.choice(["é", "東", "🤖", "a"]).encode() * rnd.randint(1, 2)
            b = b[rnd.randint(0, 1):len(b) - rnd.randint(0, 1)]
            ids = ids[:2] + [sp.piece_to_id("<0x%02X>" % x) for x in b] + ids[2:]
        want = sp.decode(ids).encode("utf-8")
        got = eng.ask("spdecode " + ids_str(ids))
        cases += 1
        if got != "ok " + want.hex():
            bad += 1
            if bad <= 3:
                print("  %s: %s\n    want %r\n    got  %s" % (name, ids, want, got))
    check(bad == 0, "SentencePiece decode, %s: %d of %d id sequences differ" % (name, bad, cases))
    got = eng.ask("spdecode 5 %d" % V)
    try:
        sp.decode([5, V])
        refused = False
    except IndexError:
        refused = True
    check(refused and got.startswith("error PI0_ERR_ARG") and "out of range" in got,
          "%s: id %d: SentencePiece refuses it, engine: %s" % (name, V, got))
    print("spdecode %-22s %5d pieces (%s), %d sequences, %d differ" % (name, V, ", ".join(
        "%d %s" % (len(v), k) for k, v in kinds.items() if v), cases, bad))


# ---------------------------------------------------------------- FAST tokenizers made here


def chunks(n, H, A, amp):
    return fast_ref.chunks(rng, n, H, A, amp)


# the inverse DCT: scipy's FFT against the engine's direct sum; the worst seen is ~3e-14 on values below 100
TOL = 1e-10


def compare_actions(answer, want, outcome, H, A):
    parts = answer.split()
    if not parts or parts[0] != outcome or len(parts) != 1 + H * A:
        return False, float("inf")
    got = np.array([float(x) for x in parts[1:]]).reshape(H, A)
    err = float(np.max(np.abs(got - want))) if H * A else 0.0
    return err <= TOL * max(1.0, float(np.max(np.abs(want)))), err


with tempfile.TemporaryDirectory() as tmp:
    # ---- SentencePiece DecodeIds
    gemma = paligemma_like(tmp, "gemma", 400)
    spdecode_check("gemma+loc+seg", gemma)
    spdecode_check("dummy+remove_ws", train(tmp, "dflt", 300, normalization_rule_name="identity", add_dummy_prefix=True,
                                            remove_extra_whitespaces=True, user_defined_symbols=["<x>", "▁▁"]))
    spdecode_check("dummy+byte+unk_surface", train(tmp, "surf", 400, normalization_rule_name="identity", add_dummy_prefix=True,
                                                   remove_extra_whitespaces=False, byte_fallback=True, unk_surface="<?>",
                                                   allow_whitespace_only_pieces=True, character_coverage=0.98))
    mark_unused(os.path.join(tmp, "dflt.model"), os.path.join(tmp, "unused.model"), 4)
    spdecode_check("unused pieces", os.path.join(tmp, "unused.model"))

    # ---- the FAST BPE against transformers' decode
    fasts = []
    for name, H, A, amp, scale, vocab in (("fast-10x7", 10, 7, 1.0, 10, 400), ("fast-2byte", 10, 8, 1.5, 60, 1500),
                                          ("fast-3byte", 6, 4, 2.0, 500, 6000)):
        d = os.path.join(tmp, name)
        tok, lo, hi, vocab = fit_fast(d, chunks(600, H, A, amp), scale, vocab)
        ans = eng.ask("fast " + d)
        check(ans == "ok", "load %s: %s" % (name, ans))
        n_vocab = len(tok.get_vocab())
        single = [i for t, i in tok.get_vocab().items() if len(t) == 1 and 0x21 <= ord(t) < 0x144 and ord(t) != 0x7f]
        singles_80 = sum(1 for i in single if ord(tok.convert_ids_to_tokens(i)) >= 0x80)
        bad = 0
        for k in range(400):
            pool = [rnd.randrange(n_vocab)] * 3 + [rnd.randrange(n_vocab + 50), rnd.randrange(260)]
            ids = [rnd.choice(pool) if rnd.random() < 0.3 else rnd.randrange(n_vocab) for _ in range(rnd.choice([0, 1, 2, 5, 20, 60]))]
            if k % 5 == 0:
                ids.append(n_vocab + rnd.randrange(10 ** 6))   # past the vocabulary: skipped
            if k % 2:   # tokens of one byte each: random bytes, so cut, overlong and surrogate UTF-8 of every kind
                ids = [rnd.choice(single) for _ in range(rnd.randint(1, 8))]
            want = " ".join(["ok"] + [str(ord(c)) for c in tok.decode(ids)])
            got = eng.ask("bpe " + ids_str(ids))
            if got != want:
                bad += 1
                if bad <= 3:
                    print("  %s %s\n    want %s\n    got  %s" % (name, ids, want[:200], got[:200]))
        check(bad == 0, "%s BPE decode: %d of 400 differ from transformers" % (name, bad))
        try:
            tok.decode([3, -1])
            neg = "accepted"
        except OverflowError:
            neg = "OverflowError"
        got = eng.ask("bpe 3 -1")
        check(neg == "OverflowError" and got.startswith("error PI0_ERR_ARG"), "negative id: transformers %s, engine %s" % (neg, got))
        print("bpe %-10s vocabulary %4d (%d one-byte tokens, %d of them >= 0x80), min_token %5d, code points up to %d: "
              "400 id lists, %d differ" % (name, n_vocab, len(single), singles_80, lo, max(ord(c) for t in tok.get_vocab() for c in t), bad))
        fasts.append((name, d, tok, lo, hi, H, A, scale))

    # ---- the processor's decode: round trips and fallbacks
    for name, d, tok, lo, hi, H, A, scale in fasts:
        eng.ask("fast " + d)
        bad, worst, rt_worst, rt_n, outcomes = 0, 0.0, 0.0, 0, {}
        for k, chunk in enumerate(chunks(150, H, A, 1.0 if name == "fast-10x7" else 1.5)):
            ids = fast_encode(tok, chunk, scale, lo)
            h, a = H, A
            if k % 10 == 1:
                ids = ids[:-1]                                   # a token short: usually a size mismatch
            elif k % 10 == 2:
                h, a = H + 1, A                                  # the wrong horizon
            elif k % 10 == 3:
                ids = ids + [-rnd.randint(1, 128)]               # a <seg> id
            want, outcome = processor_decode(tok, ids, h, a, scale, lo)
            ok, err = compare_actions(eng.ask("actions %d %d %s" % (h, a, ids_str(ids))), want, outcome, h, a)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            worst = max(worst, err)
            bad += not ok
            q = np.around(dct(chunk, axis=0, norm="ortho") * scale)
            if outcome == "decoded" and k % 10 == 0 and lo <= np.min(q) and np.max(q) <= hi:   # quantisation error only
                rt_worst = max(rt_worst, float(np.max(np.sqrt(np.sum((want - chunk) ** 2, axis=0)))))
                rt_n += 1
        check(bad == 0, "%s processor decode: %d of 150 differ" % (name, bad))
        check(rt_n >= 10 and rt_worst <= 0.5 / scale * np.sqrt(H) + 1e-9, "%s round trips (%d): column error %g > %g" % (
            name, rt_n, rt_worst, 0.5 / scale * np.sqrt(H)))
        check(outcomes.get("bad_id", 0) >= 10 and outcomes.get("bad_size", 0) >= 10, "%s: fallbacks exercised %s" % (name, outcomes))
        print("actions %-10s 150 chunks %s: %d differ, worst %.2g; %d round trips, column error %.3g (bound %.3g)" % (
            name, outcomes, bad, worst, rt_n, rt_worst, 0.5 / scale * np.sqrt(H)))

    # ---- openpi's extract_actions on generated PaliGemma token streams
    name, d, tok, lo, hi, H, A, scale = fasts[0]
    n_fast = len(tok.get_vocab())
    for pg_name, n_loc in (("all FAST ids on <loc>", n_fast), ("PaliGemma-like: 1/3 on <loc>", n_fast // 3)):
        pg = paligemma_like(tmp, "pg%d" % n_loc, n_loc)
        sp = spm.SentencePieceProcessor(model_file=pg)
        V = sp.get_piece_size()
        check(eng.ask("pg " + pg) == "ok" and eng.ask("fast " + d) == "ok", "load %s" % pg_name)
        act_ids, bar, eos = sp.encode("Action: "), sp.encode("|"), sp.eos_id()
        bad, outcomes, exact, clean = 0, {}, 0, 0
        for k, chunk in enumerate(chunks(240, H, A, 1.0)):
            fast_ids = fast_encode(tok, chunk, scale, lo)
            body = [V - 1 - 128 - f for f in fast_ids]          # the id map, PaliGemma side
            v = k % 12
            other = [V - 1 - 128 - f for f in fast_encode(tok, chunks(1, H, A, 1.0)[0], scale, lo)]
            if v == 1:
                toks = body + bar + [eos]                        # no "Action: "
            elif v == 2:   # a second "Action: ": the first segment counts, up to the second or a "|"
                toks = sp.encode("Task: x, State: 1;\n") + act_ids + body + act_ids + other + bar
            elif v == 11:
                toks = act_ids + body + bar + act_ids + other + bar
            elif v == 3:
                toks = act_ids + body                            # no "|", no EOS
            elif v == 4:
                toks = act_ids + sp.encode(" \u3000 ") + body + sp.encode("\u00a0\n") + bar     # Unicode whitespace
            elif v == 5:
                toks = act_ids + body[:3] + [V - 1 - rnd.randrange(128)] + body[3:] + bar       # a <seg> id
            elif v == 6:
                toks = act_ids + body[:2] + sp.encode("pick") + body[2:] + bar                 # text among the ids
            elif v == 7:
                toks = act_ids + body[:-1] + bar                 # a token short
            elif v == 8:
                toks = [rnd.randrange(V) for _ in range(rnd.randint(0, 40))]                   # anything at all
            elif v == 9:
                toks = act_ids + bar + [eos]                     # an empty action
            else:
                toks = act_ids + body + bar + [eos]              # what the model is trained to write
            toks = toks + [0] * rnd.randint(0, 5)                # the decoding buffer's unfilled steps
            want, outcome = openpi_extract(sp, tok, toks, H, A, scale, lo)
            ok, err = compare_actions(eng.ask("extract %d %d %s" % (H, A, ids_str(toks))), want, outcome, H, A)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            bad += not ok
            if not ok and bad <= 3:
                print("  %s: %s -> %s\n    got %s" % (pg_name, toks, outcome, eng.ask("extract %d %d %s" % (H, A, ids_str(toks)))[:200]))
            # a clean stream decodes back to its chunk when its coefficients lie in the training range (the encoder
            # clips those below min_token, and the BPE has no token for bytes it never saw)
            q = np.around(dct(chunk, axis=0, norm="ortho") * scale)
            in_range = lo <= np.min(q) and np.max(q) <= hi
            if v == 0 and in_range:
                clean += 1
                exact += outcome == "decoded" and np.max(np.sqrt(np.sum((want - chunk) ** 2, axis=0))) <= 0.5 / scale * np.sqrt(H)
        check(bad == 0, "extract_actions, %s: %d of 240 differ from openpi's" % (pg_name, bad))
        check(all(outcomes.get(o, 0) >= 10 for o in ("decoded", "no_action", "bad_id", "bad_size")),
              "%s: every outcome exercised %s" % (pg_name, outcomes))
        if n_loc >= n_fast:
            check(clean >= 15 and exact == clean, "%s: %d of %d clean streams decode back to their chunk" % (pg_name, exact, clean))
        print("extract %-30s V=%d, 240 streams %s: %d differ; clean round trips %d of %d" % (pg_name, V, outcomes, bad, exact, clean))
    got = eng.ask("extract 10 7 5 999999")
    check(got.startswith("error PI0_ERR_ARG"), "an id past PaliGemma's vocabulary is an error (openpi raises): %s" % got)

    # ---- the FAST prompt
    sp = spm.SentencePieceProcessor(model_file=gemma)
    eng.ask("pg " + gemma)

    PROMPTS = ["Pick up the RED block", "  put_the_cup on_the plate \n", "Pick\nplace\n\nstack", "a_\n_b", "ÉCRIRE «Ça» À CÔTÉ", "ΟΔΥΣΣΕΥΣ ΣΑΣ", "Σ",
               "ΑΣ\u0301 ΑΣ.", "İstanbul İ", "STRASSE Straße ẞ", "ПОДНИМИ КРАСНЫЙ КУБ", "ＦＵＬＬＷＩＤＴＨ", "ǅǈǋ Ⅻ Ⓐ",
               "\u3000\u00a0stack it\u2029\u0085", "line one\nLINE TWO", "𐐀𐐁 DESERET", "🤖 ROBOT 🍎", "", "   ", "_"]
    for _ in range(60):
        PROMPTS.append("".join(rnd.choice(["A", "Σ", "ς", "'", "\u0345", "\u00ad", " ", "Ǆ", "İ", "_", "x", "\u2028", "9", "ß"])
                               for _ in range(rnd.randint(1, 12))))
    ascii_differs, bad = 0, 0
    for i, p in enumerate(PROMPTS):
        state = [float(rnd.choice([rnd.uniform(-1.2, 1.2), -1.0, 1.0, 0.9921875, -1 + rnd.randrange(256) / 128.0,
                                   np.nextafter(-1.0, -2), np.nextafter(1.0, 0), 5.0, -7.5]))
                 for _ in range(rnd.choice([0, 1, 7, 8, 32]))]
        max_len = rnd.choice([250, 180, 20, 9])
        want = openpi_prompt(sp, p, state, max_len)
        got = eng.ask("prompt %d %s %s" % (max_len, ",".join(repr(x) for x in state) or "-", p.encode().hex()))
        if got.startswith("ok "):
            t, m, a, n = got[3:].split(";")
            got_v = (list(map(int, t.split())), list(map(int, m.split())), list(map(int, a.split())), int(n))
        else:
            got_v = got
        if got_v != want:
            bad += 1
            if bad <= 3:
                print("  prompt %r state %s max_len %d\n    want %s\n    got  %s" % (p, state, max_len, want, got[:300]))
        ascii_differs += "".join(c.lower() if c < "\x80" else c for c in p).strip() != p.lower().strip()
    check(bad == 0, "FAST prompt: %d of %d differ from openpi's" % (bad, len(PROMPTS)))
    check(ascii_differs >= 20, "prompts where ASCII-only lowering would differ: %d" % ascii_differs)
    print("prompt: %d prompts (%d where ASCII-only lowering differs from Python's), %d differ" % (len(PROMPTS), ascii_differs, bad))
    for st, word in (("0.5,nan", "state[1] is nan"), ("inf", "state[0] is inf")):
        got = eng.ask("prompt 20 %s %s" % (st, "pick".encode().hex()))
        check(got.startswith("error PI0_ERR_ARG") and word in got, "state %s refused: %s" % (st, got))

    # ---- str.lower() on every code point (NUL between them: not cased, not case-ignorable) and sigma contexts
    cps = [c for c in range(0x110000) if not 0xd800 <= c < 0xe000]
    bad = 0
    for k in range(0, len(cps), 4096):
        s = "\0".join(chr(c) for c in cps[k:k + 4096])
        if eng.ask("lower " + s.encode().hex()) != "ok " + s.lower().encode().hex():
            bad += 1
    check(bad == 0, "str.lower() of every code point: %d blocks of 4096 differ" % bad)
    pieces = ["Σ", "Σ", "A", "a", "ς", "'", ".", "\u0345", "\u00ad", "\u0301", "ǅ", " ", "1", "\u02b0", "\U0001d400", "ᾼ"]
    bad = 0
    for _ in range(3000):
        s = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 8)))
        bad += eng.ask("lower " + s.encode().hex()) != "ok " + s.lower().encode().hex()
    check(bad == 0, "final sigma: %d of 3000 strings differ" % bad)
    table = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "fast_unicode_table.py")],
                           capture_output=True, text=True).stdout
    committed = open(os.path.join(os.path.dirname(__file__), "..", "src", "fast_unicode.h")).read()
    check(table == committed, "src/fast_unicode.h is not what tests/fast_unicode_table.py writes with this Python (Unicode "
          "%s): regenerate it" % unicodedata.unidata_version)
    print("lower: %d code points, 3000 sigma contexts; tables of Unicode %s" % (len(cps), unicodedata.unidata_version))

    # ---- bad FAST directories
    good = fasts[0][1]

    def variant(name, tok_json=None, cfg=None, tok_cfg=None, drop=()):
        dd = os.path.join(tmp, "bad-" + name)
        os.makedirs(dd)
        for fn in ("tokenizer.json", "processor_config.json", "tokenizer_config.json"):
            if fn not in drop:
                open(os.path.join(dd, fn), "w").write(open(os.path.join(good, fn)).read())
        for fn, text in (("tokenizer.json", tok_json), ("processor_config.json", cfg), ("tokenizer_config.json", tok_cfg)):
            if text is not None:
                open(os.path.join(dd, fn), "w").write(text)
        return dd

    tj = json.load(open(os.path.join(good, "tokenizer.json")))
    text = open(os.path.join(good, "tokenizer.json")).read()
    cut = text[:text.index('"merges"')]
    metaspace = dict(tj, decoder={"type": "Metaspace", "replacement": "\u2581"})
    bads = [("truncated", dict(tok_json=cut), "PI0_ERR_FORMAT", "tokenizer.json: invalid JSON at line %d column" % (cut.count("\n") + 1)),
            ("metaspace", dict(tok_json=json.dumps(metaspace)), "PI0_ERR_UNSUPPORTED", "decoder.type is \"Metaspace\""),
            ("added", dict(tok_json=json.dumps(dict(tj, added_tokens=[{"id": 0, "content": "x"}]))), "PI0_ERR_UNSUPPORTED", "added_tokens"),
            ("cfg-json", dict(cfg='{"scale": 10,\n"min_token" -354}'), "PI0_ERR_FORMAT", "processor_config.json: invalid JSON at line 2"),
            ("cfg-scale", dict(cfg='{"scale": "ten"}'), "PI0_ERR_FORMAT", "\"scale\": expected a number > 0"),
            ("cleanup", dict(tok_cfg='{"clean_up_tokenization_spaces": true}'), "PI0_ERR_UNSUPPORTED", "clean_up_tokenization_spaces"),
            ("no-config", dict(drop=("processor_config.json",)), "PI0_ERR_IO", "neither processor_config.json nor preprocessor_config.json"),
            ("no-tokenizer", dict(drop=("tokenizer.json",)), "PI0_ERR_IO", "tokenizer.json")]
    for name, kw, code, needle in bads:
        dd = variant(name, **kw)
        got = eng.ask("fast " + dd)
        check(got.startswith("error " + code) and needle in got and (dd in got or name == "no-config"), "bad %s: %s" % (name, got))
        print("bad fast dir %-12s %s" % (name, got[:150]))
    # preprocessor_config.json, the older name, is read when processor_config.json is absent
    dd = variant("old-name", drop=("processor_config.json",))
    open(os.path.join(dd, "preprocessor_config.json"), "w").write(open(os.path.join(good, "processor_config.json")).read())
    check(eng.ask("fast " + dd) == "ok", "preprocessor_config.json")
print("fast: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
