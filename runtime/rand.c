/*
 * rand.c: the runtime's counter-based random numbers (rt.h, "rand.c").
 *
 * Every random value the runtime draws is a pure function of a 64-bit key (rt_key chains the
 * words that name it: the run's seed, a tensor, a step, an element index ...), so it does not
 * depend on which rank draws it, in which order, or how the tensor is split. The mixer and the
 * uniform draw are inline in rt.h (the kernels call them per element); this file holds what is
 * too big to inline: the normal draw.
 *
 * rt_normal is Box-Muller over two independent uniforms drawn from the key's children 0 and 1:
 *     u1 = rt_uniform(rt_key(key, 0)), u2 = rt_uniform(rt_key(key, 1))
 *     z  = sqrt(-2 ln(1 - u1)) cos(2 pi u2)
 * 1 - u1 lies in (0, 1], so the logarithm is finite: z is finite for every key (|z| < 8.6).
 * Only the cosine branch is used; one key gives one normal. Another backend that must draw the
 * same numbers (the CUDA initializers) computes exactly this, in double precision.
 */
#include "rt.h"

#include <math.h>

double rt_normal(uint64_t key) {
    const double two_pi = 6.283185307179586476925286766559;
    double u1 = rt_uniform(rt_key(key, 0)), u2 = rt_uniform(rt_key(key, 1));
    return sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2);
}
