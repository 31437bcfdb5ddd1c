// few_rows.cuh — the labs' few-row activation load (gemv.cu's layout, written again there inline): X rows g and
// g + 8 of a 16-row MMA tile (zero past M), this lane's 4 x 8 bf16 columns at col0 + 32 u, read through L2 only
// (the producers are other SMs). Shared by expert_persist.cuh and mk_common.cuh.
#pragma once
#include "../../src/cuda/common.cuh"

__device__ __forceinline__ uint4 ldcg16(const bf16 *p) { return __ldcg((const uint4 *)p); }
__device__ __forceinline__ void load_x(uint4 (&xv)[4][2], const bf16 *x, int ldx, int M, int g, int col0) {
    const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; u++) {
        xv[u][0] = g < M ? ldcg16(x + (size_t)g * ldx + col0 + 32 * u) : z;
        xv[u][1] = g + 8 < M ? ldcg16(x + (size_t)(g + 8) * ldx + col0 + 32 * u) : z;
    }
}
