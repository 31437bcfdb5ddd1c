/* lerobot.c — see lerobot.h. LeRobot's from_pretrained (policies/pi0, pi05 modeling files) reads model.safetensors,
 * renames the keys that lack the "model." prefix (π0: time_mlp_* -> action_time_mlp_*; π0.5: the reverse) and adds
 * the prefix to them, then loads strictly; its text embedding is embed_tokens, or a copy of lm_head when the file
 * has only that (weights.c's rule for the tied embedding). */
#include "lerobot.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int lerobot_is_config(const char *json, size_t len) {
    json_t *r = json_loadb(json, len, 0, NULL);
    int yes = json_is_string(json_object_get(r, "type"));
    json_decref(r);
    return yes;
}

static int get_pos_int(json_t *r, const char *key, int *dst, const char *label, pi0_status *st) {
    json_t *v = json_object_get(r, key);
    if (!v) return 1;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24)) {
        *st = pi0_fail(PI0_ERR_FORMAT, "%s: %s: expected a positive integer", label, key);
        return 0;
    }
    *dst = (int)json_integer_value(v);
    return 1;
}

pi0_status lerobot_config(pi0_config *c, const char *label, const char *json, size_t len) {
    pi0_status st = config_parse(c, label, json, len);   /* variants, and the explicit-dimension blocks if any */
    if (st != PI0_OK) return st;
    json_t *r = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL), *v;
    const char *type = json_string_value(json_object_get(r, "type"));
    st = PI0_OK;
    if (!type || (strcmp(type, "pi0") && strcmp(type, "pi05"))) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: type '%s': this engine runs LeRobot's pi0 and pi05 policies", label,
                      type ? type : "?");
        goto done;
    }
    c->pi05 = !strcmp(type, "pi05");
    c->lerobot_time = 1;   /* flow_matching.euler_integrate: t = 1.0 + k * dt in double, then the model's float32 */
    int state_dim = 0, action_dim = c->action_dim, n_obs = 1;
    if (!get_pos_int(r, "chunk_size", &c->action_horizon, label, &st) ||
        !get_pos_int(r, "tokenizer_max_length", &c->max_token_len, label, &st) ||
        !get_pos_int(r, "max_action_dim", &action_dim, label, &st) || !get_pos_int(r, "max_state_dim", &state_dim, label, &st) ||
        !get_pos_int(r, "n_obs_steps", &n_obs, label, &st))
        goto done;
    c->action_dim = action_dim;
    if (state_dim && state_dim != action_dim) {   /* the engine pads state and actions to one width */
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: max_state_dim %d differs from max_action_dim %d (not supported)", label,
                      state_dim, action_dim);
        goto done;
    }
    if ((v = json_object_get(r, "image_resolution"))) {
        json_t *h = json_array_get(v, 0), *w = json_array_get(v, 1);
        if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(h) || !json_is_integer(w) ||
            json_integer_value(h) != json_integer_value(w) || json_integer_value(h) < 1 || json_integer_value(h) > 8192) {
            st = pi0_fail(PI0_ERR_FORMAT, "%s: image_resolution: expected [R, R] (square, as LeRobot requires)", label);
            goto done;
        }
        c->vis.image_size = (int)json_integer_value(h);
    }
    /* options that change the model or its inputs and that the engine does not implement: refused, never ignored */
    static const char *const flags[] = {"use_peft", "use_relative_actions", "use_visual_memory", "use_proprioceptive_memory"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (json_is_true(json_object_get(r, flags[i]))) {
            st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: %s: true is not supported by this engine", label, flags[i]);
            goto done;
        }
    if (n_obs != 1) { st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: n_obs_steps %d: only 1 is supported", label, n_obs); goto done; }
    /* the model's image slots: LeRobot's VISUAL input features, then the empty cameras validate_features adds */
    int n_cams = 0, empty = 0;
    const char *key;
    json_t *feat, *in = json_object_get(r, "input_features");
    if (in && !json_is_object(in)) { st = pi0_fail(PI0_ERR_FORMAT, "%s: input_features: expected an object", label); goto done; }
    json_object_foreach(in, key, feat) {
        const char *ftype = json_string_value(json_object_get(feat, "type"));
        if (!ftype) { st = pi0_fail(PI0_ERR_FORMAT, "%s: input_features.%s: no \"type\"", label, key); goto done; }
        n_cams += !strcmp(ftype, "VISUAL");
    }
    json_t *ec = json_object_get(r, "empty_cameras");
    if (ec && (!json_is_integer(ec) || json_integer_value(ec) < 0 || json_integer_value(ec) > 16)) {
        st = pi0_fail(PI0_ERR_FORMAT, "%s: empty_cameras: expected an integer 0..16", label);
        goto done;
    }
    empty = ec ? (int)json_integer_value(ec) : 0;
    for (int i = 0; i < empty; i++) {
        char k[64];
        snprintf(k, sizeof k, "observation.images.empty_camera_%d", i);
        n_cams += !json_object_get(in, k);
    }
    c->n_cameras = n_cams;   /* LeRobot's cameras are its VISUAL features: none named is none, not openpi's three */
    if (c->n_cameras < 1 || c->n_cameras > 16) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: %d cameras (VISUAL input_features + empty_cameras): 1 to 16 are supported",
                      label, c->n_cameras);
        goto done;
    }
    json_t *rtc = json_object_get(r, "rtc_config");   /* guided RTC is the engine's (docs/model.md 3.11) */
    const char *rtc_mode = json_string_value(json_object_get(rtc, "mode"));
    if (json_is_object(rtc) && !json_is_false(json_object_get(rtc, "enabled")) && rtc_mode && strcmp(rtc_mode, "guided")) {
        st = pi0_fail(PI0_ERR_UNSUPPORTED, "%s: rtc_config.mode '%s': only guided real-time chunking is supported (a "
                      "checkpoint trained for RTC is not)", label, rtc_mode);
        goto done;
    }
done:
    json_decref(r);
    return st;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

pi0_status lerobot_fix_keys(st_file *f, int pi05) {
    static const char *const pi0_ren[][2] = {{"time_mlp_in.", "action_time_mlp_in."}, {"time_mlp_out.", "action_time_mlp_out."}};
    static const char *const pi05_ren[][2] = {{"action_time_mlp_in.", "time_mlp_in."}, {"action_time_mlp_out.", "time_mlp_out."}};
    const char *const (*ren)[2] = pi05 ? pi05_ren : pi0_ren;
    for (int i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name, *to = NULL, *rest = NULL;
        if (!strncmp(n, "model.", 6)) { to = ""; rest = n + 6; }
        for (int k = 0; k < 2 && !to; k++) {
            size_t l = strlen(ren[k][0]);
            if (!strncmp(n, ren[k][0], l)) { to = ren[k][1]; rest = n + l; }
        }
        if (!to) continue;
        char *fixed = malloc(strlen(to) + strlen(rest) + 1);
        if (!fixed) return pi0_fail(PI0_ERR_NOMEM, "out of memory");
        strcat(strcpy(fixed, to), rest);
        free(f->tensors[i].name);
        f->tensors[i].name = fixed;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_name);
    for (int i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
            return pi0_fail(PI0_ERR_FORMAT, "%s: tensor '%s' is stored twice (with and without LeRobot's model. prefix, or "
                            "under both time-MLP names)", f->path ? f->path : "model.safetensors", f->tensors[i].name);
    return PI0_OK;
}
