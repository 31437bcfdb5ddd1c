/* lerobot.h — LeRobot's π0 / π0.5 policy directories (what PI0Policy / PI05Policy.save_pretrained writes):
 * config.json with LeRobot's fields ("type": "pi0" | "pi05", chunk_size, tokenizer_max_length, max_action_dim,
 * image_resolution, ...) and model.safetensors under openpi's PyTorch names with a "model." prefix. This file maps
 * both onto the engine's config and tensor names, as LeRobot's from_pretrained does (docs/checkpoints.md,
 * "LeRobot"), and refuses the options the engine does not implement. LeRobot's processor pipeline (normaliser
 * stats, prompt steps) is not read here. */
#ifndef PI0_LEROBOT_H
#define PI0_LEROBOT_H

#include <stddef.h>

#include "config.h"
#include "safetensors.h"

/* 1 when the config.json text is LeRobot's ("type" is a string), else 0. */
int lerobot_is_config(const char *json, size_t len);
/* Parses LeRobot's config.json into cfg (pi05 from "type"); refuses unknown types and unsupported options, naming
 * the field. The engine's explicit-dimension blocks ("vision", "paligemma", "action_expert") are honoured too. */
pi0_status lerobot_config(pi0_config *cfg, const char *label, const char *json, size_t len);
/* Renames f's tensors as LeRobot's from_pretrained does: "model." prefix removed; unprefixed time_mlp_* <->
 * action_time_mlp_* by policy type. A name left twice is an error. */
pi0_status lerobot_fix_keys(st_file *f, int pi05);

#endif
