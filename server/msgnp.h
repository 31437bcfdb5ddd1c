/* msgnp.h — openpi's msgpack-numpy wire format (docs/protocol.md 4, openpi-client's
 * msgpack_numpy.py) in C over msgpack-c: request bytes -> pi0_observation (msgnp.c), and the metadata and reply
 * messages back (msgnp_encode.c). Owns nothing of the policy: it only checks the structure, dtypes and sizes; whether a
 * key or shape suits the robot is the policy's business (pi0_policy_prepare).
 * Encoded messages start with `headroom` unused bytes so libwebsockets can write its frame header there
 * (LWS_PRE) without a copy. */
#ifndef PI0_SERVER_MSGNP_H
#define PI0_SERVER_MSGNP_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

#define MSGNP_MAX_ARRAYS 64   /* named arrays per observation (openpi's examples send at most 6) */
#define MSGNP_MAX_KEY 256     /* bytes of a flattened key, "images/cam_high" */
#define MSGNP_MAX_BATCH 256   /* observations per batch request */
#define MSGNP_MAX_DEPTH 32    /* msgpack nesting (msgpack-c's own parser stack is 32 deep) */

typedef struct {
    size_t max_objects;       /* msgpack objects per message; 0 = 65536. Bounds msgpack-c's allocation */
    int noise_h, noise_a;     /* shape [H, A] a `noise` array must have (model horizon, model action dim) */
    const char *task_key;     /* NULL, or a second level-0 key read as the prompt ("task" for LeRobot policies) */
} msgnp_limits;

/* A decoded request. obs.arrays point into the request buffer when its bytes can be used in place
 * (native byte order, aligned), else into copies owned here: keep the buffer alive as long as this. */
typedef struct msgnp_request {
    pi0_observation obs;
    pi0_array arrays[MSGNP_MAX_ARRAYS];
    char keys[MSGNP_MAX_ARRAYS][MSGNP_MAX_KEY];
    void *copies[MSGNP_MAX_ARRAYS];  /* byte-swapped / realigned data, or NULL */
    char *prompt;                    /* NUL-terminated UTF-8 copy, or NULL */
    float *noise;                    /* [H, A] float32 copy, or NULL */
    /* real-time chunking ("rtc": {...}); has_rtc 0 = not asked for. -1 / 0 = not given (the server's defaults) */
    int has_rtc, rtc_executed, rtc_delay, rtc_horizon, rtc_schedule, rtc_mode;   /* rtc_mode: pi0_rtc_mode, -1 */
    double rtc_max_weight;
    float *rtc_prev;                 /* "prev_chunk" [rtc_n_prev, A] float32 copy (model space), or NULL */
    int rtc_n_prev;
    /* a batch request ({"batch": [obs, ...]}, openpi PR #941): the elements, each decoded as a request of its own;
     * an element that does not decode has batch[i] NULL and its reason in batch_err[i] (the others are served) */
    struct msgnp_request **batch;
    char **batch_err;
    int n_batch;
    /* keys whose values no policy reads (str, bin, nil, ext; openpi ignores them too): when the policy then says
     * such a key is missing, the server tells what was sent instead */
    char unread[4][MSGNP_MAX_KEY];
    const char *unread_type[4];
    int n_unread;
} msgnp_request;

/* Decodes one request message (a msgpack map, str/bin keys; nested maps flattened with '/'; numpy
 * arrays and scalars; `prompt` as str, UTF-8 bin or numpy unicode; `noise` [H, A] float). Refuses
 * trailing bytes, containers that claim more items than bytes remain, over max_objects objects, nesting
 * deeper than MSGNP_MAX_DEPTH, unknown dtypes, shapes whose size overflows or disagrees with the data,
 * invalid UTF-8. On failure *out is NULL and err holds "where: what was expected, what was found". */
pi0_status msgnp_decode(const uint8_t *buf, size_t len, const msgnp_limits *lim, msgnp_request **out,
                        char *err, size_t errlen);
void msgnp_request_free(msgnp_request *r);

/* An encoded message: data[headroom .. len) is the msgpack; free(data) releases it. */
typedef struct {
    uint8_t *data;
    size_t len, headroom;
} msgnp_buf;

/* The reply map: actions [h, d] as a "<f8" ndarray (bin keys), policy_timing {infer_ms},
 * server_timing {infer_ms[, prev_total_ms]} (prev_total_ms NULL = absent, as in a connection's first reply). */
pi0_status msgnp_encode_reply(const double *actions, int h, int d, double policy_infer_ms, double server_infer_ms,
                              const double *prev_total_ms, size_t headroom, msgnp_buf *out);
/* One element of a batch reply: its actions [h, d] and timings, or an error. */
typedef struct {
    const double *actions;           /* NULL when error */
    const char *error;
    double policy_infer_ms, server_infer_ms;
} msgnp_item;
/* The batch reply {"batch": [reply or {"error": str}, ...]}: each element as msgnp_encode_reply writes one (without
 * prev_total_ms), or a map with the element's error. */
pi0_status msgnp_encode_batch_reply(const msgnp_item *items, int n, int h, int d, size_t headroom, msgnp_buf *out);
/* The metadata frame from the policy's metadata JSON (objects -> maps with str keys, JSON integers ->
 * msgpack ints, reals -> float64, as Python's msgpack packs openpi's config values). */
pi0_status msgnp_encode_metadata(const char *json, size_t headroom, msgnp_buf *out, char *err, size_t errlen);
/* Length (1-4) of the strict UTF-8 sequence at s, 0 if none starts there. */
size_t msgnp_utf8_seq(const uint8_t *s, size_t n);
/* Client-supplied text made safe for a log line or a websocket text frame: control bytes and bytes that are
 * not valid UTF-8 become \xNN, valid UTF-8 is kept. Writes at most cap bytes (NUL included); returns the length. */
size_t msgnp_escape(char *dst, size_t cap, const char *src);

#endif
