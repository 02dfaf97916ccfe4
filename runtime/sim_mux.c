/*
 * sim_mux.c: GPU multiplexing on the simulator, DeepPool-style (arXiv 2112.10065, section 1.6 of
 * shared/research/deeppool_shadowsync.md): a background job is packed into every rank's idle
 * time on its compute stream, after the foreground plan has been simulated as usual.
 *
 * What. The background is a one-rank plan of another model. Its work is its simulated step's
 * compute and copy intervals in the order they ran, cut into pieces of at most piece_s
 * (DeepPool's be_graph_split_ms, 0.5 ms): consecutive operators share a piece until the next
 * would make it longer, and an operator longer than piece_s is cut into equal parts. For each
 * class of foreground ranks, the busy time is the union of its compute stream's intervals (any
 * instruction) and of its collectives' intervals on any stream; the rest of the step is its gaps.
 * Steps repeat back to back, so the gap at the end of a step joins the one at the start of the
 * next, and a rank whose compute stream is idle for the whole step (a rank outside a narrow burst
 * layer) has one gap as long as the horizon: it runs background steps back to back. Pieces run
 * one at a time (at most one in flight), in the background's order, each in the first gap from
 * the previous piece's end that can hold all of it (a piece never waits for a gap by spanning
 * foreground work); the background's steps follow one another through its piece list.
 *
 * Checks. After packing, every piece is tested against the raw intervals (not the gaps): one
 * that overlaps the compute stream's work is an overrun, one that overlaps a collective breaks
 * DeepPool's rule. Both counts are 0 by construction; they are computed so that a test can hold
 * the packer to it, and the foreground's slowdown is reported from them: 1 + interference times
 * the share of pieces that overlap foreground work.
 *
 * Limits. Time in which a stream waits for a collective's other members or for a message is idle
 * here (the simulator keeps only run intervals), so a piece may run while its rank waits to
 * enter a collective, as DeepPool lets it during a long receive. The background's own memory is
 * not checked against the device. Pieces on one rank do not contend with the foreground's other
 * streams (copies, communication), as the simulator's streams never do.
 */
#include "sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MUX_MAX_STEPS 1000u // foreground steps a packing may span

typedef struct span {
    double a, b;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static bool spans_add(spans *s, double a, double b) {
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 64;
        span *q = realloc(s->v, c * sizeof(span));
        if (!q) return false;
        s->v = q, s->cap = c;
    }
    s->v[s->n++] = (span){a, b};
    return true;
}

static int cmp_span(const void *x, const void *y) {
    const span *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a ? 1 : 0;
}

// Sorts and merges s into disjoint spans in order.
static void spans_union(spans *s) {
    if (!s->n) return;
    qsort(s->v, s->n, sizeof(span), cmp_span);
    size_t w = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->v[i].a <= s->v[w].b) s->v[w].b = fmax(s->v[w].b, s->v[i].b);
        else s->v[++w] = s->v[i];
    }
    s->n = w + 1;
}

// Whether [a, b) overlaps a span of the disjoint, ordered s by more than a rounding error.
static bool spans_overlap(const spans *s, double a, double b) {
    const double eps = 1e-12;
    size_t lo = 0, hi = s->n; // the first span that ends after a
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->v[mid].b <= a + eps) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n && s->v[lo].a < b - eps && s->v[lo].b > a + eps;
}

// The class's compute stream's intervals (busy) and its collectives' on any stream (coll).
static bool class_spans(const plan *p, const sim_class *c, spans *busy, spans *coll) {
    const plan_program *pg = &p->programs[c->program];
    for (uint32_t s = 0; s < 8; s++)
        for (uint32_t i = 0; i < c->n_iv[s]; i++) {
            const sim_interval *v = &c->iv[s][i];
            if (v->end <= v->start) continue;
            if (s == c->main_stream && !spans_add(busy, v->start, v->end)) return false;
            if (pg->insns[v->insn].kind == PLAN_I_COLL && !spans_add(coll, v->start, v->end)) return false;
        }
    spans_union(busy), spans_union(coll);
    return true;
}

// The background's pieces: its compute and copy work in the order it ran, cut at piece_s.
static bool bg_pieces(const plan *bg, const sim_result *br, double piece_s, spans *out, double *work) {
    const sim_class *c = &br->classes[0];
    const plan_program *pg = &bg->programs[c->program];
    spans ops = {0};
    for (uint32_t s = 0; s < 8; s++)
        for (uint32_t i = 0; i < c->n_iv[s]; i++) {
            const sim_interval *v = &c->iv[s][i];
            uint32_t k = pg->insns[v->insn].kind;
            if ((k == PLAN_I_COMPUTE || k == PLAN_I_COPY) && v->end > v->start && !spans_add(&ops, v->start, v->end))
                return free(ops.v), false;
        }
    qsort(ops.v, ops.n, sizeof(span), cmp_span);
    double cur = 0;
    *work = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < ops.n; i++) {
        double t = ops.v[i].b - ops.v[i].a;
        *work += t;
        if (cur > 0 && cur + t > piece_s) ok = spans_add(out, 0, cur), cur = 0;
        if (t <= piece_s) {
            cur += t;
            continue;
        }
        double parts = ceil(t / piece_s);
        for (double j = 0; ok && j < parts; j++) ok = spans_add(out, 0, t / parts);
    }
    if (ok && cur > 0) ok = spans_add(out, 0, cur);
    free(ops.v);
    return ok;
}

// The gaps of one class over `steps` steps of length step (the complement of busy and coll,
// with the end of one step joined to the start of the next).
static bool class_gaps(const spans *busy, const spans *coll, double step, uint32_t steps, spans *gaps) {
    spans all = {0};
    for (size_t i = 0; i < busy->n; i++)
        if (!spans_add(&all, busy->v[i].a, busy->v[i].b)) return free(all.v), false;
    for (size_t i = 0; i < coll->n; i++)
        if (!spans_add(&all, coll->v[i].a, coll->v[i].b)) return free(all.v), false;
    spans_union(&all);
    bool ok = true;
    double from = 0; // where the current gap began (global time)
    for (uint32_t k = 0; ok && k < steps; k++)
        for (size_t i = 0; ok && i < all.n; i++) {
            double a = k * step + all.v[i].a, b = k * step + fmin(all.v[i].b, step);
            if (a > from) ok = spans_add(gaps, from, a);
            from = fmax(from, b);
        }
    if (ok && steps * step > from) ok = spans_add(gaps, from, steps * step);
    free(all.v);
    return ok;
}

// Packs the pieces into the gaps from piece *next on; checks each against busy and coll.
static void pack(const spans *gaps, const spans *pieces, const spans *busy, const spans *coll, double step, uint64_t *next,
                 double *work, uint64_t *admitted, uint64_t *overrun, uint64_t *in_coll) {
    double t = 0;
    for (size_t g = 0; g < gaps->n; g++) {
        t = fmax(t, gaps->v[g].a);
        for (;;) {
            double d = pieces->v[*next % pieces->n].b;
            if (t + d > gaps->v[g].b) break;
            double k = floor(t / step), a0 = t - k * step, a1 = a0 - step;
            bool o = spans_overlap(busy, a0, a0 + d) || spans_overlap(busy, a1, a1 + d);
            bool c = spans_overlap(coll, a0, a0 + d) || spans_overlap(coll, a1, a1 + d);
            *overrun += o, *in_coll += c, *admitted += 1, *work += d;
            t += d;
            *next += 1;
        }
    }
}

static uint64_t batch_of(const plan *p) {
    const char *o = p->meta.options ? strstr(p->meta.options, "--global-batch ") : NULL;
    return o ? strtoull(o + strlen("--global-batch "), NULL, 10) : 0;
}

// Step 2 of sim_mux: one class's packing, added into m.
static bool mux_class(const plan *fg, const sim_class *c, const spans *pieces, uint32_t steps, sim_mux_result *m, double *work) {
    spans busy = {0}, coll = {0}, gaps = {0};
    bool ok = class_spans(fg, c, &busy, &coll) && class_gaps(&busy, &coll, m->fg_step_s, steps, &gaps);
    uint64_t next = 0, admitted = 0, overrun = 0, in_coll = 0;
    *work = 0;
    if (ok) pack(&gaps, pieces, &busy, &coll, m->fg_step_s, &next, work, &admitted, &overrun, &in_coll);
    m->admitted += admitted * c->n_ranks, m->overrun += overrun * c->n_ranks, m->in_collective += in_coll * c->n_ranks;
    if (busy.n == 0) m->idle_ranks += c->n_ranks;
    free(busy.v), free(coll.v), free(gaps.v);
    return ok;
}

plan_status sim_mux(const plan *fg, const sim_result *fr, const plan *bg, const sim_mux_opts *o, sim_mux_result *m, char *err,
                    size_t err_n) {
    memset(m, 0, sizeof(*m));
    if (bg->meta.world != 1) return plan_errorf(PLAN_ERR_INVALID, err, err_n, "the background plan has %u ranks: it must have one", bg->meta.world);
    if (!(o->piece_s > 0)) return plan_errorf(PLAN_ERR_INVALID, err, err_n, "the piece length must be positive");
    for (uint32_t k = 0; k < fr->n_classes; k++)
        if (!fr->classes[k].kept) return plan_errorf(PLAN_ERR_INVALID, err, err_n, "the foreground's simulation kept no intervals for rank %u", fr->classes[k].rank);
    // step 1: the background alone, and its pieces
    sim_opts bo = {.intervals = true, .rank_lo = 0, .rank_hi = 0};
    sim_result br;
    plan_status st = sim_run(bg, &bo, &br, err, err_n);
    if (st) return st;
    spans pieces = {0};
    double bg_work = 0;
    bool ok = bg_pieces(bg, &br, o->piece_s, &pieces, &bg_work);
    m->bg_step_s = br.step_s;
    sim_free(&br);
    if (!ok) return free(pieces.v), plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    if (!pieces.n) return plan_errorf(PLAN_ERR_INVALID, err, err_n, "the background plan computes nothing");
    m->n_pieces = pieces.n;
    for (size_t i = 0; i < pieces.n; i++) m->piece_max_s = fmax(m->piece_max_s, pieces.v[i].b);
    m->fg_step_s = fr->step_s;
    m->fg_batch = batch_of(fg), m->bg_batch = batch_of(bg);
    double fb = m->fg_batch ? (double)m->fg_batch : 1, bb = m->bg_batch ? (double)m->bg_batch : 1;
    uint32_t steps = (uint32_t)fmin(MUX_MAX_STEPS, fmax(4, ceil(2 * m->bg_step_s / fmax(m->fg_step_s, 1e-12))));
    m->steps = o->steps ? o->steps : steps;
    // step 2: each class of foreground ranks
    double W = fg->meta.world, busy = 0, packed = 0;
    for (uint32_t k = 0; ok && k < fr->n_classes; k++) {
        double w;
        ok = mux_class(fg, &fr->classes[k], &pieces, m->steps, m, &w);
        busy += fr->classes[k].main_busy_s * fr->classes[k].n_ranks;
        packed += w / m->steps * fr->classes[k].n_ranks;
    }
    free(pieces.v);
    if (!ok) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    // step 3: the figures
    m->fg_samples_s = m->fg_step_s > 0 ? fb / m->fg_step_s : 0;
    m->bg_alone_samples_s = m->bg_step_s > 0 ? bb / m->bg_step_s : 0;
    m->bg_samples_s = m->fg_step_s > 0 && bg_work > 0 ? packed / bg_work * bb / m->fg_step_s : 0;
    m->util_before = m->fg_step_s > 0 ? busy / (W * m->fg_step_s) : 0;
    m->util_after = m->fg_step_s > 0 ? (busy + packed) / (W * m->fg_step_s) : 0;
    m->overlap_share = m->admitted ? (double)(m->overrun + m->in_collective) / (double)m->admitted : 0;
    m->slowdown = 1 + o->interference * m->overlap_share;
    m->fg_norm = 1 / m->slowdown;
    m->bg_norm = m->bg_alone_samples_s > 0 ? m->bg_samples_s / (W * m->bg_alone_samples_s) : 0;
    m->total = m->fg_norm + m->bg_norm;
    return PLAN_OK;
}

void sim_mux_print(FILE *f, const sim_mux_result *m, const char *in) {
    const char *unit = m->fg_batch && m->bg_batch ? "samples/s" : "steps/s (a plan has no --global-batch)";
    fprintf(f, "%sforeground      %.4g ms per step, %.4g %s (unchanged: slowdown %.3f x, %llu of %llu pieces overlap its work, "
               "%llu its collectives)\n",
            in, 1e3 * m->fg_step_s, m->fg_samples_s, unit, m->slowdown, (unsigned long long)m->overrun,
            (unsigned long long)m->admitted, (unsigned long long)m->in_collective);
    fprintf(f, "%sbackground      %.4g ms per step alone on one GPU (%.4g %s); %llu pieces of at most %.4g ms per step\n", in,
            1e3 * m->bg_step_s, m->bg_alone_samples_s, unit, (unsigned long long)m->n_pieces, 1e3 * m->piece_max_s);
    fprintf(f, "%spacked          %.4g %s summed over ranks (%u rank%s idle the whole step), over %u foreground steps\n", in,
            m->bg_samples_s, unit, m->idle_ranks, m->idle_ranks == 1 ? "" : "s", m->steps);
    fprintf(f, "%sGPU time        compute streams busy %.1f%% of the step before, %.1f%% with the background\n", in,
            100 * m->util_before, 100 * m->util_after);
    fprintf(f, "%scluster         total throughput %.3f = foreground %.3f + background %.3f (each job over its own throughput "
               "alone on the whole cluster: this plan, and the background on every GPU)\n",
            in, m->total, m->fg_norm, m->bg_norm);
}
