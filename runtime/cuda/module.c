/*
 * cuda/module.c: the table planrun-cuda.so exports (rt_cuda.h, "The module"). The module's
 * version script (cuda/module.map) keeps every other symbol inside it.
 */
#include "rt_cuda.h"

extern const rt_cuda_module rt_cuda_module_table;

const rt_cuda_module rt_cuda_module_table = {
    .abi = RT_CUDA_MODULE_ABI,
    .options_bytes = sizeof (rt_options),
    .backend_bytes = sizeof (rt_backend),
    .device_open = rt_cuda_device_open,
    .nccl_id = rt_cuda_nccl_id,
    .backend_init = rt_backend_cuda_init,
};
