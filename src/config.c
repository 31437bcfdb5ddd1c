/* config.c — named variants and config.json (see config.h): parsed with every dimension checked, finished (derived
 * sizes, overrides), and written back for generated and converted checkpoints. Mirrors openpi's gemma.get_config,
 * siglip So400m/14 and pi0_config.Pi0Config (docs/model.md 1.1-1.4). Reads no tensors (weights.c binds them) and no
 * LeRobot or Orbax metadata (lerobot.c, orbax.c). */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const struct { const char *name; pi0_gemma_cfg g; } gemma_variants[] = {
    {"gemma_2b", {2048, 18, 16384, 8, 1, 256, 257152}},
    {"gemma_300m", {1024, 18, 4096, 8, 1, 256, 257152}},
    {"dummy", {64, 4, 128, 8, 1, 16, 257152}},
};
static const pi0_vision_cfg so400m = {1152, 27, 4304, 16, 14, 224};

static int gemma_variant(const char *name, pi0_gemma_cfg *g) {
    char base[64];
    snprintf(base, sizeof base, "%s", name);
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, "_lora")) base[n - 5] = 0;   /* LoRA variants: same shapes */
    for (size_t i = 0; i < sizeof gemma_variants / sizeof *gemma_variants; i++)
        if (!strcmp(base, gemma_variants[i].name)) { *g = gemma_variants[i].g; return 1; }
    return 0;
}

static void base_config(pi0_config *c) {
    memset(c, 0, sizeof *c);
    c->pi05 = -1;
    c->fast = -1;
    c->action_dim = 32;
    c->action_horizon = 50;
    c->n_cameras = 3;
    c->vis = so400m;
    gemma_variant("gemma_2b", &c->lm);
    gemma_variant("gemma_300m", &c->ex);
    snprintf(c->paligemma_variant, sizeof c->paligemma_variant, "gemma_2b");
    snprintf(c->action_expert_variant, sizeof c->action_expert_variant, "gemma_300m");
    snprintf(c->precision, sizeof c->precision, "bfloat16");
}

pi0_status config_from_variant(pi0_config *c, const char *name) {
    base_config(c);
    int tiny = !strncmp(name, "tiny-", 5);
    const char *kind = tiny ? name + 5 : name;
    if (strcmp(kind, "pi0") && strcmp(kind, "pi05") && strcmp(kind, "pi0-fast"))
        return pi0_fail(PI0_ERR_ARG, "unknown variant '%s' (expected pi0, pi05, pi0-fast, or one of them after tiny-)", name);
    c->pi05 = !strcmp(kind, "pi05");
    c->fast = !strcmp(kind, "pi0-fast");
    if (c->fast) c->action_horizon = 32;   /* Pi0FASTConfig's default (π0's is 50) */
    if (tiny) {   /* same architecture, toy sizes: fast CPU goldens */
        c->vis = (pi0_vision_cfg){32, 2, 48, 4, 14, 56};
        c->lm = (pi0_gemma_cfg){64, 2, 128, 4, 1, 16, 512};
        c->ex = (pi0_gemma_cfg){32, 2, 64, 4, 1, 16, 512};
        c->action_horizon = 5;
        c->max_token_len = c->pi05 ? 16 : 12;
    }
    return config_finish(c, name);
}

/* Reads an optional positive integer member; returns 0 on a type error (message set). */
static int get_int(json_t *obj, const char *key, int *dst, const char *label, const char *where) {
    json_t *v = json_object_get(obj, key);
    if (!v) return 1;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 24)) {
        pi0_fail(PI0_ERR_FORMAT, "%s: %s%s: expected a positive integer up to 16777216", label, where, key);
        return 0;
    }
    *dst = (int)json_integer_value(v);
    return 1;
}

static int get_str(json_t *obj, const char *key, char *dst, size_t n, const char *label) {
    json_t *v = json_object_get(obj, key);
    if (!v) return 1;
    if (!json_is_string(v) || strlen(json_string_value(v)) >= n) {
        pi0_fail(PI0_ERR_FORMAT, "%s: %s: expected a string of at most %zu characters", label, key, n - 1);
        return 0;
    }
    snprintf(dst, n, "%s", json_string_value(v));
    return 1;
}

static int get_block(json_t *root, const char *key, json_t **out, const char *label) {
    *out = json_object_get(root, key);
    if (*out && !json_is_object(*out)) {
        pi0_fail(PI0_ERR_FORMAT, "%s: %s: expected an object", label, key);
        return 0;
    }
    return 1;
}

static int gemma_block(json_t *b, pi0_gemma_cfg *g, const char *label, const char *where) {
    return !b || (get_int(b, "width", &g->width, label, where) && get_int(b, "depth", &g->depth, label, where) &&
                  get_int(b, "mlp_dim", &g->mlp_dim, label, where) &&
                  get_int(b, "num_heads", &g->num_heads, label, where) &&
                  get_int(b, "num_kv_heads", &g->num_kv_heads, label, where) &&
                  get_int(b, "head_dim", &g->head_dim, label, where) &&
                  get_int(b, "vocab_size", &g->vocab_size, label, where));
}

pi0_status config_parse(pi0_config *c, const char *label, const char *text, size_t len) {
    base_config(c);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pi0_fail(PI0_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line,
                        jerr.column, pi0_json_reason(jerr.text));
    pi0_status st = PI0_ERR_FORMAT;
    json_t *jv, *jl, *je;
    if (!json_is_object(root)) { pi0_fail(PI0_ERR_FORMAT, "%s: expected a JSON object", label); goto done; }
    if (!get_str(root, "paligemma_variant", c->paligemma_variant, sizeof c->paligemma_variant, label) ||
        !get_str(root, "action_expert_variant", c->action_expert_variant, sizeof c->action_expert_variant, label) ||
        !get_str(root, "precision", c->precision, sizeof c->precision, label))
        goto done;
    if (!gemma_variant(c->paligemma_variant, &c->lm)) {
        pi0_fail(PI0_ERR_FORMAT, "%s: paligemma_variant: unknown '%s' (expected gemma_2b, gemma_300m or dummy)",
                 label, c->paligemma_variant);
        goto done;
    }
    if (!gemma_variant(c->action_expert_variant, &c->ex)) {
        pi0_fail(PI0_ERR_FORMAT, "%s: action_expert_variant: unknown '%s' (expected gemma_2b, gemma_300m or dummy)",
                 label, c->action_expert_variant);
        goto done;
    }
    if (!get_int(root, "action_dim", &c->action_dim, label, "") ||
        !get_int(root, "action_horizon", &c->action_horizon, label, "") ||
        !get_int(root, "max_token_len", &c->max_token_len, label, ""))
        goto done;
    json_t *p5 = json_object_get(root, "pi05");
    if (p5 && !json_is_boolean(p5) && !json_is_null(p5)) {
        pi0_fail(PI0_ERR_FORMAT, "%s: pi05: expected true or false", label);
        goto done;
    }
    if (p5 && json_is_boolean(p5)) c->pi05 = json_is_true(p5);
    char type[16] = "";
    if (!get_str(root, "model_type", type, sizeof type, label)) goto done;
    if (*type) {   /* openpi's ModelType names */
        int t = !strcmp(type, "pi0") ? 0 : !strcmp(type, "pi05") ? 1 : !strcmp(type, "pi0_fast") ? 2 : -1;
        if (t < 0) {
            pi0_fail(PI0_ERR_FORMAT, "%s: model_type: unknown '%s' (expected pi0, pi05 or pi0_fast)", label, type);
            goto done;
        }
        if (c->pi05 >= 0 && c->pi05 != (t == 1)) {
            pi0_fail(PI0_ERR_FORMAT, "%s: model_type '%s' contradicts \"pi05\": %s", label, type, c->pi05 ? "true" : "false");
            goto done;
        }
        c->pi05 = t == 1;
        c->fast = t == 2;
    }
    if (!get_block(root, "vision", &jv, label) || !get_block(root, "paligemma", &jl, label) ||
        !get_block(root, "action_expert", &je, label))
        goto done;
    if (jv && !(get_int(jv, "width", &c->vis.width, label, "vision.") &&
                get_int(jv, "depth", &c->vis.depth, label, "vision.") &&
                get_int(jv, "mlp_dim", &c->vis.mlp_dim, label, "vision.") &&
                get_int(jv, "num_heads", &c->vis.num_heads, label, "vision.") &&
                get_int(jv, "patch_size", &c->vis.patch_size, label, "vision.") &&
                get_int(jv, "image_size", &c->vis.image_size, label, "vision.")))
        goto done;
    if (!gemma_block(jl, &c->lm, label, "paligemma.") || !gemma_block(je, &c->ex, label, "action_expert."))
        goto done;
    st = PI0_OK;
done:
    json_decref(root);
    return st;
}

pi0_status config_load(pi0_config *c, const char *path) {
    size_t len;
    char *text = pi0_read_file(path, &len, 1 << 20);
    if (!text) return PI0_ERR_IO;
    pi0_status st = config_parse(c, path, text, len);
    free(text);
    return st;
}

pi0_status config_finish(pi0_config *c, const char *label) {
    if (c->fast < 0) c->fast = 0;
    if (c->pi05 < 0) c->pi05 = 0;
    if (c->fast && c->pi05)
        return pi0_fail(PI0_ERR_FORMAT, "%s: a model is π0.5 or π0-FAST, not both", label);
    if (!c->max_token_len) c->max_token_len = c->fast ? 250 : c->pi05 ? 200 : 48;   /* openpi's model configs */
    if (c->fast) c->ex = c->lm;   /* no action expert: the checks below that pair the two hold trivially */
    const pi0_vision_cfg *v = &c->vis;
    if (v->image_size % v->patch_size)
        return pi0_fail(PI0_ERR_FORMAT, "%s: vision.image_size %d is not a multiple of vision.patch_size %d",
                        label, v->image_size, v->patch_size);
    if (v->width % v->num_heads)
        return pi0_fail(PI0_ERR_FORMAT, "%s: vision.width %d is not a multiple of vision.num_heads %d", label,
                        v->width, v->num_heads);
    const pi0_gemma_cfg *a = &c->lm, *b = &c->ex;
    if (a->depth != b->depth || a->num_heads != b->num_heads || a->num_kv_heads != b->num_kv_heads ||
        a->head_dim != b->head_dim)
        return pi0_fail(PI0_ERR_FORMAT, "%s: the two experts must share depth, num_heads, num_kv_heads and head_dim "
                        "(paligemma %d/%d/%d/%d, action_expert %d/%d/%d/%d)", label, a->depth, a->num_heads,
                        a->num_kv_heads, a->head_dim, b->depth, b->num_heads, b->num_kv_heads, b->head_dim);
    if (a->num_heads % a->num_kv_heads)
        return pi0_fail(PI0_ERR_FORMAT, "%s: num_heads %d is not a multiple of num_kv_heads %d", label,
                        a->num_heads, a->num_kv_heads);
    if (a->head_dim % 2)
        return pi0_fail(PI0_ERR_FORMAT, "%s: head_dim %d must be even (RoPE rotates halves)", label, a->head_dim);
    if (b->width % 2 || b->width < 4)
        return pi0_fail(PI0_ERR_FORMAT, "%s: action_expert.width %d must be even and >= 4 (sin/cos time embedding)",
                        label, b->width);
    /* Keep every product well inside int64 and every row count inside int. The image grid is checked
       first: cfg_tokens_per_image squares it in int. */
    int64_t grid = v->image_size / v->patch_size;
    if (grid * grid > (1 << 20))
        return pi0_fail(PI0_ERR_FORMAT, "%s: vision.image_size %d / patch_size %d gives %lld patches per image "
                        "(at most 1048576)", label, v->image_size, v->patch_size, (long long)(grid * grid));
    struct { const char *what; int64_t found, limit; } lim[] = {
        {"paligemma.vocab_size * width", (int64_t)a->vocab_size * a->width, (int64_t)1 << 34},
        {"paligemma.mlp_dim * width", (int64_t)a->mlp_dim * a->width, (int64_t)1 << 34},
        {"action_expert.mlp_dim * width", (int64_t)b->mlp_dim * b->width, (int64_t)1 << 34},
        {"vision.mlp_dim * width", (int64_t)v->mlp_dim * v->width, (int64_t)1 << 34},
        {"num_heads * head_dim", (int64_t)a->num_heads * a->head_dim, (int64_t)1 << 20},
        {"prefix length (cameras * patches + max_token_len)", cfg_prefix_len(c), (int64_t)1 << 20},
        {"action_horizon", c->action_horizon, (int64_t)1 << 16},
        {"action_dim", c->action_dim, (int64_t)1 << 16},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].found > lim[i].limit)
            return pi0_fail(PI0_ERR_FORMAT, "%s: %s is %lld, at most %lld is supported", label, lim[i].what,
                            (long long)lim[i].found, (long long)lim[i].limit);
    return PI0_OK;
}

char *config_to_json(const pi0_config *c) {
    json_t *r = json_pack("{s:s, s:i, s:i, s:s, s:s, s:s, s:b, s:i}", "model_type",
                          c->fast > 0 ? "pi0_fast" : c->pi05 > 0 ? "pi05" : "pi0", "action_dim", c->action_dim,
                          "action_horizon", c->action_horizon, "paligemma_variant", c->paligemma_variant,
                          "action_expert_variant", c->action_expert_variant, "precision", c->precision, "pi05",
                          c->pi05 > 0, "max_token_len", c->max_token_len);
    if (!r) return NULL;
    if (c->fast > 0) json_object_del(r, "action_expert_variant");
    json_object_set_new(r, "vision",
                        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "width", c->vis.width, "depth", c->vis.depth,
                                  "mlp_dim", c->vis.mlp_dim, "num_heads", c->vis.num_heads, "patch_size",
                                  c->vis.patch_size, "image_size", c->vis.image_size));
    const pi0_gemma_cfg *g[2] = {&c->lm, &c->ex};
    const char *key[2] = {"paligemma", "action_expert"};
    for (int i = 0; i < (c->fast > 0 ? 1 : 2); i++) {
        json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "width", g[i]->width, "depth", g[i]->depth,
                              "mlp_dim", g[i]->mlp_dim, "num_heads", g[i]->num_heads, "num_kv_heads",
                              g[i]->num_kv_heads, "head_dim", g[i]->head_dim);
        if (i == 0) json_object_set_new(o, "vocab_size", json_integer(g[i]->vocab_size));
        json_object_set_new(r, key[i], o);
    }
    char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(r);
    return s;
}
