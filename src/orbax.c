/* orbax.c — see orbax.h. Steps: the leaves of `_METADATA` (Orbax's tree metadata; openpi saves the tree
 * {"params": <model params>}, nnx state adds a trailing "value"), each leaf's zarr metadata, the dimensions
 * inferred from a few shapes, every leaf checked against the shape those dimensions give, then one parallel
 * pass that decompresses each array a stacked layer at a time and re-lays it out into the PyTorch tensors
 * (docs/checkpoints.md, "From openpi's JAX tree to the tensor table"). JAX kernels are [in, out]; PyTorch
 * weights [out, in]; scanned layers carry the layer index first. */
#include "orbax.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocdbt.h"
#include "util.h"
#include "zarr.h"

#define VM "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
#define LM "paligemma_with_expert.paligemma.model.language_model."
#define EX "paligemma_with_expert.gemma_expert.model."
#define ENC "PaliGemma/img/Transformer/encoderblock/"
#define ATT ENC "MultiHeadDotProductAttention_0/"
#define LAY "PaliGemma/llm/layers/"

enum need { N_ALL, N_BOTH, N_PI0, N_PI05 };   /* N_ALL: PaliGemma (π0-FAST too); N_BOTH: π0 and π0.5 */
enum stack { S_NONE, S_VIS, S_LLM };   /* leading layer axis of SigLIP depth / Gemma depth */
/* COPY: same element order. T: the slice as [prod(dims[:split]), prod(dims[split:])] transposed.
 * HEADS: [N, D, H] -> N blocks [H, D] (einsum q / kv -> q_proj / k_proj / v_proj). PATCH: HWIO -> OIHW. */
enum op { OP_COPY, OP_T, OP_HEADS, OP_PATCH };
enum xd {
    X_P, X_C3, X_ONE, X_TWO, X_T, X_VW, X_VF, X_VH, X_VHD, X_VQ, X_LW, X_LF, X_LH, X_LK, X_LHD, X_LQ, X_LKV,
    X_EW, X_EF, X_EH, X_EK, X_EHD, X_EQ, X_EKV, X_E2, X_E3, X_A, X_V, X_NONE
};

typedef struct {
    const char *path;         /* below params/ */
    enum need need;
    enum stack stack;
    int ndim; enum xd d[5];   /* JAX shape, layer axis first when stacked */
    enum op op; int split;
    const char *pt[2];        /* PyTorch name(s), %d = layer; two when the axis after the layer axis picks k|v or gate|up */
    int ond; enum xd od[4];   /* PyTorch shape */
} jrow;

static const jrow rows[] = {
    {"PaliGemma/img/embedding/kernel", N_ALL, S_NONE, 4, {X_P, X_P, X_C3, X_VW}, OP_PATCH, 0, {VM "embeddings.patch_embedding.weight"}, 4, {X_VW, X_C3, X_P, X_P}},
    {"PaliGemma/img/embedding/bias", N_ALL, S_NONE, 1, {X_VW}, OP_COPY, 0, {VM "embeddings.patch_embedding.bias"}, 1, {X_VW}},
    {"PaliGemma/img/pos_embedding", N_ALL, S_NONE, 3, {X_ONE, X_T, X_VW}, OP_COPY, 0, {VM "embeddings.position_embedding.weight"}, 2, {X_T, X_VW}},
    {ENC "LayerNorm_0/scale", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.layer_norm1.weight"}, 1, {X_VW}},
    {ENC "LayerNorm_0/bias", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.layer_norm1.bias"}, 1, {X_VW}},
    {ENC "LayerNorm_1/scale", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.layer_norm2.weight"}, 1, {X_VW}},
    {ENC "LayerNorm_1/bias", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.layer_norm2.bias"}, 1, {X_VW}},
    {ATT "query/kernel", N_ALL, S_VIS, 3, {X_VW, X_VH, X_VHD}, OP_T, 1, {VM "encoder.layers.%d.self_attn.q_proj.weight"}, 2, {X_VQ, X_VW}},
    {ATT "query/bias", N_ALL, S_VIS, 2, {X_VH, X_VHD}, OP_COPY, 0, {VM "encoder.layers.%d.self_attn.q_proj.bias"}, 1, {X_VQ}},
    {ATT "key/kernel", N_ALL, S_VIS, 3, {X_VW, X_VH, X_VHD}, OP_T, 1, {VM "encoder.layers.%d.self_attn.k_proj.weight"}, 2, {X_VQ, X_VW}},
    {ATT "key/bias", N_ALL, S_VIS, 2, {X_VH, X_VHD}, OP_COPY, 0, {VM "encoder.layers.%d.self_attn.k_proj.bias"}, 1, {X_VQ}},
    {ATT "value/kernel", N_ALL, S_VIS, 3, {X_VW, X_VH, X_VHD}, OP_T, 1, {VM "encoder.layers.%d.self_attn.v_proj.weight"}, 2, {X_VQ, X_VW}},
    {ATT "value/bias", N_ALL, S_VIS, 2, {X_VH, X_VHD}, OP_COPY, 0, {VM "encoder.layers.%d.self_attn.v_proj.bias"}, 1, {X_VQ}},
    {ATT "out/kernel", N_ALL, S_VIS, 3, {X_VH, X_VHD, X_VW}, OP_T, 2, {VM "encoder.layers.%d.self_attn.out_proj.weight"}, 2, {X_VW, X_VQ}},
    {ATT "out/bias", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.self_attn.out_proj.bias"}, 1, {X_VW}},
    {ENC "MlpBlock_0/Dense_0/kernel", N_ALL, S_VIS, 2, {X_VW, X_VF}, OP_T, 1, {VM "encoder.layers.%d.mlp.fc1.weight"}, 2, {X_VF, X_VW}},
    {ENC "MlpBlock_0/Dense_0/bias", N_ALL, S_VIS, 1, {X_VF}, OP_COPY, 0, {VM "encoder.layers.%d.mlp.fc1.bias"}, 1, {X_VF}},
    {ENC "MlpBlock_0/Dense_1/kernel", N_ALL, S_VIS, 2, {X_VF, X_VW}, OP_T, 1, {VM "encoder.layers.%d.mlp.fc2.weight"}, 2, {X_VW, X_VF}},
    {ENC "MlpBlock_0/Dense_1/bias", N_ALL, S_VIS, 1, {X_VW}, OP_COPY, 0, {VM "encoder.layers.%d.mlp.fc2.bias"}, 1, {X_VW}},
    {"PaliGemma/img/Transformer/encoder_norm/scale", N_ALL, S_NONE, 1, {X_VW}, OP_COPY, 0, {VM "post_layernorm.weight"}, 1, {X_VW}},
    {"PaliGemma/img/Transformer/encoder_norm/bias", N_ALL, S_NONE, 1, {X_VW}, OP_COPY, 0, {VM "post_layernorm.bias"}, 1, {X_VW}},
    {"PaliGemma/img/head/kernel", N_ALL, S_NONE, 2, {X_VW, X_LW}, OP_T, 1, {"paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight"}, 2, {X_LW, X_VW}},
    {"PaliGemma/img/head/bias", N_ALL, S_NONE, 1, {X_LW}, OP_COPY, 0, {"paligemma_with_expert.paligemma.model.multi_modal_projector.linear.bias"}, 1, {X_LW}},
    {"PaliGemma/llm/embedder/input_embedding", N_ALL, S_NONE, 2, {X_V, X_LW}, OP_COPY, 0, {LM "embed_tokens.weight"}, 2, {X_V, X_LW}},
    {LAY "attn/q_einsum/w", N_ALL, S_LLM, 3, {X_LH, X_LW, X_LHD}, OP_HEADS, 0, {LM "layers.%d.self_attn.q_proj.weight"}, 2, {X_LQ, X_LW}},
    {LAY "attn/kv_einsum/w", N_ALL, S_LLM, 4, {X_TWO, X_LK, X_LW, X_LHD}, OP_HEADS, 0, {LM "layers.%d.self_attn.k_proj.weight", LM "layers.%d.self_attn.v_proj.weight"}, 2, {X_LKV, X_LW}},
    {LAY "attn/attn_vec_einsum/w", N_ALL, S_LLM, 3, {X_LH, X_LHD, X_LW}, OP_T, 2, {LM "layers.%d.self_attn.o_proj.weight"}, 2, {X_LW, X_LQ}},
    {LAY "mlp/gating_einsum", N_ALL, S_LLM, 3, {X_TWO, X_LW, X_LF}, OP_T, 1, {LM "layers.%d.mlp.gate_proj.weight", LM "layers.%d.mlp.up_proj.weight"}, 2, {X_LF, X_LW}},
    {LAY "mlp/linear", N_ALL, S_LLM, 2, {X_LF, X_LW}, OP_T, 1, {LM "layers.%d.mlp.down_proj.weight"}, 2, {X_LW, X_LF}},
    {LAY "pre_attention_norm/scale", N_ALL, S_LLM, 1, {X_LW}, OP_COPY, 0, {LM "layers.%d.input_layernorm.weight"}, 1, {X_LW}},
    {LAY "pre_ffw_norm/scale", N_ALL, S_LLM, 1, {X_LW}, OP_COPY, 0, {LM "layers.%d.post_attention_layernorm.weight"}, 1, {X_LW}},
    {"PaliGemma/llm/final_norm/scale", N_ALL, S_NONE, 1, {X_LW}, OP_COPY, 0, {LM "norm.weight"}, 1, {X_LW}},
    {LAY "attn/q_einsum_1/w", N_BOTH, S_LLM, 3, {X_EH, X_EW, X_EHD}, OP_HEADS, 0, {EX "layers.%d.self_attn.q_proj.weight"}, 2, {X_EQ, X_EW}},
    {LAY "attn/kv_einsum_1/w", N_BOTH, S_LLM, 4, {X_TWO, X_EK, X_EW, X_EHD}, OP_HEADS, 0, {EX "layers.%d.self_attn.k_proj.weight", EX "layers.%d.self_attn.v_proj.weight"}, 2, {X_EKV, X_EW}},
    {LAY "attn/attn_vec_einsum_1/w", N_BOTH, S_LLM, 3, {X_EH, X_EHD, X_EW}, OP_T, 2, {EX "layers.%d.self_attn.o_proj.weight"}, 2, {X_EW, X_EQ}},
    {LAY "mlp_1/gating_einsum", N_BOTH, S_LLM, 3, {X_TWO, X_EW, X_EF}, OP_T, 1, {EX "layers.%d.mlp.gate_proj.weight", EX "layers.%d.mlp.up_proj.weight"}, 2, {X_EF, X_EW}},
    {LAY "mlp_1/linear", N_BOTH, S_LLM, 2, {X_EF, X_EW}, OP_T, 1, {EX "layers.%d.mlp.down_proj.weight"}, 2, {X_EW, X_EF}},
    {LAY "pre_attention_norm_1/scale", N_PI0, S_LLM, 1, {X_EW}, OP_COPY, 0, {EX "layers.%d.input_layernorm.weight"}, 1, {X_EW}},
    {LAY "pre_ffw_norm_1/scale", N_PI0, S_LLM, 1, {X_EW}, OP_COPY, 0, {EX "layers.%d.post_attention_layernorm.weight"}, 1, {X_EW}},
    {"PaliGemma/llm/final_norm_1/scale", N_PI0, S_NONE, 1, {X_EW}, OP_COPY, 0, {EX "norm.weight"}, 1, {X_EW}},
    {LAY "pre_attention_norm_1/Dense_0/kernel", N_PI05, S_LLM, 2, {X_EW, X_E3}, OP_T, 1, {EX "layers.%d.input_layernorm.dense.weight"}, 2, {X_E3, X_EW}},
    {LAY "pre_attention_norm_1/Dense_0/bias", N_PI05, S_LLM, 1, {X_E3}, OP_COPY, 0, {EX "layers.%d.input_layernorm.dense.bias"}, 1, {X_E3}},
    {LAY "pre_ffw_norm_1/Dense_0/kernel", N_PI05, S_LLM, 2, {X_EW, X_E3}, OP_T, 1, {EX "layers.%d.post_attention_layernorm.dense.weight"}, 2, {X_E3, X_EW}},
    {LAY "pre_ffw_norm_1/Dense_0/bias", N_PI05, S_LLM, 1, {X_E3}, OP_COPY, 0, {EX "layers.%d.post_attention_layernorm.dense.bias"}, 1, {X_E3}},
    {"PaliGemma/llm/final_norm_1/Dense_0/kernel", N_PI05, S_NONE, 2, {X_EW, X_E3}, OP_T, 1, {EX "norm.dense.weight"}, 2, {X_E3, X_EW}},
    {"PaliGemma/llm/final_norm_1/Dense_0/bias", N_PI05, S_NONE, 1, {X_E3}, OP_COPY, 0, {EX "norm.dense.bias"}, 1, {X_E3}},
    {"action_in_proj/kernel", N_BOTH, S_NONE, 2, {X_A, X_EW}, OP_T, 1, {"action_in_proj.weight"}, 2, {X_EW, X_A}},
    {"action_in_proj/bias", N_BOTH, S_NONE, 1, {X_EW}, OP_COPY, 0, {"action_in_proj.bias"}, 1, {X_EW}},
    {"action_out_proj/kernel", N_BOTH, S_NONE, 2, {X_EW, X_A}, OP_T, 1, {"action_out_proj.weight"}, 2, {X_A, X_EW}},
    {"action_out_proj/bias", N_BOTH, S_NONE, 1, {X_A}, OP_COPY, 0, {"action_out_proj.bias"}, 1, {X_A}},
    {"state_proj/kernel", N_PI0, S_NONE, 2, {X_A, X_EW}, OP_T, 1, {"state_proj.weight"}, 2, {X_EW, X_A}},
    {"state_proj/bias", N_PI0, S_NONE, 1, {X_EW}, OP_COPY, 0, {"state_proj.bias"}, 1, {X_EW}},
    {"action_time_mlp_in/kernel", N_PI0, S_NONE, 2, {X_E2, X_EW}, OP_T, 1, {"action_time_mlp_in.weight"}, 2, {X_EW, X_E2}},
    {"action_time_mlp_in/bias", N_PI0, S_NONE, 1, {X_EW}, OP_COPY, 0, {"action_time_mlp_in.bias"}, 1, {X_EW}},
    {"action_time_mlp_out/kernel", N_PI0, S_NONE, 2, {X_EW, X_EW}, OP_T, 1, {"action_time_mlp_out.weight"}, 2, {X_EW, X_EW}},
    {"action_time_mlp_out/bias", N_PI0, S_NONE, 1, {X_EW}, OP_COPY, 0, {"action_time_mlp_out.bias"}, 1, {X_EW}},
    {"time_mlp_in/kernel", N_PI05, S_NONE, 2, {X_EW, X_EW}, OP_T, 1, {"time_mlp_in.weight"}, 2, {X_EW, X_EW}},
    {"time_mlp_in/bias", N_PI05, S_NONE, 1, {X_EW}, OP_COPY, 0, {"time_mlp_in.bias"}, 1, {X_EW}},
    {"time_mlp_out/kernel", N_PI05, S_NONE, 2, {X_EW, X_EW}, OP_T, 1, {"time_mlp_out.weight"}, 2, {X_EW, X_EW}},
    {"time_mlp_out/bias", N_PI05, S_NONE, 1, {X_EW}, OP_COPY, 0, {"time_mlp_out.bias"}, 1, {X_EW}},
};
#define N_ROWS ((int)(sizeof rows / sizeof *rows))

typedef struct {
    char *path;              /* below params/, '/'-joined, without a trailing "value" */
    char *name;              /* the array's name in the store: every key of the tree path joined by '.' */
    const jrow *row;         /* NULL: not a parameter the model uses */
    zarr_array z;
    size_t off[2], bytes;    /* layer 0 of each output in the tensor buffer; bytes of one output tensor */
    int nout;
} leaf;

typedef struct { int64_t v[X_NONE]; int64_t depth[3]; int64_t grid; } dimset;   /* grid: patches per image side */

static void leaves_free(leaf *lv, int n) {
    for (int i = 0; i < n; i++) { free(lv[i].path); free(lv[i].name); }
    free(lv);
}

/* ---- the tree: Orbax's _METADATA ---- */

static char *join_keys(json_t *km, size_t from, size_t to, char sep) {
    size_t len = 1;
    for (size_t i = from; i < to; i++) len += strlen(json_string_value(json_object_get(json_array_get(km, i), "key"))) + 1;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (size_t i = from; i < to; i++) {
        const char *k = json_string_value(json_object_get(json_array_get(km, i), "key"));
        p += sprintf(p, "%s%s", i > from ? (sep == '/' ? "/" : ".") : "", k);
    }
    return s;
}

static pi0_status read_tree(const char *params, leaf **out, int *n_out, int *nnx) {
    char path[4200];
    snprintf(path, sizeof path, "%s/_METADATA", params);
    size_t len;
    char *text = pi0_read_file(path, &len, 256u << 20);
    if (!text) { pi0_error_prefix("not an Orbax PyTree checkpoint"); return PI0_ERR_IO; }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *tree = json_object_get(root, "tree_metadata");
    free(text);
    pi0_status st = PI0_OK;
    leaf *lv = NULL;
    int n = 0, all_value = 1;
    if (!root) { st = pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, jerr.line, jerr.column, pi0_json_reason(jerr.text)); goto done; }
    if (!json_is_object(tree) || !json_object_size(tree)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: no \"tree_metadata\" object with leaves", path); goto done; }
    if (!(lv = calloc(json_object_size(tree), sizeof *lv))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    const char *tk;
    json_t *tv;
    json_object_foreach(tree, tk, tv) {
        json_t *km = json_object_get(tv, "key_metadata");
        size_t nk = json_is_array(km) ? json_array_size(km) : 0;
        int ok = nk >= 2 && nk <= 32;
        for (size_t i = 0; ok && i < nk; i++) {
            json_t *k = json_object_get(json_array_get(km, i), "key");
            ok = json_is_string(k) && json_string_length(k) > 0 && json_string_length(k) < 256 &&
                 !strpbrk(json_string_value(k), "/\\") && strcmp(json_string_value(k), "..") && strcmp(json_string_value(k), ".");
        }
        if (!ok) { st = pi0_fail(PI0_ERR_FORMAT, "%s: leaf %s: key_metadata: expected 2 to 32 {\"key\": name} entries without '/'", path, tk); goto done; }
        if (strcmp(json_string_value(json_object_get(json_array_get(km, 0), "key")), "params")) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: leaf %s is not under \"params\" (openpi saves {\"params\": <model params>})", path, tk);
            goto done;
        }
        all_value &= !strcmp(json_string_value(json_object_get(json_array_get(km, nk - 1), "key")), "value");
        leaf *l = &lv[n++];
        l->name = join_keys(km, 0, nk, '.');
        l->path = join_keys(km, 1, nk, '/');   /* "value" stripped below when every leaf has it */
        if (!l->name || !l->path) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    }
    /* as openpi's restore_params: a trailing "value" key on every leaf is nnx state, not part of the names */
    *nnx = all_value;
    for (int i = 0; all_value && i < n; i++) {
        char *slash = strrchr(lv[i].path, '/');
        if (slash) *slash = 0;
    }
done:
    json_decref(root);
    if (st != PI0_OK) { leaves_free(lv, n); return st; }
    *out = lv;
    *n_out = n;
    return PI0_OK;
}

/* ---- stores ---- */

static pi0_status db_get(void *user, const char *key, const uint8_t **d, size_t *n, int *found) {
    const ocdbt_entry *e = ocdbt_find(user, key);
    *found = e != NULL;
    return e ? ocdbt_value(user, e, d, n) : PI0_OK;
}

/* A decoded chunk's file pages leave this process (they stay in the page cache): without this the mapped compressed
 * files (4.8 GB for π0) added to the peak resident size. Safe while another thread reads the same pages: a
 * read-only file mapping faults them back in from the page cache. */
static void unmap_pages(void *user, const uint8_t *data, size_t len) {
    (void)user;
    const uintptr_t pg = 4096, a = ((uintptr_t)data + pg - 1) & ~(pg - 1), b = ((uintptr_t)data + len) & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

typedef struct { const char *dir; struct { void *p; size_t n; } map[64]; int n; } dirstore;   /* one per task */

static pi0_status dir_get(void *user, const char *key, const uint8_t **d, size_t *n, int *found) {
    dirstore *s = user;
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", s->dir, key);
    struct stat sb;
    *found = 0;
    if (stat(path, &sb) != 0) return errno == ENOENT || errno == ENOTDIR ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return pi0_fail(PI0_ERR_IO, "%s: not a regular file", path);
    if (s->n == 64) return pi0_fail(PI0_ERR_FORMAT, "%s: more than 64 chunks of one array open at once", path);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return pi0_fail(PI0_ERR_IO, "%s: %s", path, strerror(errno));
    void *p = (void *)"";
    if (sb.st_size && (p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        close(fd);
        return pi0_fail(PI0_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    }
    close(fd);
    if (sb.st_size) { s->map[s->n].p = p; s->map[s->n++].n = (size_t)sb.st_size; }
    *d = p; *n = (size_t)sb.st_size; *found = 1;
    return PI0_OK;
}

/* A decoded chunk file is unmapped at once: no more than zarr.c's 64 side-by-side chunks are mapped together. */
static void dir_unmap(void *user, const uint8_t *data, size_t len) {
    dirstore *s = user;
    (void)len;
    for (int i = 0; i < s->n; i++)
        if (s->map[i].p == data) {
            munmap(s->map[i].p, s->map[i].n);
            s->map[i] = s->map[--s->n];
            return;
        }
}

static void dir_release(dirstore *s) {
    for (int i = 0; i < s->n; i++) munmap(s->map[i].p, s->map[i].n);
    s->n = 0;
}

/* ---- dimensions ---- */

static leaf *find_leaf(leaf *lv, int n, const char *path) {
    for (int i = 0; i < n; i++) if (!strcmp(lv[i].path, path)) return &lv[i];
    return NULL;
}

static const char *shape_str(char *buf, size_t n, int nd, const int64_t *s) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < n) snprintf(buf + k, n - k, nd == 1 ? ",)" : ")");
    return buf;
}

static int row_ndim(const jrow *r) { return r->ndim + (r->stack != S_NONE); }

static void expected(const jrow *r, const dimset *ds, int64_t *s) {
    int k = 0;
    if (r->stack != S_NONE) s[k++] = ds->depth[r->stack];
    for (int i = 0; i < r->ndim; i++) s[k++] = ds->v[r->d[i]];
}

/* Every dimension from the shapes of a few parameters; each parameter is then checked against them. */
/* kind: 0 π0, 1 π0.5, 2 π0-FAST (PaliGemma alone: none of the action expert's parameters) */
static pi0_status infer(leaf *lv, int n, const char *label, dimset *ds, int *kind) {
    static const char *const need[] = {
        "PaliGemma/img/embedding/kernel", "PaliGemma/img/pos_embedding", ENC "LayerNorm_0/scale", ENC "MlpBlock_0/Dense_0/kernel",
        ATT "query/kernel", "PaliGemma/llm/embedder/input_embedding", LAY "attn/q_einsum/w", LAY "attn/kv_einsum/w",
        LAY "mlp/gating_einsum", LAY "attn/q_einsum_1/w", LAY "attn/kv_einsum_1/w", LAY "mlp_1/gating_einsum", "action_in_proj/kernel"};
    const int64_t *s[13];
    int fast = !find_leaf(lv, n, need[9]) && !find_leaf(lv, n, need[12]);   /* no q_einsum_1, no action_in_proj */
    for (int i = 0; i < (fast ? 9 : 13); i++) {
        leaf *l = find_leaf(lv, n, need[i]);
        if (!l && i < 9)
            return pi0_fail(PI0_ERR_SHAPE, "%s: missing parameter '%s' (every π0, π0.5 and π0-FAST checkpoint has it)", label,
                            need[i]);
        if (!l)   /* name what made it π0 / π0.5: on a π0-FAST checkpoint, one stray parameter of the expert */
            return pi0_fail(PI0_ERR_SHAPE, "%s: missing parameter '%s' (every π0 and π0.5 checkpoint has it; '%s' is present, "
                            "so this is not π0-FAST's PaliGemma alone)", label, need[i],
                            find_leaf(lv, n, need[12]) ? need[12] : need[9]);
        for (int d = 0; d < l->z.ndim; d++)   /* before any product (an empty array may name any other sizes) */
            if (l->z.shape[d] < 1 || l->z.shape[d] > (1 << 24))
                return pi0_fail(PI0_ERR_SHAPE, "%s: parameter '%s': dimension %d is %lld (expected 1..16777216)", label, need[i],
                                d, (long long)l->z.shape[d]);
        s[i] = l->z.shape;
    }
    int64_t *v = ds->v;
    v[X_P] = s[0][0]; v[X_C3] = 3; v[X_ONE] = 1; v[X_TWO] = 2; v[X_VW] = s[0][3]; v[X_T] = s[1][1];
    ds->depth[S_VIS] = s[2][0]; v[X_VF] = s[3][2]; v[X_VH] = s[4][2]; v[X_VHD] = s[4][3]; v[X_VQ] = v[X_VH] * v[X_VHD];
    v[X_V] = s[5][0]; v[X_LW] = s[5][1];
    ds->depth[S_LLM] = s[6][0]; v[X_LH] = s[6][1]; v[X_LHD] = s[6][3]; v[X_LK] = s[7][2]; v[X_LF] = s[8][3];
    v[X_LQ] = v[X_LH] * v[X_LHD]; v[X_LKV] = v[X_LK] * v[X_LHD];
    int has05 = find_leaf(lv, n, "time_mlp_in/kernel") != NULL, has0 = find_leaf(lv, n, "state_proj/kernel") != NULL;
    if (fast) {   /* no expert: its sizes mirror PaliGemma's so the shared checks hold; the action size is openpi's default */
        v[X_EW] = v[X_LW]; v[X_EH] = v[X_LH]; v[X_EHD] = v[X_LHD]; v[X_EK] = v[X_LK]; v[X_EF] = v[X_LF]; v[X_A] = 32;
        if (has05 || has0)
            return pi0_fail(PI0_ERR_SHAPE, "%s: '%s' but no action expert ('%s' and '%s' missing)", label,
                            has05 ? "time_mlp_in/kernel" : "state_proj/kernel", need[9], need[12]);
    } else {
        v[X_EW] = s[9][2]; v[X_EH] = s[9][1]; v[X_EHD] = s[9][3]; v[X_EK] = s[10][2]; v[X_EF] = s[11][3]; v[X_A] = s[12][0];
        if (has05 == has0)
            return pi0_fail(PI0_ERR_SHAPE, "%s: %s 'time_mlp_in/kernel' (π0.5) and 'state_proj/kernel' (π0): expected exactly one",
                            label, has05 ? "both" : "neither");
    }
    v[X_EQ] = v[X_EH] * v[X_EHD]; v[X_EKV] = v[X_EK] * v[X_EHD]; v[X_E2] = 2 * v[X_EW]; v[X_E3] = 3 * v[X_EW];
    *kind = fast ? 2 : has05;
    int64_t g = 0;
    while ((g + 1) * (g + 1) <= v[X_T]) g++;
    ds->grid = g;
    if (g * g != v[X_T] || v[X_VQ] != v[X_VW])
        return pi0_fail(PI0_ERR_SHAPE, "%s: PaliGemma/img: %lld position embeddings (expected a square number) and %lld x %lld "
                        "attention heads for width %lld", label, (long long)v[X_T], (long long)v[X_VH], (long long)v[X_VHD], (long long)v[X_VW]);
    return PI0_OK;
}

static pi0_status to_config(const dimset *ds, int kind, pi0_config *c, const char *label) {
    pi0_status st = config_from_variant(c, kind == 2 ? "pi0-fast" : kind ? "pi05" : "pi0");
    if (st != PI0_OK) return st;
    const int64_t *v = ds->v;
    int64_t all[] = {v[X_VW], ds->depth[S_VIS], v[X_VF], v[X_VH], v[X_P], v[X_LW], ds->depth[S_LLM], v[X_LF], v[X_LH], v[X_LK],
                     v[X_LHD], v[X_V], v[X_EW], v[X_EF], v[X_EH], v[X_EK], v[X_EHD], v[X_A]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i] <= 0 || all[i] > (1 << 24)) return pi0_fail(PI0_ERR_SHAPE, "%s: a parameter dimension is %lld (expected 1..16777216)", label, (long long)all[i]);
    c->vis = (pi0_vision_cfg){(int)v[X_VW], (int)ds->depth[S_VIS], (int)v[X_VF], (int)v[X_VH], (int)v[X_P], (int)(ds->grid * v[X_P])};
    c->lm = (pi0_gemma_cfg){(int)v[X_LW], (int)ds->depth[S_LLM], (int)v[X_LF], (int)v[X_LH], (int)v[X_LK], (int)v[X_LHD], (int)v[X_V]};
    c->ex = (pi0_gemma_cfg){(int)v[X_EW], (int)ds->depth[S_LLM], (int)v[X_EF], (int)v[X_EH], (int)v[X_EK], (int)v[X_EHD], (int)v[X_V]};
    c->action_dim = (int)v[X_A];
    if (v[X_EH] != v[X_LH] || v[X_EK] != v[X_LK] || v[X_EHD] != v[X_LHD])
        return pi0_fail(PI0_ERR_SHAPE, "%s: the action expert's attention (%lld heads, %lld kv heads, head dim %lld) differs from "
                        "PaliGemma's (%lld, %lld, %lld); the two experts attend jointly", label, (long long)v[X_EH], (long long)v[X_EK],
                        (long long)v[X_EHD], (long long)v[X_LH], (long long)v[X_LK], (long long)v[X_LHD]);
    return config_finish(c, label);
}

/* ---- re-layout ---- */

/* dst[c * R + r] = src[r * C + c] for an R x C matrix of esz-byte elements, in 8 x 8 tiles (16-bit ones
 * through SSE2 unpacks on x86: scalar tiles were a bottleneck of the load, bench/RESULTS.md L124). */
#if defined(__SSE2__)
#include <emmintrin.h>
static void tile8_u16(uint16_t *dst, int64_t R, const uint16_t *src, int64_t C) {
    __m128i a[8], b[8];
    for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(src + i * C));
    for (int i = 0; i < 4; i++) { b[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]); b[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]); }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            a[4 * i + j] = _mm_unpacklo_epi32(b[4 * i + j], b[4 * i + j + 2]);
            a[4 * i + j + 2] = _mm_unpackhi_epi32(b[4 * i + j], b[4 * i + j + 2]);
        }
    /* a[0..3] hold rows 0-3 as 32-bit pairs (columns 0-1, 4-5, 2-3, 6-7), a[4..7] rows 4-7 likewise */
    static const int col[4] = {0, 4, 2, 6};
    for (int k = 0; k < 4; k++) {
        _mm_storeu_si128((__m128i *)(dst + col[k] * R), _mm_unpacklo_epi64(a[k], a[k + 4]));
        _mm_storeu_si128((__m128i *)(dst + (col[k] + 1) * R), _mm_unpackhi_epi64(a[k], a[k + 4]));
    }
}
#endif

/* dst[c * ldd + r] = src[r * lds + c] for r < R, c < C. */
static void transpose(uint8_t *dst, int64_t ldd, const uint8_t *src, int64_t lds, int64_t R, int64_t C, size_t esz) {
    enum { T = 64 };
    for (int64_t r0 = 0; r0 < R; r0 += T)
        for (int64_t c0 = 0; c0 < C; c0 += T) {
            int64_t r1 = r0 + T < R ? r0 + T : R, c1 = c0 + T < C ? c0 + T : C;
            if (esz == 2) {
                uint16_t *d = (uint16_t *)dst;
                const uint16_t *s = (const uint16_t *)src;
                int64_t r8 = r0, c8 = c0;
#if defined(__SSE2__)
                r8 = r0 + (r1 - r0) / 8 * 8;
                c8 = c0 + (c1 - c0) / 8 * 8;
                for (int64_t c = c0; c < c8; c += 8)
                    for (int64_t r = r0; r < r8; r += 8) tile8_u16(d + c * ldd + r, ldd, s + r * lds + c, lds);
#endif
                for (int64_t c = c0; c < c1; c++)   /* the edges (all of it without SSE2) */
                    for (int64_t r = c < c8 ? r8 : r0; r < r1; r++) d[c * ldd + r] = s[r * lds + c];
            } else {
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t r = r0; r < r1; r++) ((uint32_t *)dst)[c * ldd + r] = ((const uint32_t *)src)[r * lds + c];
            }
        }
}

enum { STRIP = 512 };   /* columns per piece of a transpose: pieces run on every thread */

/* How many independent pieces relayout() splits into (one for copies and the patch kernel). */
static int64_t pieces(const jrow *r, int nd, const int64_t *d) {
    int64_t C = 1;
    for (int i = r->split; i < nd; i++) C *= d[i];
    return r->op == OP_T ? (C + STRIP - 1) / STRIP : r->op == OP_HEADS ? d[0] : 1;
}

/* Piece `k` of re-laying out one slice `src` (dims d[0..nd)) into its PyTorch tensor `dst`. Copies never come here:
 * they are decoded straight into their tensors (run_task). */
static void relayout(const jrow *r, int nd, const int64_t *d, uint8_t *dst, const uint8_t *src, size_t esz, int64_t k) {
    int64_t R = 1, C = 1;
    switch (r->op) {
    case OP_COPY:
        PI0_ASSERT(!"copies are decoded in place");
        break;
    case OP_T: {   /* columns [c0, c1) of src [R, C] are rows [c0, c1) of dst [C, R] */
        for (int i = 0; i < nd; i++) *(i < r->split ? &R : &C) *= d[i];
        int64_t c0 = k * STRIP, c1 = c0 + STRIP < C ? c0 + STRIP : C;
        transpose(dst + (size_t)(c0 * R) * esz, R, src + (size_t)c0 * esz, C, R, c1 - c0, esz);
        break;
    }
    case OP_HEADS: {   /* [N, D, H] -> rows n * H + h of [N * H, D]: head k */
        size_t o = (size_t)(k * d[1] * d[2]) * esz;
        transpose(dst + o, d[1], src + o, d[2], d[1], d[2], esz);
        break;
    }
    case OP_PATCH: {   /* [P, P, C, O] (y, x, c, o) -> [O, C, P, P] (o, c, y, x) */
        const int64_t P = d[0], Q = d[1], Ci = d[2], O = d[3];
        for (int64_t y = 0; y < P; y++)
            for (int64_t x = 0; x < Q; x++)
                for (int64_t c = 0; c < Ci; c++)
                    for (int64_t o = 0; o < O; o++)
                        memcpy(dst + (size_t)(((o * Ci + c) * P + y) * Q + x) * esz, src + (size_t)(((y * Q + x) * Ci + c) * O + o) * esz, esz);
        break;
    }
    }
}

/* Index of the first NaN / Inf (all exponent bits set) of n elements, or -1. Scans 4096 elements at a time
 * without branches (vectorised), and looks for the exact index only in a block that holds one. */
static int64_t first_nonfinite(const uint8_t *p, int64_t n, pi0_dtype dt) {
    const uint32_t m4 = 0x7f800000u;
    const uint16_t m2 = dt == PI0_DT_BF16 ? 0x7f80u : 0x7c00u;
    for (int64_t b = 0; b < n; b += 4096) {
        int64_t e = b + 4096 < n ? b + 4096 : n;
        int hit = 0;
        if (dt == PI0_DT_F32) {
            const uint32_t *x = (const uint32_t *)(const void *)p;   /* the buffers are malloc'd or 64-byte aligned */
            for (int64_t i = b; i < e; i++) hit |= (x[i] & m4) == m4;
            if (hit) for (int64_t i = b; i < e; i++) if ((x[i] & m4) == m4) return i;
        } else {
            const uint16_t *x = (const uint16_t *)(const void *)p;
            for (int64_t i = b; i < e; i++) hit |= (x[i] & m2) == m2;
            if (hit) for (int64_t i = b; i < e; i++) if ((x[i] & m2) == m2) return i;
        }
    }
    return -1;
}

typedef struct {
    const leaf *lf;
    const dimset *ds;
    uint8_t *base, *buf;
    int direct;              /* buf is the destination itself (a single-output copy) */
    uint8_t *scratch;        /* this thread's block buffer, reused across arrays (fresh pages cost a zeroing each) */
    size_t scratch_bytes;
    const char *label;
} task;

/* Each block (a stacked layer, or a whole array) is scanned for NaN / Inf and re-laid out by OpenMP tasks, so
 * that the other threads help while one thread decodes a big array (the decoding is sequential per zstd frame). */
static pi0_status on_block(void *user, int64_t block, void *buf) {
    task *t = user;
    const leaf *l = t->lf;
    const jrow *r = l->row;
    const size_t esz = pi0_dtype_size(l->z.dtype);
    int64_t d[5], per = 1, n;
    for (int i = 0; i < r->ndim; i++) per *= (d[i] = t->ds->v[r->d[i]]);
    n = t->direct && r->stack != S_NONE ? per * t->ds->depth[r->stack] : per;   /* direct: the whole stack at once */
    const uint8_t *p = buf;
    enum { SPAN = 1 << 21 };
    const int64_t nspan = (n + SPAN - 1) / SPAN;
    int64_t bad = n;
    #pragma omp taskloop grainsize(1) shared(bad)
    for (int64_t k = 0; k < nspan; k++) {
        int64_t e = (k + 1) * SPAN < n ? (k + 1) * SPAN : n, b = first_nonfinite(p + (size_t)(k * SPAN) * esz, e - k * SPAN, l->z.dtype);
        if (b >= 0) {
            #pragma omp critical(orbax_bad)
            if (k * SPAN + b < bad) bad = k * SPAN + b;
        }
    }
    if (bad < n) {
        int64_t layer = r->stack == S_NONE ? -1 : t->direct ? bad / per : block;
        char where[48] = "";
        if (layer >= 0) snprintf(where, sizeof where, " layer %lld", (long long)layer);
        return pi0_fail(PI0_ERR_FORMAT, "%s: parameter '%s'%s: non-finite value at flat index %lld", t->label, l->path, where,
                        (long long)(bad % per));
    }
    if (t->direct) return PI0_OK;
    const int nd = l->nout > 1 ? r->ndim - 1 : r->ndim;
    const int64_t *dd = l->nout > 1 ? d + 1 : d, np = pieces(r, nd, dd);
    #pragma omp taskloop grainsize(1) collapse(2)
    for (int k = 0; k < l->nout; k++)
        for (int64_t q = 0; q < np; q++)
            relayout(r, nd, dd, t->base + l->off[k] + (size_t)block * l->bytes, p + (size_t)k * (size_t)(per / l->nout) * esz, esz, q);
    return PI0_OK;
}

static pi0_status run_task(task *t, ocdbt *db, const char *params) {
    const leaf *l = t->lf;
    const int stacked = l->row->stack != S_NONE;
    t->direct = l->row->op == OP_COPY && l->nout == 1;
    /* a block is one stacked layer, or the whole array (arrays in the table have ndim >= 1) */
    const int64_t nrow = t->direct || !stacked ? l->z.shape[0] : 1;
    const size_t block = pi0_dtype_size(l->z.dtype) * (size_t)(zarr_numel(&l->z) / l->z.shape[0]) * (size_t)nrow;
    PI0_ASSERT(t->direct || block <= t->scratch_bytes);
    t->buf = t->direct ? t->base + l->off[0] : t->scratch;
    dirstore ds = {.dir = params};
    zarr_store s = db ? (zarr_store){db_get, db, unmap_pages} : (zarr_store){dir_get, &ds, dir_unmap};
    pi0_status st = zarr_read(&l->z, &s, l->name, t->label, nrow, t->buf, on_block, t);
    dir_release(&ds);
    return st;
}

/* ---- the checkpoint ---- */

static int is_file(const char *p) { struct stat sb; return stat(p, &sb) == 0 && S_ISREG(sb.st_mode); }

int orbax_find_params(const char *dir, char *params, size_t n) {
    char p[4200];
    snprintf(p, sizeof p, "%s/params/_METADATA", dir);
    if (is_file(p)) { snprintf(params, n, "%s/params", dir); return 1; }
    snprintf(p, sizeof p, "%s/_METADATA", dir);
    if (is_file(p)) { snprintf(params, n, "%s", dir); return 1; }
    /* a training run: <dir>/<step>/params, the highest step */
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long best = -1;
    for (struct dirent *de; (de = readdir(d));) {
        const char *s = de->d_name;
        if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 15) continue;
        snprintf(p, sizeof p, "%s/%s/params/_METADATA", dir, s);
        if (atoll(s) > best && is_file(p)) best = atoll(s);
    }
    closedir(d);
    if (best < 0) return 0;
    snprintf(params, n, "%s/%lld/params", dir, best);
    return 1;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

size_t orbax_limit_bytes = SIZE_MAX;

pi0_status orbax_load(st_file **out, pi0_config *cfg, orbax_info *info, const char *params, int quiet) {
    *out = NULL;
    memset(info, 0, sizeof *info);
    double t0 = omp_get_wtime();
    leaf *lv = NULL;
    int n = 0, kind = 0;
    ocdbt *db = NULL;
    st_file *f = NULL;
    task *tasks = NULL;
    pi0_status st = read_tree(params, &lv, &n, &info->nnx_value);
    if (st != PI0_OK) return st;
    info->n_leaves = n;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.ocdbt", params);
    struct stat sb;
    info->ocdbt = stat(mpath, &sb) == 0;   /* anything named manifest.ocdbt: the OCDBT reader refuses non-files */
    dirstore dst = {.dir = params};
    zarr_store store = {dir_get, &dst, NULL};
    if (info->ocdbt) {
        if ((st = ocdbt_open(&db, params, NULL)) != PI0_OK) goto done;
        store = (zarr_store){db_get, db, NULL};
    } else {
        snprintf(mpath, sizeof mpath, "%s/%s/zarr.json", params, lv[0].name);
        if (is_file(mpath)) { st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: a zarr v3 array; this reader handles zarr v2 (what openpi's Orbax writes)", mpath); goto done; }
    }
    const char *lora = NULL, *unknown = NULL;
    int n_unknown = 0;
    for (int i = 0; i < n; i++) {
        leaf *l = &lv[i];
        if (strstr(l->path, "lora")) { lora = l->path; continue; }
        for (int k = 0; k < N_ROWS && !l->row; k++) if (!strcmp(rows[k].path, l->path)) l->row = &rows[k];
        if (!l->row) { n_unknown++; if (!unknown) unknown = l->path; continue; }
        st = zarr_open(&l->z, &store, l->name, params);
        dir_release(&dst);
        if (st != PI0_OK) goto done;
        if (l->z.ndim != row_ndim(l->row)) {
            st = pi0_fail(PI0_ERR_SHAPE, "%s: parameter '%s': %d dimensions, expected %d", params, l->path, l->z.ndim, row_ndim(l->row));
            goto done;
        }
        info->n_bf16 += l->z.dtype == PI0_DT_BF16; info->n_f32 += l->z.dtype == PI0_DT_F32; info->n_f16 += l->z.dtype == PI0_DT_F16;
    }
    if (lora) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: LoRA adapter parameters (first: '%s') are not supported: merge them into the base "
                      "weights before loading (openpi's PyTorch conversion refuses them too)", params, lora);
        goto done;
    }
    dimset ds = {0};
    if ((st = infer(lv, n, params, &ds, &kind)) != PI0_OK || (st = to_config(&ds, kind, cfg, params)) != PI0_OK) goto done;
    /* every used parameter against the inferred dims; its place in the tensor buffer */
    size_t total = 0;
    int n_tensors = 0;
    for (int k = 0; k < N_ROWS; k++) {
        const jrow *r = &rows[k];
        int needed = r->need == N_ALL || (kind != 2 && (r->need == N_BOTH || (r->need == N_PI05) == (kind == 1)));
        leaf *l = find_leaf(lv, n, r->path);
        if (!needed) {
            if (l && l->row) { l->row = NULL; n_unknown++; if (!unknown) unknown = l->path; }
            continue;
        }
        if (!l) { st = pi0_fail(PI0_ERR_SHAPE, "%s: missing parameter '%s' (a %s checkpoint has it)", params, r->path, cfg_model_name(cfg)); goto done; }
        int64_t want[6];
        expected(r, &ds, want);
        for (int i = 0; i < l->z.ndim; i++)
            if (l->z.shape[i] != want[i]) {
                char a[160], b[160];
                st = pi0_fail(PI0_ERR_SHAPE, "%s: parameter '%s': expected %s from the other parameters' shapes, found %s", params,
                              r->path, shape_str(a, sizeof a, l->z.ndim, want), shape_str(b, sizeof b, l->z.ndim, l->z.shape));
                goto done;
            }
        int layers = r->stack == S_NONE ? 1 : (int)ds.depth[r->stack];
        l->nout = r->pt[1] ? 2 : 1;
        l->bytes = pi0_dtype_size(l->z.dtype) * (size_t)(zarr_numel(&l->z) / layers / l->nout);
        for (int o = 0; o < l->nout; o++) {
            l->off[o] = total;
            total += ((l->bytes * (size_t)layers + 63) & ~(size_t)63);
            n_tensors += layers;
        }
    }
    if (total > orbax_limit_bytes) {
        st = pi0_fail(PI0_ERR_NOMEM, "%s: the parameters need %zu bytes, more than this process allows (%zu)", params, total,
                      orbax_limit_bytes);
        goto done;
    }
    if (n_unknown && !quiet)
        fprintf(stderr, "pi0: warning: %s: %d parameter(s) not used by the model ignored (first: '%s')\n", params, n_unknown, unknown);
    /* the tensors: one anonymous mapping (st_close unmaps it) */
    if (!(f = calloc(1, sizeof *f)) || !(f->path = strdup(params)) || !(f->tensors = calloc((size_t)n_tensors, sizeof *f->tensors))) {
        st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        goto done;
    }
    f->map_len = total ? total : 1;
    if ((f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) {
        f->map = NULL;
        st = pi0_fail(PI0_ERR_NOMEM, "%s: cannot map %zu bytes for the parameters: %s", params, total, strerror(errno));
        goto done;
    }
    madvise(f->map, f->map_len, MADV_HUGEPAGE);   /* fewer faults: 6 GiB first-touched 5.2 s vs 6.4 s with 4 KiB pages here */
    info->bytes = total;
    for (int i = 0; i < n; i++) {
        leaf *l = &lv[i];
        if (!l->row) continue;
        int layers = l->row->stack == S_NONE ? 1 : (int)ds.depth[l->row->stack];
        for (int o = 0; o < l->nout; o++)
            for (int L = 0; L < layers; L++) {
                st_tensor *t = &f->tensors[f->n_tensors++];
                char name[256];
                snprintf(name, sizeof name, l->row->pt[o], L);
                if (!(t->name = strdup(name))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
                t->dtype = l->z.dtype;
                t->ndim = l->row->ond;
                for (int k = 0; k < t->ndim; k++) t->shape[k] = ds.v[l->row->od[k]];
                t->begin = l->off[o] + (size_t)L * l->bytes;
                t->end = t->begin + l->bytes;
                t->data = (uint8_t *)f->map + t->begin;
            }
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor);
    f->finite_checked = 1;
    /* decode: one task per array, the largest first, on every core */
    if (!(tasks = calloc((size_t)n, sizeof *tasks))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    int nt = 0;
    for (int i = 0; i < n; i++) if (lv[i].row) tasks[nt++] = (task){.lf = &lv[i], .ds = &ds, .base = f->map, .label = params};
    for (int i = 1; i < nt; i++)   /* insertion sort by size, descending (a few hundred arrays) */
        for (int j = i; j > 0 && zarr_numel(&tasks[j].lf->z) > zarr_numel(&tasks[j - 1].lf->z); j--) { task x = tasks[j]; tasks[j] = tasks[j - 1]; tasks[j - 1] = x; }
    pi0_status *res = calloc((size_t)(nt ? nt : 1), sizeof *res);
    char (*msg)[512] = calloc((size_t)(nt ? nt : 1), sizeof *msg);
    if (!res || !msg) { free(res); free(msg); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    size_t most = 1;   /* the largest block a task decodes into scratch */
    for (int i = 0; i < nt; i++) {
        const leaf *l = tasks[i].lf;
        if (!(l->row->op == OP_COPY && l->nout == 1)) {
            size_t b = pi0_dtype_size(l->z.dtype) * (size_t)zarr_numel(&l->z) / (l->row->stack != S_NONE ? (size_t)l->z.shape[0] : 1);
            if (b > most) most = b;
        }
    }
    /* one task per array (largest first); block buffers come from a pool, reused across arrays (fresh pages cost a
     * zeroing each). A thread waiting on its block's pieces runs only those pieces (tied tasks), so the pool
     * holds at most one buffer per thread. */
    uint8_t *pool[256];
    int n_pool = 0, oom = 0;
    #pragma omp parallel
    #pragma omp single
    for (int i = 0; i < nt; i++) {
        #pragma omp task firstprivate(i) shared(pool, n_pool, oom, res, msg, tasks)
        {
            uint8_t *scratch = NULL;
            #pragma omp critical(orbax_pool)
            scratch = n_pool ? pool[--n_pool] : NULL;
            if (!scratch && !(scratch = malloc(most))) {
                res[i] = PI0_ERR_NOMEM;
                #pragma omp atomic write
                oom = 1;
            } else {
                tasks[i].scratch = scratch;
                tasks[i].scratch_bytes = most;
                res[i] = run_task(&tasks[i], db, params);
                if (res[i] != PI0_OK) snprintf(msg[i], sizeof msg[i], "%s", pi0_last_error());
                int kept = 0;
                #pragma omp critical(orbax_pool)
                if (n_pool < 256) { pool[n_pool++] = scratch; kept = 1; }
                if (!kept) free(scratch);
            }
        }
    }
    for (int i = 0; i < n_pool; i++) free(pool[i]);
    if (oom) st = pi0_fail(PI0_ERR_NOMEM, "out of memory (%zu bytes of block buffer)", most);
    for (int i = 0; i < nt && st == PI0_OK; i++) if (res[i] != PI0_OK) st = pi0_fail(res[i], "%s", msg[i]);
    free(res);
    free(msg);
    info->decode_s = omp_get_wtime() - t0;
done:
    free(tasks);
    ocdbt_close(db);
    leaves_free(lv, n);
    if (st != PI0_OK) { st_close(f); return st; }
    *out = f;
    return PI0_OK;
}
