/* api.h — what the files of the API layer share, and nothing else includes (internal: include/pi0.h is the public
 * header): the two handles' structs (struct pi0_model, loaded by api_model.c; struct pi0_session, api_session.c),
 * the input checks pi0_infer runs (api_inputs.c) and the path helpers the loader and checkpoint.c use. The layer
 * validates everything a caller, a file or a peer can get wrong and reports it through pi0_status +
 * pi0_last_error(), never by aborting; the math lives in model.c, files in safetensors.c, the tensor table in
 * weights.c. */
#ifndef PI0_API_H
#define PI0_API_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "pi0.h"
#include "safetensors.h"
#include "weights.h"

struct pi0_model {
    char *dir;
    char *root;            /* the checkpoint directory that holds assets/ */
    const char *format;    /* "safetensors", "lerobot", "orbax-ocdbt", "orbax-zarr" */
    pi0_config cfg;
    st_file *file;
    pi0_weights w;
    const pi0_backend_provider *prov;   /* the backend sessions of this model run on (backends.c) */
    int n_threads, device;
    double load_s;         /* Orbax: reading and re-laying out the parameters */
    void *store;           /* the weights in a store the backend owns (device memory on CUDA), or NULL */
    pi0_quant quant;       /* the 8-bit precision and its stages (stages 0: bf16 throughout) */
};

struct pi0_session {
    const pi0_model *m;
    pi0_backend *be;
    model_sess *ms;        /* π0, π0.5 */
    fast_sess *fs;         /* π0-FAST */
    int max_batch, max_decoding_steps;
    pi0_dump_fn dump;
    void *dump_user;
    model_timing timing;
};

/* dir + "/" + name, malloc'd; NULL when out of memory */
char *api_path_join(const char *dir, const char *name);
/* 1 when path exists */
int api_path_exists(const char *path);

/* pi0_infer's checks of its inputs (api_inputs.c), run in this order: shapes, ranges and tokens; the real-time
 * chunking fields; the pixel values (scanned while a queued run computes). Each sets the error and returns it. */
pi0_status api_check_inputs(const pi0_session *s, const pi0_inputs *in);
pi0_status api_check_rtc(const pi0_session *s, const pi0_inputs *in);
pi0_status api_check_images(const pi0_inputs *in, const pi0_config *c);
/* The first index of x[0..n) that is not finite or lies outside [lo, hi], or -1. */
long long api_bad_float(const float *x, size_t n, float lo, float hi);

#endif
