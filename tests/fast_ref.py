"""openpi's π0-FAST tokenization restated with numpy / scipy / sentencepiece / transformers, as the checks of the C code
use it (fast_check.py, fast_policy_check.py): FASTTokenizer.tokenize at inference and extract_actions
(src/openpi/models/tokenizer.py, openpi commit 15a9616), and the FAST processor (Hugging Face's
physical-intelligence/fast, processing_action_tokenizer.py: UniversalActionProcessor's fit, __call__ and decode).
The processor class lives on the Hugging Face hub, which tests do not reach: its dozen lines are restated here, and
its BPE is transformers' own. Written from openpi's and the processor's code, not from the engine's."""
import json
import os

import numpy as np
from scipy.fft import dct, idct
from tokenizers import ByteLevelBPETokenizer
from tokenizers.trainers import BpeTrainer
from transformers import AutoTokenizer, PreTrainedTokenizerFast


def chunks(rng, n, H, A, amp):
    """Smooth random action chunks (normalised actions: random walks plus a slow sine), n of them."""
    t = np.linspace(0, 1, H)[:, None]
    out = []
    for _ in range(n):
        walk = np.cumsum(rng.normal(0, amp / np.sqrt(H), (H, A)), axis=0)
        out.append(np.clip(walk + amp * np.sin(2 * np.pi * rng.random(A) + 3 * t * rng.random(A)), -3, 3))
    return out


def fit_fast(directory, data, scale, vocab_size):
    """Trains and saves a FAST tokenizer the way the processor's `fit` does, then loads it back as AutoProcessor
    would (AutoTokenizer on the saved directory). Returns (tokenizer, min_token, max coefficient, vocab size)."""
    coef = [dct(a, axis=0, norm="ortho").flatten() for a in data]
    q = np.around(np.concatenate(coef) * scale)
    hi, lo = int(q.max()), int(q.min())
    vocab_size = max(vocab_size, hi - lo + 300)   # fit asserts the alphabet fits the vocabulary
    bpe = ByteLevelBPETokenizer()
    trainer = BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=[],
                         initial_alphabet=[chr(i) for i in range(hi - lo + 1)], max_token_length=10000)
    bpe._tokenizer.train_from_iterator(("".join(map(chr, (np.around(c * scale) - lo).astype(int))) for c in coef), trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=bpe, clean_up_tokenization_spaces=False).save_pretrained(directory)
    with open(os.path.join(directory, "processor_config.json"), "w") as f:   # the keys the published one has
        json.dump({"action_dim": None, "auto_map": {"AutoProcessor": "processing_action_tokenizer.UniversalActionProcessor"},
                   "min_token": lo, "processor_class": "UniversalActionProcessor", "scale": scale, "time_horizon": None,
                   "vocab_size": vocab_size}, f, indent=2)
    return AutoTokenizer.from_pretrained(directory), lo, hi, vocab_size


def fast_encode(tok, chunk, scale, min_token):
    """The processor's __call__ for one chunk (training side; the engine never encodes actions)."""
    c = np.around(dct(chunk[None], axis=1, norm="ortho") * scale)[0]
    return tok("".join(map(chr, np.maximum(c.flatten() - min_token, 0).astype(int))))["input_ids"]


def processor_decode(tok, ids, H, A, scale, min_token):
    """The FAST processor's decode of one chunk, restated: (actions (H, A) float64, outcome)."""
    outcome = "decoded"
    try:
        text = tok.decode(ids)
        coef = np.array(list(map(ord, text))) + min_token
        coef = coef.reshape(-1, A)
        assert coef.shape == (H, A)
    except OverflowError:
        coef, outcome = np.zeros((H, A)), "bad_id"
    except (ValueError, AssertionError):
        coef, outcome = np.zeros((H, A)), "bad_size"
    return idct(coef / scale, axis=0, norm="ortho"), outcome


def openpi_extract(sp, tok, tokens, H, A, scale, min_token):
    """openpi's FASTTokenizer.extract_actions, restated: (actions (H, A), outcome)."""
    decoded = sp.decode([int(t) for t in tokens])
    if "Action: " not in decoded:
        return np.zeros((H, A), dtype=np.float32), "no_action"
    raw = np.array(sp.encode(decoded.split("Action: ")[1].split("|")[0].strip()))
    fast = sp.vocab_size() - 1 - 128 - raw
    return processor_decode(tok, fast.tolist(), H, A, scale, min_token)


def openpi_prompt(sp, prompt, state, max_len):
    """FASTTokenizer.tokenize(prompt, state, actions=None): (tokens, token_mask, ar_mask, valid count), padded."""
    cleaned = prompt.lower().strip().replace("_", " ")
    disc = np.digitize(np.asarray(state, dtype=np.float64), bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
    toks = sp.encode("Task: %s, State: %s;\n" % (cleaned, " ".join(map(str, disc))), add_bos=True)
    n = min(len(toks), max_len)
    return toks[:n] + [0] * (max_len - n), [1] * n + [0] * (max_len - n), [0] * max_len, n
