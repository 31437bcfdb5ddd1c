/* robot.h — openpi's robot transforms (docs/model.md 4.1, 4.3, 4.4): the LIBERO / DROID / ALOHA input transforms
 * (request arrays -> three camera slots of uint8 HWC images + the robot state in double) and the output transforms
 * (AbsoluteActions, slicing to the robot's dims, ALOHA's joint flips and gripper conversion). Pure functions: no
 * model, no norm stats, no resizing (pi0_policy.c and norm_stats.c do those), no config table (openpi_config.h).
 * Mirrors openpi/policies/{libero,droid,aloha}_policy.py and transforms.AbsoluteActions. */
#ifndef PI0_ROBOT_H
#define PI0_ROBOT_H

#include <stdint.h>

#include "pi0.h"

#define ROBOT_CAMS 3        /* model camera slots: base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb */
#define ROBOT_MAX_STATE 14  /* the longest robot state (ALOHA) */

pi0_robot robot_from_name(const char *name);     /* "libero" | "droid" | "aloha"; PI0_ROBOT_NONE otherwise */
const char *robot_name(pi0_robot r);
int robot_state_dim(pi0_robot r);                /* 8 LIBERO, 8 DROID (7 joints + gripper), 14 ALOHA */
int robot_action_dim(pi0_robot r);               /* 7, 8, 14 */
int robot_default_delta(pi0_robot r, int pi05);  /* without a config: ALOHA on, LIBERO on for π0, DROID off */
const char *robot_default_metadata(pi0_robot r);

typedef struct {
    uint8_t *img[ROBOT_CAMS];   /* (h, w, 3) uint8 RGB, owned; NULL = camera absent (black, mask 0) */
    int h[ROBOT_CAMS], w[ROBOT_CAMS];
    double state[ROBOT_MAX_STATE];  /* the state after the robot transform (ALOHA: flipped, grippers angular) */
    int n_state;
} robot_input;

/* Robot input transform of one observation. Errors name the key, what was expected and what was found. */
pi0_status robot_input_make(pi0_robot r, const pi0_observation *obs, robot_input *out);
void robot_input_free(robot_input *in);

/* Output transforms of one chunk: actions (H, A) unnormalised float64 with A >= robot_action_dim; when
 * delta, AbsoluteActions adds the unnormalised state (A values) on the robot's joint dims; then the
 * robot's slice / encoding into out (H, robot_action_dim). */
void robot_output(pi0_robot r, const double *actions, int H, int A, const double *state, int delta, double *out);

#endif
