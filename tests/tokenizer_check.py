#!/usr/bin/env python3
"""Tokenizer check: `pi0 tokenize` against SentencePiece itself (python3-sentencepiece, the oracle).
Trains Gemma-configured BPE models (byte fallback, split digits, no dummy prefix, identity normalizer,
whitespace kept, user-defined <locXXXX>/<segXXX> pieces) on a generated corpus, then compares the ids of
a few hundred prompts: ASCII, punctuation, digits, underscores, newlines, runs of spaces, accented and
CJK text, emoji (byte fallback), user-defined pieces, empty text. Also checks that corrupt and truncated
.model files give a clear error (exit 1, message) and no crash. Prints `tokenizer: N passed, M failed`.
Usage: tokenizer_check.py PI0_BINARY"""
import os, random, subprocess, sys, tempfile

import sentencepiece as spm

pi0 = sys.argv[1]
rnd = random.Random(1234)   # recorded seed: every corpus and prompt below is reproducible
WORDS = ("pick up the red block and place it in top drawer open close move left right bowl plate cup fork "
         "put_the_cube on of café naïve déjà vu Straße 東京 ロボット 机器人 把 红色 方块 放进 抽屉 🤖 🍎 👍🏽 "
         "grasp the handle, then pull! (slowly) - 3.5cm; turn 90° wipe table: stack 2 blocks? yes/no").split()
passed = failed = 0

def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)

def prompt():
    kind = rnd.randrange(8)
    words = [rnd.choice(WORDS) for _ in range(rnd.randint(1, 14))]
    if kind == 0:
        return " ".join(words)
    if kind == 1:
        return "  ".join(words) + "   "                                  # runs of spaces, trailing
    if kind == 2:
        return "\n".join(words)                                           # newlines
    if kind == 3:
        return " ".join(str(rnd.randint(0, 10 ** rnd.randint(1, 7))) for _ in range(5))   # digits
    if kind == 4:
        return "_".join(words)                                            # underscores
    if kind == 5:
        return " ".join(words) + " <loc%04d><seg%03d>" % (rnd.randrange(1024), rnd.randrange(128))
    if kind == 6:
        return "".join(chr(rnd.choice([rnd.randint(0x20, 0x7e), rnd.randint(0x4e00, 0x4fff), rnd.randint(0x1f600, 0x1f64f),
                                       rnd.randint(0xc0, 0x17f)])) for _ in range(rnd.randint(1, 30)))   # unseen chars
    return " " + " ".join(words) + "\t!?"

with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(4000):
            f.write(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 15))) + "\n")
    users = ",".join(["<loc%04d>" % i for i in range(1024)] + ["<seg%03d>" % i for i in range(128)])
    prompts = [prompt() for _ in range(300)] + ["", " ", "a", "\n", "<loc0001>", "  leading", "x" * 300]
    for vocab in (1900, 3000):
        prefix = os.path.join(tmp, "m%d" % vocab)
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="bpe", byte_fallback=True,
            split_digits=True, add_dummy_prefix=False, normalization_rule_name="identity",
            remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, user_defined_symbols=users,
            pad_id=0, eos_id=1, bos_id=2, unk_id=3, character_coverage=0.9995, hard_vocab_limit=False,
            minloglevel=2)
        model = prefix + ".model"
        sp = spm.SentencePieceProcessor(model_file=model)
        mismatch = 0
        # prompts without a newline go through stdin in one process (one line of ids per line),
        # the others one process each with the text as an argument
        lines = [p for p in prompts if "\n" not in p]
        r = subprocess.run([pi0, "tokenize", "--tokenizer", model], input="".join(p + "\n" for p in lines),
                           capture_output=True, text=True)
        outs = r.stdout.split("\n")[: len(lines)]
        got = dict(zip(lines, outs)) if r.returncode == 0 and len(outs) == len(lines) else {}
        for p in prompts:
            if "\n" in p:
                g = subprocess.run([pi0, "tokenize", "--tokenizer", model, "--", p], capture_output=True, text=True)
                got[p] = g.stdout.rstrip("\n") if g.returncode == 0 else "error: " + g.stderr.strip()
            want = " ".join(map(str, sp.encode(p)))
            if got.get(p) != want:
                mismatch += 1
                if mismatch <= 3:
                    print("  vocab %d: %r\n    want %s\n    got  %s" % (vocab, p, want, got.get(p)))
        check(mismatch == 0, "vocab %d: %d of %d prompts differ from SentencePiece" % (vocab, mismatch, len(prompts)))
        print("tokenizer vocab %d: %d prompts, %d differ" % (vocab, len(prompts), mismatch))
    # UNUSED pieces (type 5): SentencePiece merges through them, then splits them back into their parts. The last
    # model with every 5th merged piece marked UNUSED (the protobuf edited field by field; SentencePiece, which
    # loads it, is the oracle)
    from protobuf_wire import enc, fields   # tests/, the script's folder

    out, k, marked = bytearray(), 0, 0
    for f, wt, v in fields(open(model, "rb").read()):
        if f == 1 and wt == 2:   # a piece: {1 piece, 2 score, 3 type}
            sub = list(fields(v))
            text = next(x for g, _, x in sub if g == 1)
            kind = next((x for g, _, x in sub if g == 3), 1)
            if kind == 1 and len(text.decode("utf-8", "replace")) >= 2:
                k += 1
                if k % 5 == 0:
                    sub = [(g, w, x) for g, w, x in sub if g != 3] + [(3, 0, 5)]
                    marked += 1
            v = b"".join(enc(*x) for x in sub)
        out += enc(f, wt, v)
    unused = os.path.join(tmp, "unused.model")
    open(unused, "wb").write(bytes(out))
    spu = spm.SentencePieceProcessor(model_file=unused)
    r = subprocess.run([pi0, "tokenize", "--tokenizer", unused], input="".join(p + "\n" for p in lines),
                       capture_output=True, text=True)
    outs = r.stdout.split("\n")[: len(lines)]
    diff = [p for p, o in zip(lines, outs) if o != " ".join(map(str, spu.encode(p)))] if r.returncode == 0 else lines
    for p in diff[:3]:
        print("  unused: %r\n    want %s\n    got  %s" % (p, spu.encode(p), dict(zip(lines, outs)).get(p)))
    changed = sum(spu.encode(p) != sp.encode(p) for p in lines)
    check(not diff and changed > 20, "UNUSED pieces (%d marked): %d of %d prompts differ from SentencePiece, %d "
          "tokenised differently from the unmarked model" % (marked, len(diff), len(lines), changed))
    print("tokenizer UNUSED pieces: %d marked, %d prompts, %d differ, %d changed by the marking" % (marked, len(lines),
          len(diff), changed))
    # prompt formats (docs/model.md 3.5) against openpi's PaligemmaTokenizer rules restated with numpy + sentencepiece
    import numpy as np
    def openpi_prompt(prompt, fmt, state, max_len):
        cleaned = prompt.strip().replace("_", " ").replace("\n", " ")
        if fmt == "pi05":
            disc = np.digitize(np.asarray(state, dtype=np.float64), bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
            ids = sp.encode("Task: %s, State: %s;\nAction: " % (cleaned, " ".join(map(str, disc))), add_bos=True)
        else:
            ids = sp.encode(cleaned, add_bos=True) + sp.encode("\n")
        n = min(len(ids), max_len)
        return ids[:n] + [0] * (max_len - n), [1] * n + [0] * (max_len - n)
    bad_fmt = 0
    for i in range(80):
        fmt = "pi05" if i % 2 else "pi0"
        p = prompts[i] if "\n" not in prompts[i] or i % 3 else " pick_up\nthe block \n"
        state = [float(rnd.choice([rnd.uniform(-1.3, 1.3), -1.0, 1.0, 0.9921875, -1 + rnd.randrange(256) / 128.0]))
                 for _ in range(rnd.choice([0, 1, 7, 8, 14]))]
        max_len = rnd.choice([48, 200, 12])
        cmd = [pi0, "tokenize", "--tokenizer", model, "--format", fmt, "--max-len", str(max_len)]
        if fmt == "pi05" and state:
            cmd += ["--state", ",".join(repr(float(x)) for x in state)]
        r = subprocess.run(cmd + ["--", p], capture_output=True, text=True)
        want = openpi_prompt(p, fmt, state if fmt == "pi05" else [], max_len)
        got = [list(map(int, l.split())) for l in r.stdout.split("\n")[:2]] if r.returncode == 0 else None
        if got != [want[0], want[1]]:
            bad_fmt += 1
            if bad_fmt <= 3:
                print("  format %s %r state %s\n    want %s\n    got  %s %s" % (fmt, p, state, want, got, r.stderr))
    check(bad_fmt == 0, "prompt formats: %d of 80 differ" % bad_fmt)
    print("tokenizer prompt formats (pi0 / pi05 with discretised state, padding, truncation): 80 cases, %d differ" % bad_fmt)
    # bad .model files: truncated, garbage, not BPE
    data = open(model, "rb").read()
    bad = {"truncated": data[: len(data) // 2], "garbage": bytes(rnd.randrange(256) for _ in range(4000)),
           "empty": b"", "text": b"hello world\n"}
    uni = os.path.join(tmp, "uni")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=uni, vocab_size=150, model_type="unigram",
                                   hard_vocab_limit=False, minloglevel=2)
    bad["unigram"] = open(uni + ".model", "rb").read()
    for name, blob in bad.items():
        path = os.path.join(tmp, name + ".model")
        open(path, "wb").write(blob)
        r = subprocess.run([pi0, "tokenize", "--tokenizer", path, "pick up"], capture_output=True, text=True)
        ok = r.returncode == 1 and "pi0: loading the tokenizer:" in r.stderr and path in r.stderr
        check(ok, "%s .model: exit %d, stderr %r" % (name, r.returncode, r.stderr.strip()))
        print("tokenizer bad %-9s exit %d: %s" % (name, r.returncode, r.stderr.strip()[:110]))
print("tokenizer: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
