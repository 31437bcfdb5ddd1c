/* openpi_config.h — openpi's shipped training configs by name (training/config.py): the robot, model type, action
 * and prompt rules, asset id and metadata each one sets. The one table both the policy (pi0_policy.c) and checkpoint
 * conversion (pi0 convert --config) read; it knows nothing of the transforms themselves (robot.h). */
#ifndef PI0_OPENPI_CONFIG_H
#define PI0_OPENPI_CONFIG_H

#include "pi0.h"

/* ALOHA's policy_metadata (the reset pose openpi's server sends first), also robot_default_metadata's for ALOHA */
#define OPENPI_ALOHA_METADATA "{\"reset_pose\": [0, -1.5, 1.5, 0, 0, 0]}"

/* openpi's ModelType */
typedef enum { OPENPI_PI0 = 0, OPENPI_PI05 = 1, OPENPI_PI0_FAST = 2 } openpi_model;

typedef struct {
    const char *name;           /* openpi config name */
    pi0_robot robot;
    openpi_model model;         /* the model type the config is trained for */
    int delta;                  /* 1 = AbsoluteActions on output (docs/model.md 4.3) */
    int discrete_state;         /* 1 = state in the prompt (π0.5 except pi05_libero) */
    const char *default_prompt; /* the config's default prompt, or NULL */
    const char *asset_id;       /* folder under DIR/assets with norm_stats.json */
    const char *metadata_json;  /* the config's policy_metadata, sent first by the server */
    int action_horizon;         /* the config's Pi0Config action_horizon (Orbax checkpoints do not store it) */
    int max_token_len;          /* and max_token_len (48 π0 / 200 π0.5 / 250 π0-FAST unless the config says otherwise) */
    int action_dim;             /* π0-FAST: Pi0FASTConfig.action_dim, the chunk's width its tokens decode to; 0 for
                                   π0 / π0.5, whose weights fix it */
} openpi_config;

/* NULL when unknown; openpi_config_names() lists the known names for messages. */
const openpi_config *openpi_config_find(const char *name);
const char *openpi_config_names(void);
/* The model type of a loaded model, and its name for messages ("π0", "π0.5", "π0-FAST"). */
openpi_model openpi_model_of(const pi0_model_info *mi);
const char *openpi_model_name(openpi_model m);

#endif
