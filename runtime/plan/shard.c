/*
 * shard.c: the geometry of the device mesh that plans use: how many ranks a group has, which
 * piece of a tensor a shard gives each rank and how many bytes that is, and a shard as the text
 * form writes it.
 *
 * A shard (plan.h, plan_shard) maps each mesh axis to R (replicated), V (partial sums) or D(i)
 * (dimension i split evenly); several axes may split one dimension. These functions take the
 * plan as it is: they check what they compute with (a split that does not divide, an axis past
 * the mesh) and say so in their result rather than assert, so plan_check can call them on a
 * plan it has yet to accept (plan_group_size alone wants its group in range). Sizes are
 * checked for overflow.
 */
#include "plan.h"

#include <stdio.h>

uint64_t plan_group_size(const plan *p, uint32_t g) {
    if (g == PLAN_NONE) return 1;
    const plan_group *gr = &p->groups[g];
    if (!gr->axes) return gr->n_ranks;
    uint64_t n = 1;
    for (uint32_t i = 0; i < p->meta.n_axes; i++)
        if (gr->axes >> i & 1u) n *= p->meta.mesh[i];
    return n;
}

uint64_t plan_shard_ways(const plan *p, plan_shard s, int d) {
    uint64_t w = 1;
    for (uint32_t a = 0; a < p->meta.n_axes && a < PLAN_MAX_AXES; a++)
        if (s.map[a] == PLAN_SHARD_D(d) && __builtin_mul_overflow(w, (uint64_t)p->meta.mesh[a], &w)) return UINT64_MAX;
    return w;
}

bool plan_shard_local_shape(const plan *p, const plan_tensor *t, plan_shard s, int64_t local[PLAN_MAX_RANK]) {
    bool ok = true;
    for (uint32_t a = 0; a < PLAN_MAX_AXES; a++)
        if (s.map[a] != PLAN_SHARD_R &&
            (a >= p->meta.n_axes || (s.map[a] >= PLAN_SHARD_D(0) && s.map[a] - PLAN_SHARD_D(0) >= t->rank)))
            ok = false;
    for (int d = 0; d < PLAN_MAX_RANK; d++) {
        uint64_t w = d < t->rank ? plan_shard_ways(p, s, d) : 0;
        local[d] = 0;
        if (d >= t->rank) continue;
        if (w == 0 || w > INT64_MAX || t->shape[d] % (int64_t)w) ok = false;
        else local[d] = t->shape[d] / (int64_t)w;
    }
    return ok;
}

int64_t plan_zigzag_pos(int64_t i, int64_t n, uint32_t z) {
    if (z < 2 || n % z) return i;
    int64_t h = n / z, k = i / h;
    return (k % 2 == 0 ? k / 2 : (int64_t)z - 1 - k / 2) * h + i % h;
}

uint64_t plan_buffer_expected_bytes(const plan *p, const plan_buffer *b) {
    if (b->tensor == PLAN_NONE || b->tensor >= p->n_tensors) return 0;
    const plan_tensor *t = &p->tensors[b->tensor];
    int64_t local[PLAN_MAX_RANK];
    uint64_t n = plan_dtype_bytes(b->dtype);
    if (!n || t->rank > PLAN_MAX_RANK || !plan_shard_local_shape(p, t, b->shard, local)) return 0;
    for (int d = 0; d < t->rank; d++)
        if (local[d] < 0 || __builtin_mul_overflow(n, (uint64_t)local[d], &n)) return 0;
    return n;
}

void plan_shard_text(const plan *p, plan_shard s, char *buf, size_t n) {
    size_t at = 0;
    if (n) buf[0] = 0;
    for (uint32_t a = 0; a < PLAN_MAX_AXES && at < n; a++) {
        uint8_t v = s.map[a];
        if (v == PLAN_SHARD_R) continue;
        char axis[16], val[8];
        if (a < p->meta.n_axes) snprintf(axis, sizeof(axis), "%.8s", p->meta.axis_names[a]);
        else snprintf(axis, sizeof(axis), "?%u", a);
        if (v == PLAN_SHARD_V) snprintf(val, sizeof(val), "v");
        else snprintf(val, sizeof(val), "d%u", v - PLAN_SHARD_D(0));
        int k = snprintf(buf + at, n - at, "%s%s=%s", at ? " " : "", axis, val);
        at = k < 0 ? n : at + (size_t)k;
    }
}
