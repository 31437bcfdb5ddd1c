/* orbax.h — openpi's Orbax checkpoints (what openpi publishes and what its JAX trainer writes), read in C:
 * the params item's PyTree metadata, its arrays (zarr v2 inside OCDBT, or one directory per array), and
 * openpi's JAX parameter tree mapped onto the PyTorch tensor names and layouts that weights.c binds, exactly
 * as openpi's examples/convert_jax_model_to_pytorch.py does (docs/checkpoints.md). Every dimension comes
 * from the parameter shapes; π0 / π0.5 from the parameters present. The result is an in-memory st_file, so
 * the rest of the engine does not know which format it came from. Not handled: LoRA adapters (refused). */
#ifndef PI0_ORBAX_H
#define PI0_ORBAX_H

#include <stddef.h>

#include "config.h"
#include "safetensors.h"

typedef struct {
    int ocdbt;              /* 1 = OCDBT key-value store, 0 = one zarr directory per array */
    int nnx_value;          /* 1 = leaves under a trailing "value" key (nnx state, training runs) */
    int n_leaves;           /* arrays in the tree */
    int n_bf16, n_f32, n_f16;
    double decode_s;        /* wall time of reading + decompressing + re-laying out the arrays */
    size_t bytes;           /* host bytes of the mapped tensors */
} orbax_info;

/* Finds the params directory of a checkpoint: dir/params, dir itself when it is one, or, for a training
 * run directory, <dir>/<highest step>/params. Returns 1 and writes the path (n bytes), else 0. */
int orbax_find_params(const char *dir, char *params, size_t n);
/* The most bytes of parameters one load may map; a checkpoint that needs more is refused before anything is
 * allocated. Default SIZE_MAX (memory is the limit: real checkpoints are several GB); the fuzz harness lowers it,
 * since a few KB of metadata with absent chunks (fill values) can describe any model size. */
extern size_t orbax_limit_bytes;
/* Reads every parameter of params_dir. cfg gets every dimension and pi05; its action_horizon and
 * max_token_len are openpi's defaults (50; 48 / 200) for the caller to override. */
pi0_status orbax_load(st_file **out, pi0_config *cfg, orbax_info *info, const char *params_dir, int quiet);

#endif
