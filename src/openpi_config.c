/* openpi_config.c — the table of openpi's shipped training configs (pi0_libero, pi05_droid, pi0_aloha_sim, ...) and
 * its lookup by name. See openpi_config.h. Data only: the robot transforms these configs select are robot.c's, the
 * policy that applies them pi0_policy.c's; pi0_checkpoint_convert reads the action horizon, prompt length and
 * (π0-FAST) action dim a config gives an Orbax checkpoint, which does not store them. */
#include "openpi_config.h"

#include <string.h>

/* openpi training/config.py (and polaris_config.py): robot, model type, AbsoluteActions, state in prompt,
 * default prompt, asset id (LeRobot configs use the repo id), policy_metadata, action horizon, prompt length, and for
 * π0-FAST the action dim. The π0-FAST configs' state is always in the prompt (FASTTokenizer); their delta actions
 * are the data config's: LIBERO's extra_delta_transform, the RLDS DROID loader's joint-position action space. */
static const openpi_config CONFIGS[] = {
    {"pi0_aloha", PI0_ROBOT_ALOHA, OPENPI_PI0, 1, 0, NULL, "trossen", OPENPI_ALOHA_METADATA, 50, 48, 0},
    {"pi05_aloha", PI0_ROBOT_ALOHA, OPENPI_PI05, 1, 1, NULL, "trossen", OPENPI_ALOHA_METADATA, 50, 200, 0},
    {"pi0_aloha_towel", PI0_ROBOT_ALOHA, OPENPI_PI0, 1, 0, "fold the towel", "trossen", OPENPI_ALOHA_METADATA, 50, 48,
     0},
    {"pi0_aloha_tupperware", PI0_ROBOT_ALOHA, OPENPI_PI0, 1, 0, "open the tupperware and put the food on the plate",
     "trossen", OPENPI_ALOHA_METADATA, 50, 48, 0},
    {"pi0_aloha_pen_uncap", PI0_ROBOT_ALOHA, OPENPI_PI0, 1, 0, "uncap the pen", "trossen", "{}", 50, 48, 0},
    {"pi05_aloha_pen_uncap", PI0_ROBOT_ALOHA, OPENPI_PI05, 1, 1, "uncap the pen", "trossen", "{}", 50, 200, 0},
    {"pi0_aloha_sim", PI0_ROBOT_ALOHA, OPENPI_PI0, 0, 0, "Transfer cube", "lerobot/aloha_sim_transfer_cube_human", "{}",
     50, 48, 0},
    {"pi0_libero", PI0_ROBOT_LIBERO, OPENPI_PI0, 1, 0, NULL, "physical-intelligence/libero", "{}", 50, 48, 0},
    {"pi05_libero", PI0_ROBOT_LIBERO, OPENPI_PI05, 0, 0, NULL, "physical-intelligence/libero", "{}", 10, 200, 0},
    {"pi0_droid", PI0_ROBOT_DROID, OPENPI_PI0, 0, 0, NULL, "droid", "{}", 10, 48, 0},
    {"pi05_droid", PI0_ROBOT_DROID, OPENPI_PI05, 0, 1, NULL, "droid", "{}", 15, 200, 0},
    {"pi05_droid_finetune", PI0_ROBOT_DROID, OPENPI_PI05, 0, 1, NULL, "droid", "{}", 16, 200, 0},
    {"pi05_full_droid_finetune", PI0_ROBOT_DROID, OPENPI_PI05, 1, 1, NULL, "droid", "{}", 16, 200, 0},
    {"pi05_droid_jointpos_polaris", PI0_ROBOT_DROID, OPENPI_PI05, 1, 1, NULL, "droid", "{}", 15, 200, 0},
    {"pi0_droid_jointpos_polaris", PI0_ROBOT_DROID, OPENPI_PI0, 1, 0, NULL, "droid", "{}", 10, 100, 0},
    {"pi0_droid_jointpos_100k_polaris", PI0_ROBOT_DROID, OPENPI_PI0, 1, 0, NULL, "droid", "{}", 10, 100, 0},
    {"pi0_fast_droid", PI0_ROBOT_DROID, OPENPI_PI0_FAST, 0, 1, NULL, "droid", "{}", 10, 250, 8},
    {"pi0_fast_libero", PI0_ROBOT_LIBERO, OPENPI_PI0_FAST, 1, 1, NULL, "physical-intelligence/libero", "{}", 10, 180, 7},
    {"pi0_fast_full_droid_finetune", PI0_ROBOT_DROID, OPENPI_PI0_FAST, 1, 1, NULL, "droid", "{}", 16, 180, 8},
    {"pi0_fast_droid_jointpos_polaris", PI0_ROBOT_DROID, OPENPI_PI0_FAST, 1, 1, NULL, "droid", "{}", 10, 180, 8},
};
#define N_CONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])

const openpi_config *openpi_config_find(const char *name) {
    for (int i = 0; name && i < N_CONFIGS; i++)
        if (!strcmp(CONFIGS[i].name, name)) return &CONFIGS[i];
    return NULL;
}

const char *openpi_config_names(void) {
    return "pi0_aloha, pi05_aloha, pi0_aloha_towel, pi0_aloha_tupperware, pi0_aloha_pen_uncap, pi05_aloha_pen_uncap, "
           "pi0_aloha_sim, pi0_libero, pi05_libero, pi0_droid, pi05_droid, pi05_droid_finetune, pi05_full_droid_finetune, "
           "pi05_droid_jointpos_polaris, pi0_droid_jointpos_polaris, pi0_droid_jointpos_100k_polaris, pi0_fast_droid, "
           "pi0_fast_libero, pi0_fast_full_droid_finetune, pi0_fast_droid_jointpos_polaris";
}

openpi_model openpi_model_of(const pi0_model_info *mi) {
    return mi->fast ? OPENPI_PI0_FAST : mi->pi05 ? OPENPI_PI05 : OPENPI_PI0;
}

const char *openpi_model_name(openpi_model m) { return m == OPENPI_PI0_FAST ? "π0-FAST" : m == OPENPI_PI05 ? "π0.5" : "π0"; }
