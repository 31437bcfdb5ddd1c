/* msgnp_encode.c — the server's outgoing msgpack-numpy messages (see msgnp.h; docs/protocol.md 4): the reply with its
 * actions as a "<f8" ndarray and the timings, the batch reply, and the metadata frame from the policy's JSON, each
 * written after `headroom` unused bytes (libwebsockets' frame header). Decodes nothing (msgnp.c) and decides nothing
 * about what a reply holds (engine.c). */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#include "msgnp.h"

static int begin(msgpack_sbuffer *sb, msgpack_packer *pk, size_t headroom) {
    static const uint8_t zeros[64];
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    for (size_t left = headroom; left;) {
        size_t n = left < sizeof zeros ? left : sizeof zeros;
        if (msgpack_sbuffer_write(sb, (const char *)zeros, n)) return -1;
        left -= n;
    }
    return 0;
}

static int pack_cstr(msgpack_packer *pk, const char *s) {
    return msgpack_pack_str_with_body(pk, s, strlen(s));
}
static int pack_bin_key(msgpack_packer *pk, const char *s) {
    return msgpack_pack_bin_with_body(pk, s, strlen(s));
}

static pi0_status finish(msgpack_sbuffer *sb, int bad, size_t headroom, msgnp_buf *out) {
    if (bad) {
        msgpack_sbuffer_destroy(sb);
        return PI0_ERR_NOMEM;
    }
    out->data = (uint8_t *)sb->data;
    out->len = sb->size;
    out->headroom = headroom;
    return PI0_OK;
}

static int pack_reply(msgpack_packer *pkp, const double *actions, int h, int d, double policy_infer_ms,
                      double server_infer_ms, const double *prev_total_ms) {
    msgpack_packer pk = *pkp;
    int bad = msgpack_pack_map(&pk, 3);
    bad |= pack_cstr(&pk, "actions");
    bad |= msgpack_pack_map(&pk, 4); /* numpy array: bin keys, in openpi's order */
    bad |= pack_bin_key(&pk, "__ndarray__");
    bad |= msgpack_pack_true(&pk);
    bad |= pack_bin_key(&pk, "data");
    bad |= msgpack_pack_bin_with_body(&pk, actions, (size_t)h * d * sizeof(double));
    bad |= pack_bin_key(&pk, "dtype");
    bad |= pack_cstr(&pk, "<f8");
    bad |= pack_bin_key(&pk, "shape");
    bad |= msgpack_pack_array(&pk, 2);
    bad |= msgpack_pack_int(&pk, h);
    bad |= msgpack_pack_int(&pk, d);
    bad |= pack_cstr(&pk, "policy_timing");
    bad |= msgpack_pack_map(&pk, 1);
    bad |= pack_cstr(&pk, "infer_ms");
    bad |= msgpack_pack_double(&pk, policy_infer_ms);
    bad |= pack_cstr(&pk, "server_timing");
    bad |= msgpack_pack_map(&pk, prev_total_ms ? 2 : 1);
    bad |= pack_cstr(&pk, "infer_ms");
    bad |= msgpack_pack_double(&pk, server_infer_ms);
    if (prev_total_ms) {
        bad |= pack_cstr(&pk, "prev_total_ms");
        bad |= msgpack_pack_double(&pk, *prev_total_ms);
    }
    return bad;
}

pi0_status msgnp_encode_reply(const double *actions, int h, int d, double policy_infer_ms, double server_infer_ms,
                              const double *prev_total_ms, size_t headroom, msgnp_buf *out) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    memset(out, 0, sizeof *out);
    int bad = begin(&sb, &pk, headroom);
    bad |= pack_reply(&pk, actions, h, d, policy_infer_ms, server_infer_ms, prev_total_ms);
    return finish(&sb, bad, headroom, out);
}

pi0_status msgnp_encode_batch_reply(const msgnp_item *items, int n, int h, int d, size_t headroom, msgnp_buf *out) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    memset(out, 0, sizeof *out);
    int bad = begin(&sb, &pk, headroom);
    bad |= msgpack_pack_map(&pk, 1);
    bad |= pack_cstr(&pk, "batch");
    bad |= msgpack_pack_array(&pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        if (items[i].actions) {
            bad |= pack_reply(&pk, items[i].actions, h, d, items[i].policy_infer_ms, items[i].server_infer_ms, NULL);
        } else {
            const char *e = items[i].error ? items[i].error : "out of memory";
            bad |= msgpack_pack_map(&pk, 1);
            bad |= pack_cstr(&pk, "error");
            bad |= msgpack_pack_str_with_body(&pk, e, strlen(e));
        }
    }
    return finish(&sb, bad, headroom, out);
}

static int pack_json(msgpack_packer *pk, json_t *j, int depth) {
    if (depth > 16) return -1;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        int bad = msgpack_pack_map(pk, json_object_size(j));
        json_object_foreach(j, k, v) { bad |= pack_cstr(pk, k); bad |= pack_json(pk, v, depth + 1); }
        return bad;
    }
    case JSON_ARRAY: {
        int bad = msgpack_pack_array(pk, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++) bad |= pack_json(pk, json_array_get(j, i), depth + 1);
        return bad;
    }
    case JSON_STRING: return msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return msgpack_pack_int64(pk, json_integer_value(j));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    default: return msgpack_pack_nil(pk);
    }
}

pi0_status msgnp_encode_metadata(const char *json, size_t headroom, msgnp_buf *out, char *err, size_t errlen) {
    json_error_t je;
    memset(out, 0, sizeof *out);
    json_t *j = json_loads(json ? json : "{}", JSON_DECODE_ANY, &je);
    if (!j) {
        if (err && errlen) snprintf(err, errlen, "metadata JSON, line %d: %s", je.line, je.text);
        return PI0_ERR_FORMAT;
    }
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int bad = begin(&sb, &pk, headroom);
    bad |= pack_json(&pk, j, 0);
    json_decref(j);
    pi0_status st = finish(&sb, bad, headroom, out);
    if (st) {
        if (err && errlen) snprintf(err, errlen, "metadata: out of memory or nested deeper than 16 levels");
        return st;
    }
    return PI0_OK;
}
