/* engine.h — the inference pipeline behind the websocket layer. Request bytes are decoded (msgnp) and
 * prepared on a few threads, gathered into batches (up to max_batch requests within batch_window_ms of
 * the first) and run on one worker thread; finished jobs wait in a queue for the service thread, which
 * is woken through notify(). No websocket code here, and no policy code either: the policy is reached
 * through srv_backend (policy_backend.c binds it to pi0_policy_*; the tests bind a test double).
 * Jobs carry the id of their connection, never a pointer to it: a connection may close mid-request. */
#ifndef PI0_SERVER_ENGINE_H
#define PI0_SERVER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "pi0.h"

/* What the engine needs from a policy. prepare is called concurrently from several threads; run and
 * release from one thread at a time. Both return 0, or -1 with a message in err. */
typedef struct {
    void *ctx;
    int action_horizon, action_dim;  /* the reply's [H, D] */
    int max_batch;                   /* largest n run accepts */
    int noise_h, noise_a;            /* the shape a request's `noise` must have: [H, model action dim] */
    int task_is_prompt;              /* a LeRobot policy: the request's "task" is the prompt (as in LeRobot's batches) */
    const char *metadata_json;       /* sent to each client first */
    const char *model;               /* the model type, "pi0" | "pi05" | "pi0_fast" (GET /metrics); NULL = none */
    int (*prepare)(void *ctx, const pi0_observation *obs, void **prepared, char *err, size_t errlen);
    /* chunks (may be NULL): each element's model-space chunk [noise_h, noise_a] (real-time chunking's state);
     * *zero_chunks: π0-FAST's elements whose tokens held no actions (openpi's zero chunk) */
    int (*run)(void *ctx, void *const *prepared, int n, double *actions, float *chunks, double *model_ms,
               int *zero_chunks, char *err, size_t errlen);
    void (*release)(void *prepared);
    /* the device's memory in use and in all (GET /metrics); NULL or -1 = none (the CPU backend) */
    int (*device_memory)(void *ctx, size_t *used, size_t *total);
} srv_backend;

typedef struct {
    int max_batch;                   /* requests per run, 1..backend max_batch; 0 = 1 */
    double batch_window_ms;          /* after the first request, wait this long for more (0 = take what is queued) */
    double max_wait_ms;              /* and while requests that have arrived are still being decoded / prepared, wait
                                        for them up to this long (0 = don't): they join the batch instead of making
                                        the next one. Default (negative) 50 */
    int prepare_threads;             /* 0 = 2 */
    size_t max_objects;              /* msgpack objects per request (msgnp_limits); 0 = default */
    /* real-time chunking's defaults for requests that name no value (server options; LeRobot's RTCConfig defaults) */
    int rtc_horizon;                 /* execution_horizon; 0 = 10 */
    pi0_rtc_schedule rtc_schedule;   /* PI0_RTC_ZEROS (0) is a valid schedule: rtc_schedule_set says it was given */
    int rtc_schedule_set;
    float rtc_max_weight;            /* 0 = 10 */
    pi0_rtc_mode rtc_mode;           /* the guidance's form for requests that name none: PI0_RTC_LEROBOT or _EXACT */
    void (*notify)(void *user);      /* called from worker threads when jobs are done; must be thread-safe */
    void *notify_user;
} engine_params;

typedef struct engine_job engine_job;
struct engine_job {
    uint64_t conn_id;
    char *error;                     /* NULL on success, else what went wrong (sent to the client) */
    double *actions;                 /* [H, D] on success */
    float *chunk_in;                 /* the connection's previous model-space chunk [noise_h, noise_a], or NULL */
    float *chunk_out;                /* this request's model-space chunk (the connection keeps it), or NULL */
    double model_ms;                 /* the batch's model time: openpi's policy_timing.infer_ms */
    double server_ms;                /* from the start of decoding to the end of the run (queueing included) */
    int batch;                       /* requests in the run that served this one */
    /* a batch request ({"batch": [...]}): its elements, each served as a request of its own (error or actions);
     * n_items 0 for a plain request */
    engine_job **items;
    int n_items;
    /* internal */
    uint8_t *msg;
    size_t len;
    void *prepared;
    double t_start;
    engine_job *next;
    engine_job *parent;              /* an element of a batch request: the request, which is done with its last */
    int index, remaining;            /* the element's index; the elements (+ the prepare thread) still unfinished */
};

#define ENGINE_LAT_BUCKETS 14
/* upper bounds of the latency buckets, ms (the last bucket, +Inf, is extra) */
extern const double engine_lat_bounds[ENGINE_LAT_BUCKETS];

typedef struct {
    uint64_t requests, errors, batches, batched_requests;
    int largest_batch;
    uint64_t batch_sizes[257];       /* runs of each batch size (1..256) */
    /* latency histograms (Prometheus buckets, cumulative counts taken at read), ms: a request's server time (decode
     * to reply, queueing included) and a batch's model time */
    uint64_t req_lat[ENGINE_LAT_BUCKETS + 1], run_lat[ENGINE_LAT_BUCKETS + 1];
    double req_lat_sum, run_lat_sum;
    int queued, preparing;           /* at read: requests ready for the worker, and being decoded / prepared */
    uint64_t zero_chunks;            /* π0-FAST: replies whose chunk is openpi's zero fallback */
} engine_stats;

typedef struct engine engine;

pi0_status engine_create(engine **out, const srv_backend *b, const engine_params *p);
/* Stops and joins the threads; queued jobs are dropped. */
void engine_free(engine *e);
/* Queues one request; takes ownership of msg (malloc'd) and of chunk (the connection's previous model-space chunk
 * [noise_h, noise_a], malloc'd, or NULL). Returns 0, or -1 when out of memory (msg and chunk are freed then). */
int engine_submit(engine *e, uint64_t conn_id, uint8_t *msg, size_t len, float *chunk);
/* Every finished job, oldest first (NULL when none); free each with engine_job_free. */
engine_job *engine_take_done(engine *e);
/* How many connections could send a request soon: open, not closing, with no request in the engine (one whose reply
 * waits to go out counts). 0, with nothing being prepared and no finished job untaken, ends the batch window at once:
 * no request can join. The websocket layer recomputes it after every event. Never called: -1, the window always
 * runs. */
void engine_set_idle_clients(engine *e, int n);
void engine_job_free(engine_job *j);
/* Jobs submitted and not yet taken. */
int engine_pending(engine *e);
void engine_get_stats(engine *e, engine_stats *s);

#endif
