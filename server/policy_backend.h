/* policy_backend.h — binds the engine's srv_backend to the policy API of pi0.h (pi0_policy_prepare /
 * pi0_policy_run). The only server file that calls the policy; it does not own the policy, which main.c loads and
 * frees. */
#ifndef PI0_SERVER_POLICY_BACKEND_H
#define PI0_SERVER_POLICY_BACKEND_H

#include "engine.h"
#include "pi0.h"

/* Fills b for policy p (which must outlive the server). */
void policy_backend_init(srv_backend *b, pi0_policy *p);

#endif
