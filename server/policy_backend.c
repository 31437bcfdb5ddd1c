/* policy_backend.c — srv_backend over pi0_policy_* (see policy_backend.h): prepare, run, free. Errors carry the
 * policy's own message (pi0_last_error is per thread, and each call here reads it on the thread that failed). No
 * batching or threading of its own: engine.c decides what runs when. */
#include "policy_backend.h"

#include <stdio.h>

static int prepare(void *ctx, const pi0_observation *obs, void **prepared, char *err, size_t errlen) {
    pi0_prepared *x = NULL;
    pi0_status st = pi0_policy_prepare(ctx, obs, &x);
    if (st != PI0_OK) {
        snprintf(err, errlen, "%s (%s)", pi0_last_error(), pi0_status_str(st));
        return -1;
    }
    *prepared = x;
    return 0;
}

static int run(void *ctx, void *const *prepared, int n, double *actions, float *chunks, double *model_ms,
               int *zero_chunks, char *err, size_t errlen) {
    pi0_policy_timing t = {0};
    pi0_status st = pi0_policy_run(ctx, (pi0_prepared *const *)prepared, n, actions, &t);
    if (st == PI0_OK && chunks) {   /* the model-space chunks: each connection's real-time chunking state */
        pi0_policy_info info;
        pi0_model_info mi;
        pi0_policy_get_info(ctx, &info);
        pi0_model_get_info(info.model, &mi);
        for (int b = 0; b < n && st == PI0_OK; b++)
            st = pi0_policy_chunk(ctx, b, chunks + (size_t)b * mi.action_horizon * mi.action_dim);
    }
    if (st != PI0_OK) {
        snprintf(err, errlen, "%s (%s)", pi0_last_error(), pi0_status_str(st));
        return -1;
    }
    *model_ms = t.model_ms;
    *zero_chunks = t.zero_chunks;
    return 0;
}

static void release(void *prepared) { pi0_prepared_free(prepared); }

static int device_memory(void *ctx, size_t *used, size_t *total) {
    pi0_policy_info info;
    pi0_policy_get_info(ctx, &info);
    return pi0_session_memory(info.session, used, total) == PI0_OK ? 0 : -1;
}

void policy_backend_init(srv_backend *b, pi0_policy *p) {
    pi0_policy_info info;
    pi0_model_info mi;
    pi0_policy_get_info(p, &info);
    pi0_model_get_info(info.model, &mi);
    *b = (srv_backend){
        .ctx = p,
        .action_horizon = info.action_horizon,
        .action_dim = info.action_dim,
        .max_batch = info.max_batch > 0 ? info.max_batch : 1,
        .noise_h = mi.action_horizon,   /* the model's chunk (a LeRobot policy returns its first n_action_steps) */
        .noise_a = mi.action_dim,
        .metadata_json = info.metadata_json,
        .model = mi.fast ? "pi0_fast" : mi.pi05 ? "pi05" : "pi0",
        .task_is_prompt = info.lerobot != NULL,
        .prepare = prepare,
        .run = run,
        .release = release,
        .device_memory = device_memory,
    };
}
