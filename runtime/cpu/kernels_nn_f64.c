/*
 * kernels_nn_f64.c: kernels_nn.c compiled over doubles, for rt_cpu_kernel_f64 (see
 * kernels_f64.c).
 */
#define RT_REAL_DOUBLE 1
#include "kernels_nn.c"
