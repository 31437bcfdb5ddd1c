/* tokenizer.h — SentencePiece BPE tokenizer in C: reads a `.model` file (protobuf, parsed by hand), encodes text
 * exactly like SentencePiece's BPE model (user-defined pieces, whitespace marker U+2581, score-ordered merges, byte
 * fallback) and decodes ids like its DecodeIds. Supports the identity normalizer that Gemma/PaliGemma's model
 * uses (with its add_dummy_prefix / remove_extra_whitespaces / escape_whitespaces flags); other
 * normalizers (precompiled charsmaps) are refused with a clear error. docs/model.md 3.5; the protobuf field
 * numbers are SentencePiece's sentencepiece_model.proto. Prompt formatting (BOS, "\n" marker, state text) is policy code, not here. */
#ifndef PI0_TOKENIZER_H
#define PI0_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

typedef struct pi0_tokenizer tokenizer;

pi0_status tokenizer_load(tokenizer **out, const char *path);
/* Parses a .model from memory (fuzz target); label names the source in messages. */
pi0_status tokenizer_parse(tokenizer **out, const char *label, const uint8_t *buf, size_t len);
void tokenizer_free(tokenizer *t);

/* Encodes len bytes of UTF-8 text into ids (no BOS/EOS). Writes up to cap ids and the full count to
 * *n (call again with a larger buffer when *n > cap). Invalid UTF-8 bytes are encoded as bytes. */
pi0_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n);

/* Decodes ids into UTF-8 text exactly like SentencePiece's DecodeIds (docs/fast.md 2.1): control pieces (<s>, </s>,
 * <pad>) vanish, <unk> becomes the model's unk surface (" \xe2\x81\x87 " unless its trainer set another), a run of
 * <0xHH> byte pieces is read as UTF-8 with U+FFFD for each byte that starts no valid character, U+2581 becomes a
 * space, and the leading U+2581 of the first text piece is dropped when the model adds a dummy prefix or removes
 * extra whitespace. Writes up to cap bytes (no NUL; text may be NULL when cap is 0) and the full length to *len.
 * An id outside [0, vocab) is PI0_ERR_ARG, as SentencePiece refuses it. */
pi0_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char *text, size_t cap, size_t *len);

/* openpi's state bin (docs/model.md 3.5): np.digitize(x, linspace(-1, 1, 257)[:-1]) - 1, i.e. the number of bin
 * starts -1 + k/128 (k = 0..255) that are <= x, minus one: -1 .. 255. For finite x. */
int tokenizer_state_bin(double x);

int tokenizer_vocab_size(const tokenizer *t);
int tokenizer_bos_id(const tokenizer *t);
int tokenizer_eos_id(const tokenizer *t);

#endif
