/* model.h — the π0 / π0.5 forward pass (spec 3.4-3.12), written once against backend.h.
 * A model_sess owns every activation buffer of one inference stream, sized at create for max_batch;
 * model_infer allocates nothing on the backend. */
#ifndef PI0_MODEL_H
#define PI0_MODEL_H

#include "backend.h"
#include "config.h"
#include "weights.h"

typedef struct model_sess model_sess;

typedef struct {
    double vision_ms, prefill_ms, denoise_ms, total_ms;
} model_timing;

pi0_status model_sess_create(model_sess **out, pi0_backend *be, const pi0_config *c, pi0_weights *w,
                             int max_batch, int steps);
void model_sess_free(model_sess *s);
/* 1 = synchronise and read the clock between stages (no CUDA graph): fills the vision/prefill/denoise
 * split of model_timing. 0 (default) = graph replay where the backend has graphs; only total_ms. */
void model_set_stage_timing(model_sess *s, int on);
/* Inputs must already be validated (api.c), except for what late(in, arg) checks (late may be NULL). With graphs
 * it runs on the host after the work is enqueued, before the result is read: while a replay computes, or after a
 * new key's capture; its failure is returned once the backend no longer reads the inputs. Without graphs it runs
 * first. dump may be NULL. */
typedef pi0_status (*model_check_fn)(const pi0_inputs *in, const void *arg);
pi0_status model_infer(model_sess *s, const pi0_inputs *in, float *actions, pi0_dump_fn dump, void *user,
                       model_timing *timing, model_check_fn late, const void *arg);

/* The expert layers of one denoise step, op by op (backend.h pi0_expert_step). */
void expert_layers(pi0_backend *be, const pi0_expert_step *e);

#endif
