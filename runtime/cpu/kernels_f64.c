/*
 * kernels_f64.c: kernels.c compiled over doubles: rt_cpu_kernel_f64 (rt.h), the reference the
 * unit tests check every backward against with finite differences. dtype 0 means double here;
 * int32 operands stay int32.
 */
#define RT_REAL_DOUBLE 1
#include "kernels.c"
