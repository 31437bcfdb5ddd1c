#!/usr/bin/env python3
"""Trains a tiny Gemma-configured SentencePiece BPE model for the tiny test checkpoints (vocab 512):
byte fallback, split digits, no dummy prefix, identity normalizer, whitespace kept; pad 0, eos 1, bos 2,
unk 3 as in PaliGemma's model. The corpus and its seed are fixed.
Usage: make_tokenizer.py OUT.model [VOCAB]   (python3-sentencepiece)"""
import os, random, sys, tempfile

import sentencepiece as spm

out = sys.argv[1]
vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 500
rnd = random.Random(7)
WORDS = ("pick up the red block and place it in top drawer open close move left right bowl plate cup fork "
         "put the cube on of fold towel transfer uncap pen grasp handle pull turn wipe table stack blocks "
         "Task: State: Action: , ; 0 1 2 3 4 5 6 7 8 9").split()
with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(2000):
            f.write(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12))) + "\n")
    prefix = os.path.join(tmp, "m")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="bpe", byte_fallback=True,
        split_digits=True, add_dummy_prefix=False, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, pad_id=0, eos_id=1, bos_id=2,
        unk_id=3, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    os.replace(prefix + ".model", out)
