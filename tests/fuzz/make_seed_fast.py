#!/usr/bin/env python3
"""Seed corpora for the FAST fuzz targets, made at fuzz time with python3-sentencepiece only (no PyPI):
  TOKDIR   fuzz_fast_tokenizer: [u16 len][tokenizer.json][u8 len][processor_config.json][int16 ids], with a
           tokenizer.json shaped like the one the FAST processor saves (indented, non-ASCII as UTF-8, the raw alphabet
           from "\\u0000" on, byte-level tokens and merged ones), a minimal one, and configs with and without a shape;
  DECDIR   fuzz_fast_decode: [u16 len][a Gemma-configured SentencePiece .model][int16 ids of "Action: <loc..>|"].
Usage: make_seed_fast.py TOKDIR DECDIR"""
import json
import os
import random
import struct
import sys
import tempfile

import sentencepiece as spm

tokdir, decdir = sys.argv[1], sys.argv[2]
os.makedirs(tokdir, exist_ok=True)
os.makedirs(decdir, exist_ok=True)
rnd = random.Random(5)


def byte_char(b):   # the byte-level table: printable bytes stand for themselves, the others are U+0100 + n
    others = [x for x in range(256) if not (0x21 <= x <= 0x7e or 0xa1 <= x <= 0xac or 0xae <= x)]
    return chr(b) if b not in others else chr(0x100 + others.index(b))


def tokenizer_json(n_alphabet, merges):
    vocab = {}
    for i in range(n_alphabet):   # the processor's initial alphabet: chr(0) .. chr(range)
        vocab.setdefault(chr(i), len(vocab))
    for i in range(n_alphabet):   # what its training strings become after the byte-level pre-tokenizer
        for b in chr(i).encode():
            vocab.setdefault(byte_char(b), len(vocab))
    pieces = list(vocab)
    for _ in range(merges):
        tok = rnd.choice(pieces) + rnd.choice(pieces)
        vocab.setdefault(tok, len(vocab))
        pieces.append(tok)
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
                       "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                                 "vocab": vocab, "merges": []}}, indent=2, ensure_ascii=False).encode(), len(vocab)


def ids16(ids):
    return b"".join(struct.pack("<h", max(-32768, min(32767, i))) for i in ids)


for name, n_alpha, merges, cfg in (
        ("fast", 160, 60, {"action_dim": None, "min_token": -80, "processor_class": "UniversalActionProcessor", "scale": 10,
                           "time_horizon": None, "vocab_size": 400}),
        ("wide", 300, 10, {"scale": 10, "min_token": -354, "time_horizon": 2, "action_dim": 3}),
        ("tiny", 4, 2, {})):
    tj, n_vocab = tokenizer_json(n_alpha, merges)
    cj = json.dumps(cfg).encode()
    ids = [rnd.randrange(n_vocab) for _ in range(24)] + [-1, n_vocab + 5]
    open(os.path.join(tokdir, name), "wb").write(struct.pack("<H", len(tj)) + tj + bytes([len(cj)]) + cj + ids16(ids))

with tempfile.TemporaryDirectory() as tmp:
    words = "pick up the red block Action: Task: State: | ; , 0 1 2 3 caf\u00e9 \U0001f916".split()
    sentences = [" ".join(rnd.choice(words) for _ in range(8)) for _ in range(200)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=os.path.join(tmp, "m"), vocab_size=400, model_type="bpe",
        byte_fallback=True, add_dummy_prefix=False, normalization_rule_name="identity", remove_extra_whitespaces=False,
        user_defined_symbols=["<loc%04d>" % i for i in range(64)], pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        hard_vocab_limit=False, minloglevel=2)
    model = open(os.path.join(tmp, "m.model"), "rb").read()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "m.model"))
    streams = {"action": sp.encode("Action: ") + [sp.piece_to_id("<loc%04d>" % rnd.randrange(64)) for _ in range(12)] +
               sp.encode("|") + [1, 0, 0],
               "bytes": sp.encode("Action: \u00e9\U0001f916 |") + [sp.piece_to_id("<0xE9>"), 3, 2, 1]}
    for name, ids in streams.items():
        open(os.path.join(decdir, name), "wb").write(struct.pack("<H", len(model)) + model + ids16(ids))
