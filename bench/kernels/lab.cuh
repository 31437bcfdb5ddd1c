// lab.cuh — shared by the kernel labs of bench/kernels: CK() for CUDA calls, fill_kernel for their inputs, and the
// median of 9 replays of a captured CUDA graph (2 warm-up replays first), so every lab times the same way.
#pragma once
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

// n pseudo-random bf16 values in [-scale, scale) from a hash of the index and seed (the labs' inputs and weights).
__global__ void fill_kernel(__nv_bfloat16 *p, size_t n, uint32_t seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        p[i] = __float2bfloat16(scale * ((float)(h & 0xffffff) / 8388608.0f - 1.0f));
    }
}

// Captures body() on stream s (with *capturing = 1 during the capture) into an executable graph.
template <class F> static cudaGraphExec_t lab_capture(cudaStream_t s, int *capturing, F body) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    *capturing = 1;
    body();
    *capturing = 0;
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    return exec;
}

// The median replay time in ms of body() captured as a graph (lab_capture).
template <class F> static float lab_graph_median_ms(cudaStream_t s, int *capturing, F body) {
    cudaGraphExec_t exec = lab_capture(s, capturing, body);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[9];
    for (int it = 0; it < 2; it++) CK(cudaGraphLaunch(exec, s));
    for (int it = 0; it < 9; it++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[it], e0, e1));
    }
    for (int i = 0; i < 9; i++)
        for (int j = i + 1; j < 9; j++)
            if (t[j] < t[i]) { float x = t[i]; t[i] = t[j]; t[j] = x; }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(exec));
    return t[4];
}
