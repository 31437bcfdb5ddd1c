/* fast_json.h — a strict JSON reader for Hugging Face `tokenizer.json` files: the FAST action tokenizer's vocabulary
 * has a token "\u0000", and jansson refuses NUL bytes in object keys, so this reader keeps every string as bytes and
 * a length. It accepts exactly what serde_json (the reader of Hugging Face's `tokenizers`) accepts for these files:
 * UTF-8 text, one value, no lone surrogates in escapes, no raw control characters in strings; objects with a key
 * twice are refused (serde would keep one of them silently). Syntax errors name the line and column (in
 * characters); what the fields mean is checked, and named, by the caller.
 * It builds a small tree and does nothing else. */
#ifndef PI0_FAST_JSON_H
#define PI0_FAST_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

typedef enum { FAST_JSON_NULL, FAST_JSON_BOOL, FAST_JSON_NUMBER, FAST_JSON_STRING, FAST_JSON_ARRAY, FAST_JSON_OBJECT } fast_json_type;

typedef struct fast_json fast_json;
struct fast_json {
    fast_json_type type;
    int boolean;
    char *s;              /* STRING: the decoded UTF-8 bytes (may hold NUL), NUL-terminated; NUMBER: the literal */
    size_t len;           /* STRING / NUMBER: bytes in s */
    size_t n;             /* ARRAY: values; OBJECT: members */
    fast_json *items;     /* ARRAY: n values; OBJECT: 2n, key (a STRING) then value */
};

/* Parses len bytes; label names the source in messages. *out is NULL on failure. Nesting deeper than 64 is refused. */
pi0_status fast_json_parse(fast_json **out, const char *label, const char *text, size_t len);
void fast_json_free(fast_json *v);

/* The member `key` (a C string: no NUL inside) of an object, or NULL (also when v is not an object). */
const fast_json *fast_json_get(const fast_json *v, const char *key);
/* A NUMBER written as an integer (no fraction, no exponent) within int64: 1 and *out; else 0. */
int fast_json_int(const fast_json *v, int64_t *out);
/* The value's type in words, for messages ("a string", "null"). */
const char *fast_json_type_name(const fast_json *v);

#endif
