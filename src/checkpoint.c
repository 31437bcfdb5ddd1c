/* checkpoint.c — checkpoint writing of include/pi0.h: pi0_checkpoint_generate (random weights of a variant in
 * openpi's PyTorch layout, with config.json and plausible norm stats) and pi0_checkpoint_convert (any checkpoint
 * pi0_model_load takes, Orbax above all, rewritten in that layout with its assets, an openpi config's horizon,
 * prompt length and, for π0-FAST, action dim from openpi_config.h). Reads checkpoints only through pi0_model_load; the tensor table (names,
 * shapes, random values) is weights.c's. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "api.h"
#include "config.h"
#include "openpi_config.h"
#include "safetensors.h"
#include "util.h"
#include "weights.h"

static pi0_status mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return pi0_fail(PI0_ERR_ARG, "path too long");
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return pi0_fail(PI0_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
            if (!c) break;
            *p = c;
        }
    }
    return PI0_OK;
}

static pi0_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return pi0_fail(PI0_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s: write failed", path);
}

/* Random but plausible norm stats (docs/model.md 4.2): 8-dim state, 7-dim actions (LIBERO-like). */
static char *norm_stats_json(uint64_t seed) {
    pi0_rng r;
    pi0_rng_seed(&r, seed ^ 0x5eedu);
    size_t cap = 8192, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    n += (size_t)snprintf(s + n, cap - n, "{\n  \"norm_stats\": {\n");
    const char *keys[2] = {"state", "actions"};
    int dims[2] = {8, 7};
    for (int k = 0; k < 2; k++) {
        double mean[8], std[8];
        for (int i = 0; i < dims[k]; i++) { mean[i] = pi0_rng_normal(&r) * 0.5; std[i] = 0.1 + pi0_rng_uniform(&r); }
        const char *fields[4] = {"mean", "std", "q01", "q99"};
        n += (size_t)snprintf(s + n, cap - n, "    \"%s\": {", keys[k]);
        for (int f = 0; f < 4; f++) {
            n += (size_t)snprintf(s + n, cap - n, "%s\"%s\": [", f ? ", " : "", fields[f]);
            for (int i = 0; i < dims[k]; i++) {
                double v = f == 0 ? mean[i] : f == 1 ? std[i] : f == 2 ? mean[i] - 2.3 * std[i] : mean[i] + 2.3 * std[i];
                n += (size_t)snprintf(s + n, cap - n, "%s%.6f", i ? ", " : "", v);
            }
            n += (size_t)snprintf(s + n, cap - n, "]");
        }
        n += (size_t)snprintf(s + n, cap - n, "}%s\n", k ? "" : ",");
    }
    snprintf(s + n, cap - n, "  }\n}\n");
    return s;
}

pi0_status pi0_checkpoint_generate(const char *dir, const pi0_gen_params *p) {
    if (!dir || !p || !p->variant) return pi0_fail(PI0_ERR_ARG, "pi0_checkpoint_generate: NULL argument");
    pi0_config c;
    pi0_status st = config_from_variant(&c, p->variant);
    if (st != PI0_OK) return st;
    snprintf(c.precision, sizeof c.precision, "%s", p->f32 ? "float32" : "bfloat16");
    if (p->action_horizon > 0) c.action_horizon = p->action_horizon;
    if (p->max_token_len > 0) c.max_token_len = p->max_token_len;
    if ((st = config_finish(&c, p->variant)) != PI0_OK) return st;
    char *cfg_json = config_to_json(&c), *stats = norm_stats_json(p->seed);
    char *cfg_path = api_path_join(dir, "config.json"), *st_path = api_path_join(dir, "model.safetensors");
    char *assets = api_path_join(dir, "assets/random"), *stats_path = api_path_join(dir, "assets/random/norm_stats.json");
    if (!cfg_json || !stats || !cfg_path || !st_path || !assets || !stats_path) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
    if (st == PI0_OK && !p->force && (api_path_exists(st_path) || api_path_exists(cfg_path)))
        st = pi0_fail(PI0_ERR_IO, "%s: a checkpoint is already there (pass force / --force to overwrite it)", dir);
    if (st == PI0_OK) st = mkdir_p(assets);
    struct statvfs fs;
    uint64_t need = weights_file_bytes(&c, p->f32 ? PI0_DT_F32 : PI0_DT_BF16) + (1u << 20);
    if (st == PI0_OK && statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < need)
        st = pi0_fail(PI0_ERR_IO, "%s: the checkpoint needs %.2f GB, the file system has %.2f GB free", dir, need / 1e9,
                      (double)fs.f_bavail * fs.f_frsize / 1e9);
    if (st == PI0_OK) st = write_text(cfg_path, cfg_json);
    if (st == PI0_OK) st = write_text(stats_path, stats);
    if (st == PI0_OK) st = weights_generate(&c, st_path, p->seed, p->f32 ? PI0_DT_F32 : PI0_DT_BF16);
    free(cfg_json); free(stats); free(cfg_path); free(st_path); free(assets); free(stats_path);
    return st;
}

/* Copies the regular files under src into dst (created), at most 4 levels deep: the assets folder. */
static pi0_status copy_tree(const char *src, const char *dst, int depth) {
    DIR *d = opendir(src);
    if (!d) return errno == ENOENT ? PI0_OK : pi0_fail(PI0_ERR_IO, "%s: %s", src, strerror(errno));
    pi0_status st = mkdir_p(dst);
    for (struct dirent *de; st == PI0_OK && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char *s = api_path_join(src, de->d_name), *t = api_path_join(dst, de->d_name);
        struct stat sb;
        if (!s || !t) st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        else if (stat(s, &sb) != 0) st = pi0_fail(PI0_ERR_IO, "%s: %s", s, strerror(errno));
        else if (S_ISDIR(sb.st_mode) && depth < 4) st = copy_tree(s, t, depth + 1);
        else if (S_ISREG(sb.st_mode)) {
            size_t len;
            char *text = pi0_read_file(s, &len, 256u << 20);
            FILE *f = text ? fopen(t, "wb") : NULL;
            if (!text) st = PI0_ERR_IO;
            else if (!f || fwrite(text, 1, len, f) != len) st = pi0_fail(PI0_ERR_IO, "%s: cannot write: %s", t, strerror(errno));
            if (f && fclose(f) != 0 && st == PI0_OK) st = pi0_fail(PI0_ERR_IO, "%s: cannot write: %s", t, strerror(errno));
            free(text);
        }
        free(s);
        free(t);
    }
    closedir(d);
    return st;
}

pi0_status pi0_checkpoint_convert(const char *src, const char *out, const pi0_convert_params *p) {
    if (!src || !out) return pi0_fail(PI0_ERR_ARG, "pi0_checkpoint_convert: NULL argument");
    pi0_convert_params def = {0};
    if (!p) p = &def;
    if (p->dtype != PI0_CONVERT_KEEP && p->dtype != PI0_CONVERT_BF16 && p->dtype != PI0_CONVERT_F32)
        return pi0_fail(PI0_ERR_ARG, "convert: dtype %d: expected PI0_CONVERT_KEEP, _BF16 or _F32", (int)p->dtype);
    char *st_path = api_path_join(out, "model.safetensors"), *cfg_path = api_path_join(out, "config.json"), *assets = api_path_join(out, "assets");
    pi0_model *m = NULL;
    st_entry *e = NULL;
    const st_tensor **used = NULL;
    char (*names)[256] = NULL;
    char *cfg_json = NULL, *src_assets = NULL;
    float *f32 = NULL;
    uint16_t *h = NULL;
    pi0_status st = PI0_OK;
    if (!st_path || !cfg_path || !assets) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    if (!p->force && (api_path_exists(st_path) || api_path_exists(cfg_path))) {
        st = pi0_fail(PI0_ERR_IO, "%s: a checkpoint is already there (pass force / --force to overwrite it)", out);
        goto done;
    }
    const openpi_config *rc = p->config ? openpi_config_find(p->config) : NULL;
    if (p->config && !rc) { st = pi0_fail(PI0_ERR_ARG, "unknown openpi config '%s' (known: %s)", p->config, openpi_config_names()); goto done; }
    /* (a π0-FAST config's action dim: what its tokens decode to, which no checkpoint stores; ignored by π0 / π0.5) */
    pi0_model_params mp = {.quiet = p->quiet, .action_horizon = p->action_horizon ? p->action_horizon : rc ? rc->action_horizon : 0,
                           .max_token_len = p->max_token_len ? p->max_token_len : rc ? rc->max_token_len : 0,
                           .action_dim = rc ? rc->action_dim : 0};
    if ((st = pi0_model_load(&m, src, &mp)) != PI0_OK) goto done;
    pi0_model_info mi;
    pi0_model_get_info(m, &mi);
    if (rc && rc->model != openpi_model_of(&mi)) {
        st = pi0_fail(PI0_ERR_ARG, "config %s is for a %s checkpoint, %s holds a %s model", rc->name,
                      openpi_model_name(rc->model), src, openpi_model_name(openpi_model_of(&mi)));
        goto done;
    }
    /* the tensors the model uses, under openpi's PyTorch names: a source's extras (LeRobot's untied lm_head, the
     * orphan expert lm_head, unknown tensors) are not carried over */
    const st_file *f = m->file;
    pi0_dtype want = p->dtype == PI0_CONVERT_F32 ? PI0_DT_F32 : p->dtype == PI0_CONVERT_BF16 ? PI0_DT_BF16 : PI0_DT_COUNT;
    if (!(e = calloc((size_t)f->n_tensors + 1, sizeof *e)) || !(used = calloc((size_t)f->n_tensors + 1, sizeof *used)) ||
        !(names = calloc((size_t)f->n_tensors + 1, sizeof *names))) {
        st = pi0_fail(PI0_ERR_NOMEM, "out of memory");
        goto done;
    }
    const int n_used = weights_used(&m->cfg, f, used, names, f->n_tensors + 1);
    int all_bf16 = 1, all_f32 = 1;
    for (int i = 0; i < n_used; i++) {
        const st_tensor *t = used[i];
        e[i] = (st_entry){.name = names[i], .dtype = want == PI0_DT_COUNT ? t->dtype : want, .ndim = t->ndim};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        all_bf16 &= e[i].dtype == PI0_DT_BF16;
        all_f32 &= e[i].dtype == PI0_DT_F32;
    }
    pi0_config c = m->cfg;
    snprintf(c.precision, sizeof c.precision, "%s", all_bf16 ? "bfloat16" : all_f32 ? "float32" : "mixed");
    if ((st = mkdir_p(out)) != PI0_OK) goto done;
    if (!(cfg_json = config_to_json(&c)) || !(src_assets = api_path_join(m->root, "assets"))) { st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    st_writer w;
    const char *meta[] = {"format", "pt"};
    if ((st = st_writer_open(&w, st_path, e, n_used, meta, 1)) != PI0_OK) goto done;
    enum { CH = 1 << 20 };
    if (!(f32 = malloc(CH * sizeof *f32)) || !(h = malloc(CH * sizeof *h))) { st_writer_abort(&w); st = pi0_fail(PI0_ERR_NOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n_used && st == PI0_OK; i++) {
        const st_tensor *t = used[i];
        size_t n = (size_t)st_numel(t), esz = pi0_dtype_size(t->dtype);
        if (e[i].dtype == t->dtype) { st = st_writer_write(&w, t->data, n * esz); continue; }
        for (size_t k = 0; k < n && st == PI0_OK; k += CH) {   /* F32 -> BF16 rounds to nearest even, as torch */
            size_t m_ = n - k < CH ? n - k : CH;
            pi0_to_f32(f32, (const uint8_t *)t->data + k * esz, t->dtype, m_);
            if (e[i].dtype == PI0_DT_F32) { st = st_writer_write(&w, f32, m_ * 4); continue; }
            for (size_t j = 0; j < m_; j++) h[j] = pi0_f32_to_bf16(f32[j]);
            st = st_writer_write(&w, h, m_ * 2);
        }
    }
    if (st == PI0_OK) st = st_writer_close(&w);
    else st_writer_abort(&w);
    if (st == PI0_OK) st = write_text(cfg_path, cfg_json);
    if (st == PI0_OK) st = copy_tree(src_assets, assets, 0);
done:
    free(f32); free(h); free(e); free(used); free(names); free(cfg_json); free(src_assets);
    pi0_model_free(m);
    free(st_path); free(cfg_path); free(assets);
    return st;
}
