/* fast_tokenizer.h — π0-FAST's action tokenizer on the CPU (docs/fast.md): the FAST processor's decoding (Hugging
 * Face `tokenizer.json` BPE with the ByteLevel decoder, code points -> DCT coefficients, orthonormal inverse DCT),
 * openpi's FASTTokenizer.extract_actions around it (PaliGemma ids -> text -> "Action: ... |" -> FAST ids), and
 * openpi's FAST prompt (FASTTokenizer.tokenize at inference). The model that generates the tokens is not here, and
 * neither is encoding actions into tokens (training only).
 * A loaded fast_tokenizer is immutable: share it between threads. Letters: H action horizon, A action dim. */
#ifndef PI0_FAST_TOKENIZER_H
#define PI0_FAST_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"
#include "tokenizer.h"

typedef struct fast_tokenizer fast_tokenizer;

typedef struct {
    double scale;         /* "scale": the DCT coefficients were multiplied by it and rounded */
    int64_t min_token;    /* "min_token": the coefficient that code point 0 stands for */
    int64_t vocab_size;   /* "vocab_size": the size the BPE was trained for (decoding does not use it) */
    int time_horizon;     /* "time_horizon", 0 when null: H when a call passes 0 */
    int action_dim;       /* "action_dim", 0 when null: A when a call passes 0 */
    size_t n_ids;         /* tokenizer.json's vocabulary: its largest id + 1 */
} fast_tokenizer_info;

/* Loads DIR/tokenizer.json and DIR/processor_config.json (DIR/preprocessor_config.json when that is absent), and
 * checks DIR/tokenizer_config.json when present: what AutoProcessor.from_pretrained("physical-intelligence/fast")
 * reads. Only the processor's own format is accepted: a BPE model, ByteLevel pre-tokenizer and decoder, no
 * normalizer, no added tokens, no clean-up of spaces; anything else is refused naming the field. */
pi0_status fast_tokenizer_load(fast_tokenizer **out, const char *dir);
/* The same from memory (fuzz target): tokenizer.json's text and processor_config.json's; label names them. */
pi0_status fast_tokenizer_parse(fast_tokenizer **out, const char *label, const char *tokenizer_json, size_t tlen,
                                const char *config_json, size_t clen);
void fast_tokenizer_free(fast_tokenizer *f);
void fast_tokenizer_get_info(const fast_tokenizer *f, fast_tokenizer_info *info);

/* Why a decode gave zeros instead of actions: the places where openpi and the processor fall back to zeros. */
typedef enum {
    FAST_DECODED = 0,     /* actions decoded */
    FAST_NO_ACTION,       /* the generated text has no "Action: " (extract_actions returns zeros) */
    FAST_BAD_ID,          /* a FAST id below 0, i.e. a PaliGemma id among the last 128 (the processor's decode fails) */
    FAST_BAD_SIZE,        /* the BPE text holds a number of coefficients other than H * A (the processor's decode fails) */
} fast_outcome;
const char *fast_outcome_str(fast_outcome o);   /* a short sentence for logs */

/* openpi's map between PaliGemma and FAST ids (docs/fast.md 2.3), the same both ways: vocab - 1 - 128 - id (the last 128 PaliGemma
 * ids, <seg000>..<seg127>, are skipped). vocab is the PaliGemma model's piece count. */
static inline int64_t fast_tokenizer_map_id(int vocab, int64_t id) { return (int64_t)vocab - 1 - 128 - id; }

/* The BPE decode as code points (Hugging Face tokenizers' Tokenizer.decode with the ByteLevel decoder, docs/fast.md
 * 2.4): ids with no vocabulary entry are skipped, each token's characters become bytes through the byte-level table
 * (a token with a character outside it contributes its own UTF-8), and the bytes are read as UTF-8 with U+FFFD for
 * each maximal invalid subsequence. Writes up to cap code points and the full count to *n_cps. An id outside
 * [0, 2^32) is PI0_ERR_ARG (the processor's decode raises on it). */
pi0_status fast_tokenizer_decode(const fast_tokenizer *f, const int64_t *ids, size_t n, uint32_t *cps, size_t cap,
                                 size_t *n_cps);

/* The processor's decode of one chunk (docs/fast.md 2.5, 2.6): the BPE text's code points + min_token are the DCT
 * coefficients, row-major (H, A), divided by scale, then an orthonormal inverse DCT-II along H
 * (scipy.fft.idct(norm="ortho", axis=0)). actions: (H, A) float64. H or A of 0 take the processor config's. Where the
 * processor falls back to zeros (a negative id, a size mismatch) actions are zeros, *outcome says why, and the status
 * is still PI0_OK. On an error status (bad H or A, no memory) the outputs mean nothing. */
pi0_status fast_tokenizer_actions(const fast_tokenizer *f, const int64_t *ids, size_t n, int horizon, int action_dim,
                                  double *actions, fast_outcome *outcome);

/* openpi's FASTTokenizer.extract_actions (docs/fast.md 2): decodes the generated PaliGemma ids, takes the text after
 * the first "Action: " up to a "|" or a second "Action: ", strips it as Python's str.strip() does, encodes it again
 * with PaliGemma's tokenizer (pg), maps the ids to FAST ids and decodes them as fast_tokenizer_actions does.
 * actions: (H, A) float64; zeros and an outcome other than FAST_DECODED where openpi falls back. An id outside
 * PaliGemma's vocabulary is PI0_ERR_ARG (openpi's SentencePiece decode raises). */
pi0_status fast_tokenizer_extract_actions(const fast_tokenizer *f, const tokenizer *pg, const int32_t *tokens, size_t n,
                                          int horizon, int action_dim, double *actions, fast_outcome *outcome);

/* openpi's FAST prompt (FASTTokenizer.tokenize at inference, docs/fast.md 1; fast_prompt.c): BOS + encode("Task:
 * <text>, State: <bins>;\n") where <text> is prompt.lower().strip().replace("_", " ") with Python's Unicode rules and
 * <bins> the state's np.digitize bins on [-1, 1] minus one (-1 .. 255) joined by spaces. tokens, mask and ar_mask
 * hold max_len entries: padded with 0 / mask 0, or truncated (a warning, once per process); ar_mask is all 0 (no
 * postfix at inference); *n_valid (may be NULL) gets the real tokens. The prompt must be UTF-8 and the state finite
 * (PI0_ERR_ARG naming what is wrong). */
pi0_status fast_tokenizer_prompt(const tokenizer *pg, const char *prompt, const double *state, int n_state, int max_len,
                                 int32_t *tokens, uint8_t *mask, uint8_t *ar_mask, int *n_valid);

/* Python's str.lower() on UTF-8 text (full mappings: U+0130 becomes two characters; the final-sigma rule), with the
 * Unicode tables of the Python that made fast_unicode.h. Writes up to cap bytes (out may be NULL when cap is 0) and
 * the full length to *n; text that is not UTF-8 is PI0_ERR_ARG. */
pi0_status fast_py_lower(const char *s, size_t len, char *out, size_t cap, size_t *n);
/* Python's str.isspace() for one code point (what str.strip() removes). */
int fast_py_isspace(uint32_t c);

#endif
