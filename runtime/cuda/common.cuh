/*
 * common.cuh: what kernels.cu and kernels_nn.cu share: loads and stores in any float dtype,
 * grid-stride loops, block reductions. Private to runtime/cuda/.
 *
 * Everything is written to be obviously right rather than fast: one thread per output element
 * (or one block of CK_THREADS per row), float arithmetic in the order the CPU kernels use, with
 * the compile flag -fmad=false so that a * b + c rounds twice as it does on the CPU.
 */
#ifndef RT_CUDA_COMMON_CUH
#define RT_CUDA_COMMON_CUH

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CK_THREADS 256 // threads per block, a power of two (the block reductions need one)

// Element i of p (dtype dt) as float.
static __device__ __forceinline__ float ld(const void *p, int64_t i, int dt) {
    switch (dt) {
    case CK_F16: return __half2float(((const __half *)p)[i]);
    case CK_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CK_I32: return (float)((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

static __device__ __forceinline__ void st(void *p, int64_t i, int dt, float v) {
    switch (dt) {
    case CK_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case CK_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case CK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = v; break;
    }
}

// Stores v, or adds it (in float) when accumulating: the CPU's cpu_put.
static __device__ __forceinline__ void put(void *p, int64_t i, int dt, float v, bool acc) {
    st(p, i, dt, acc ? ld(p, i, dt) + v : v);
}

static __device__ __forceinline__ float sigmoidf_(float x) { return 1 / (1 + expf(-x)); }

// Blocks for a grid-stride loop over n elements.
static inline unsigned ck_grid(int64_t n) {
    int64_t b = (n + CK_THREADS - 1) / CK_THREADS;
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

// Blocks for one block per row (rows looped when there are more).
static inline unsigned ck_row_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > (1 << 20) ? (1 << 20) : rows); }

#define CK_FOR_EACH(i, n)                                                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define CK_FOR_EACH_ROW(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// The sum of every thread's v over the block, returned to all threads. Fixed tree order, so
// deterministic. sh: CK_THREADS doubles of shared memory.
static __device__ double block_sum(double v, double *sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ float block_max(float v, float *sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s && sh[t + s] > sh[t]) sh[t] = sh[t + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// The first nonzero code wins.
static __device__ __forceinline__ void raise_flag(int *flag, int code) {
    if (flag) atomicCAS(flag, 0, code);
}

#endif
