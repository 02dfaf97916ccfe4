/*
 * rt_cuda.h: the CUDA backend's public header (ggml's pattern: a backend shows the rest of the
 * runtime its init function and nothing else). Plain C, no CUDA headers, so interp.c and
 * planrun.c include it in every build; the functions exist only when the build has CUDA
 * (PLANCC_HAVE_CUDA).
 *
 * The backend runs ONE rank of a plan per process on one GPU (one process per GPU, started by
 * torchrun, mpirun, srun or by hand: runtime/launch.c). planrun calls, in this order:
 *   rt_cuda_device_open   choose the GPU (CUDA_VISIBLE_DEVICES and the local rank) or say why
 *                         there is none;
 *   rt_cuda_nccl_id       on rank 0: the ncclUniqueId, which the rendezvous hands to all ranks;
 *   rt_run_init           with rt_options.backend "cuda" and backend_config a rt_cuda_config:
 *                         interp.c calls rt_backend_cuda_init.
 *
 * The module: planrun does not link the backend. It is a shared module, planrun-cuda.so
 * (runtime/cuda/module.c; beside planrun in the build, under LIBDIR/plancc installed), which
 * planrun loads the first time one of the three functions above is called (cuda/loader.c
 * defines them there and forwards to the module's table), that is, only for --backend cuda.
 * Linking cuBLAS costs a process about 0.3 s before main (cuBLASLt's static initializers), GPU or
 * not, and most runs are on the cpu backends. Test programs that want the backend itself
 * (tests/gpu_kernels.c) link the static library rt-cuda and call the functions directly.
 */
#ifndef RT_CUDA_H
#define RT_CUDA_H

#include "../rt.h"

#define RT_CUDA_ID_BYTES 128 // NCCL_UNIQUE_ID_BYTES

typedef struct rt_cuda_device {
    int ordinal, count;             // the device chosen, of count visible ones
    char name[256];
    int cc_major, cc_minor;         // compute capability
    uint64_t mem_bytes;
    int runtime_version, driver_version; // 13000 = 13.0
    int nccl_version, cudnn_version, cublas_version;
} rt_cuda_device;

typedef struct rt_cuda_config {
    int device;                     // the CUDA device ordinal (rt_cuda_device.ordinal)
    int rank, world;                // this process's rank and the plan's world size
    uint8_t nccl_id[RT_CUDA_ID_BYTES]; // rank 0's ncclUniqueId (needed when world > 1)
    bool tf32;                      // allow TF32 tensor cores in f32 GEMMs and convolutions
    int priority;                   // RT_CUDA_PRIORITY_*: where the streams sit in the device's range
} rt_cuda_config;

// Stream priorities (cudaDeviceGetStreamPriorityRange: `least` to `greatest`). PLAN: the plan's
// priorities, its last-running one at the device's least. With a background job (planrun
// --background): HIGH puts the foreground's plan priorities at the top of the range (its
// first-running streams at greatest) and never at least; LOW puts every stream of the
// background replica at least, so the device's scheduler prefers the foreground's blocks.
#define RT_CUDA_PRIORITY_PLAN 0
#define RT_CUDA_PRIORITY_HIGH 1
#define RT_CUDA_PRIORITY_LOW 2

// Chooses device local_rank % (visible devices) when local_rank < the count of visible devices,
// makes it current and fills dev (versions of the CUDA runtime and driver, NCCL, cuDNN and
// cuBLAS). -1 with a message saying why there is no GPU to use (no driver, no device,
// CUDA_VISIBLE_DEVICES empty, a local rank beyond the devices): planrun's exit code 9.
int rt_cuda_device_open(int local_rank, rt_cuda_device *dev, char *err, size_t err_n);
// A fresh ncclUniqueId (rank 0 calls it before the rendezvous). -1 with NCCL's message.
int rt_cuda_nccl_id(uint8_t id[RT_CUDA_ID_BYTES], char *err, size_t err_n);
// The backend for rank o->rank of p (o->one_rank must be set unless p has one rank), configured
// by o->backend_config (a const rt_cuda_config *): its streams with the plan's priorities, its
// events, cuBLAS and cuDNN handles, and the NCCL communicators (the world's, then one per plan
// group instance split from it; every rank of the world must call this). NULL with a message.
rt_backend *rt_backend_cuda_init(const plan *p, const rt_options *o, char *err, size_t err_n);

// The module's one exported symbol, RT_CUDA_MODULE_SYMBOL, is this table. abi and the two sizes
// let planrun refuse a module built from other sources (an old install) rather than misread it.
#define RT_CUDA_MODULE_ABI 1 // bump when the table or the rt.h types it passes change
#define RT_CUDA_MODULE_SYMBOL "rt_cuda_module_table"
typedef struct rt_cuda_module {
    int abi;                        // RT_CUDA_MODULE_ABI
    size_t options_bytes, backend_bytes; // sizeof (rt_options), sizeof (rt_backend) as it was built
    int (*device_open)(int local_rank, rt_cuda_device *dev, char *err, size_t err_n);
    int (*nccl_id)(uint8_t id[RT_CUDA_ID_BYTES], char *err, size_t err_n);
    rt_backend *(*backend_init)(const plan *p, const rt_options *o, char *err, size_t err_n);
} rt_cuda_module;

// planrun's side (cuda/loader.c): loads the module once: $PLANRUN_CUDA_MODULE where that is set,
// else planrun-cuda.so beside the executable, else in the installed module folder. -1 with a
// message naming every path tried and why each failed (planrun's exit code 9). The three
// functions above call it themselves; planrun calls it first to tell a missing module from a
// missing GPU.
int rt_cuda_load(char *err, size_t err_n);

#endif
