/*
 * cpu/embedding.c: the CPU backend's embeddings, forward and backward. embedding: ids [*b]
 * (int32), table [v,h] -> [*b,h]; embedding_bag: ids [b,l], table [r,e] -> [b,e], the sum of
 * the l rows. A table piece that holds rows [start, start + shape) of the logical table looks
 * up only the ids in that range (the others give zero rows: the output is a partial sum over
 * the pieces); the gradients write only the rows they hold. An id outside the logical table
 * [0, full) is an error.
 */
#include "cpu.h"

// Every id in [0, rows): an id outside the logical table is an error, not a zero row.
static int ids_check(kctx *c, const rt_view *ids, const char *what, int64_t rows) {
    const int32_t *id = cpu_i(ids);
    int64_t n = cpu_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= rows)
            return cpu_fail(c, "%s holds id %d at element %lld, outside the table's %lld rows", what, id[i], (long long)i,
                            (long long)rows);
    return 0;
}

// ids [*b] (input 0 or 1), table [v,h] (named tname), rows [*b,h] (named rname).
static int emb_check(kctx *c, const rt_view *ids, const char *iname, const rt_view *table, const char *tname, const rt_view *rows,
                     const char *rname) {
    if (cpu_rank_is(c, tname, table, 2, "[v,h]")) return -1;
    if (ids->rank >= PLAN_MAX_RANK) return cpu_fail(c, "%s has rank %d; at most %d", iname, ids->rank, PLAN_MAX_RANK - 1);
    kshape want = cpu_shape_of(ids);
    want.d[want.rank++] = table->shape[1];
    if (cpu_expect(c, rname, rows, want)) return -1;
    return ids_check(c, ids, iname, table->full[0]);
}

// Adds (or copies) row `id` of the piece [lo, lo + n) into out; nothing when it is elsewhere.
static void emb_row(const real *table, int64_t lo, int64_t n, int64_t h, int32_t id, real *out, bool add) {
    bool here = id >= lo && id < lo + n;
    for (int64_t j = 0; j < h; j++) {
        real v = here ? table[(id - lo) * h + j] : 0;
        out[j] = add ? out[j] + v : v;
    }
}

// (ids [*b], table [v,h]) -> [*b,h].
int CPU_KERNEL(embedding)(kctx *c) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (emb_check(c, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    int64_t n = cpu_numel(ids), h = t->shape[1];
    const int32_t *id = cpu_i(ids);
    for (int64_t i = 0; i < n; i++) emb_row(cpu_r(t), t->start[0], t->shape[0], h, id[i], cpu_r(y) + i * h, c->acc);
    return 0;
}

// (dy [*b,h], ids [*b]) -> dtable [v,h]: dy's rows summed into the rows this piece holds.
int CPU_KERNEL(embedding_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (emb_check(c, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    int64_t n = cpu_numel(ids), h = dt->shape[1], lo = dt->start[0];
    const int32_t *id = cpu_i(ids);
    const real *DY = cpu_r(dy);
    real *DT = cpu_r(dt);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < n; i++)
        if (id[i] >= lo && id[i] < lo + dt->shape[0])
            for (int64_t j = 0; j < h; j++) DT[(id[i] - lo) * h + j] += DY[i * h + j];
    return 0;
}

// ids [b,l], table [r,e], rows [b,e].
static int bag_check(kctx *c, const rt_view *ids, const char *iname, const rt_view *table, const char *tname, const rt_view *rows,
                     const char *rname) {
    if (cpu_rank_is(c, iname, ids, 2, "[b,l]") || cpu_rank_is(c, tname, table, 2, "[r,e]")) return -1;
    if (cpu_expect(c, rname, rows, (kshape){.rank = 2, .d = {ids->shape[0], table->shape[1]}})) return -1;
    return ids_check(c, ids, iname, table->full[0]);
}

// (ids [b,l], table [r,e]) -> [b,e]: the sum of each bag's rows.
int CPU_KERNEL(embedding_bag)(kctx *c) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (bag_check(c, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    int64_t b = ids->shape[0], l = ids->shape[1], e = t->shape[1];
    const int32_t *id = cpu_i(ids);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < l; j++) emb_row(cpu_r(t), t->start[0], t->shape[0], e, id[i * l + j], cpu_r(y) + i * e, true);
    return 0;
}

// (dy [b,e], ids [b,l]) -> dtable [r,e]: each bag's dy into each of its rows this piece holds.
int CPU_KERNEL(embedding_bag_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (bag_check(c, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    int64_t b = ids->shape[0], l = ids->shape[1], e = dt->shape[1], lo = dt->start[0];
    const int32_t *id = cpu_i(ids);
    const real *DY = cpu_r(dy);
    real *DT = cpu_r(dt);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < l; j++) {
            int32_t r = id[i * l + j];
            if (r < lo || r >= lo + dt->shape[0]) continue;
            for (int64_t k = 0; k < e; k++) DT[(r - lo) * e + k] += DY[i * e + k];
        }
    return 0;
}
