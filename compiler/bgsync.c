/*
 * bgsync.c: synchronization in the background (ShadowSync, arXiv 2003.03477), and --sync.
 *
 * With `--sync background:...` every data-parallel rank trains its own replica of the dense
 * parameters: phase 3 leaves out their gradient all-reduce (preserve.c scales the local
 * gradient to the gradient of the local mean instead), and this file appends to each program a
 * background program that keeps the replicas together (the emitter, emit.c, calls it once the
 * foreground program is placed). A parameter's replicas are the ranks of
 * the mesh axes it is replicated along with its gradient summed: dp, and tp where the ILP split
 * its operators by the batch (ShadowSync's layout: embedding tables sharded over the tp group,
 * the dense layers data-parallel beside them); each parameter's part of a round runs over a
 * group of its own axes, and the defaults that depend on the number of trainers N take its
 * replica count. The program is one round of synchronization in a background loop
 * (runtime/PLAN_FORMAT.md: loop variable `background`, count = the period in steps, 0 =
 * continuous) on a stream of its own at the lowest priority and communicator groups of its own,
 * which the runtime runs beside the steps.
 *
 * A round, per parameter x (home buffer X), made of copies, scale and add operators and one
 * all-reduce over the replicas, so any backend runs it with the kernels it has:
 *   MA     s = x; a = allreduce(s / N); x += a - s
 *   EASGD  s = x; d = alpha (s - c); x -= d; c += allreduce(d)     (c: the centre, one per rank,
 *          kept equal on every rank because every rank adds the same sum)
 *   BMUF   s = x; g = allreduce(s / N) - (w [+ eta m]); m = eta m + zeta g; w += m;
 *          x += (w [+ eta m]) - s         (w: the global model; [..]: with Nesterov)
 * With Nesterov the replicas start a block from the look-ahead w + eta m, so the block's
 * progress g is measured from there (Chen & Huo's NBM): measured from w, the look-ahead would be
 * counted again as progress, m would grow by (1 + zeta) eta per round, and the default eta
 * 1 - 1/N would diverge from N = 3 on.
 * Every update of x is a delta against the snapshot s, so what the foreground wrote to x while
 * the round was in flight is kept. The centre and the global model start as the parameter's
 * initial values (state tensors "NAME:easgd_center", "NAME:bmuf_global", which the runtime
 * initializes from the param NAME as it does "NAME:master"); the block momentum at zero.
 *
 * Buffers of the round are placed past the foreground's arena (the two run at the same time;
 * plan_check refuses a background buffer that overlaps a foreground one). A round goes group by
 * group, and in a group parameter by parameter: each one's snapshot, its all-reduce, its update,
 * so that the foreground moves on from a snapshot for one parameter's round only. With
 * bucket=BYTES the params of a group share one in-place all-reduce instruction up to BYTES
 * (their buffers back to back, so a runtime reduces them as one vector and pays one
 * collective's latency: dlrm's 12 dense params, one collective instead of 12), every snapshot
 * of the bucket taken before it. A parameter alone larger than chunk= bytes (default 4 MiB) is
 * all-reduced in pieces of at most that, each a collective over a range of the buffer's
 * elements, so that no one background collective holds the link long (NCCL does not preempt a
 * running kernel for a higher-priority stream). Every rank runs the same program, so every rank
 * issues them in the same order. Limits: parameters of repeated blocks are not supported
 * (preserve.c refuses them).
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BG_ALIGN 256u
#define BG_BUCKET_MAX 1024 // params in one bucket (the plan allows 16384 pairs)
#define BG_CHUNK_BYTES (4ll << 20) // the default chunk: about 0.2 ms at 25 GB/s, DeepPool's 0.5 ms pieces at most

/* ---- --sync ---- */

static pcc_status sync_bad(const char *arg, const char *why) {
    fprintf(stderr, "%s: --sync \"%s\": %s; it wants allreduce, or background:algo=ma|easgd|bmuf[,period=K|continuous]"
                    "[,alpha=A][,eta=E][,zeta=Z][,nesterov=0|1][,hogwild][,chunk=BYTES][,bucket=BYTES] (see plancc --help)\n",
            pcc_progname, arg, why);
    return PCC_ERR_INPUT;
}

static bool num_of(const char *v, double lo, double hi, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi)) return false;
    *out = x;
    return true;
}

// One key=value (or a bare key) of the background list into o; *seen collects the keys.
static pcc_status sync_key(const char *arg, char *kv, pcc_sync_opts *o, unsigned *seen) {
    static const char *const keys[] = {"algo", "period", "alpha", "eta", "zeta", "nesterov", "hogwild", "chunk", "bucket"};
    char *eq = strchr(kv, '='), why[160];
    if (eq) *eq = 0;
    const char *v = eq ? eq + 1 : NULL;
    int k = -1;
    for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
        if (!strcmp(kv, keys[i])) k = i;
    if (k < 0) return snprintf(why, sizeof why, "unknown key \"%s\"", kv), sync_bad(arg, why);
    if (*seen >> k & 1) return snprintf(why, sizeof why, "\"%s\" given twice", kv), sync_bad(arg, why);
    *seen |= 1u << k;
    if ((k == 6) != !v) return snprintf(why, sizeof why, k == 6 ? "\"hogwild\" takes no value" : "\"%s\" needs a value", kv), sync_bad(arg, why);
    double x;
    switch (k) {
    case 0:
        if (!strcmp(v, "ma")) o->algo = PCC_SYNC_MA;
        else if (!strcmp(v, "easgd")) o->algo = PCC_SYNC_EASGD;
        else if (!strcmp(v, "bmuf")) o->algo = PCC_SYNC_BMUF;
        else return snprintf(why, sizeof why, "algo wants ma, easgd or bmuf, got \"%.40s\"", v), sync_bad(arg, why);
        return PCC_OK;
    case 1:
        if (!strcmp(v, "continuous")) return o->period = 0, PCC_OK;
        if (!num_of(v, 1, 1 << 20, &x) || x != floor(x))
            return snprintf(why, sizeof why, "period wants an integer from 1 to %d (steps) or continuous, got \"%.40s\"", 1 << 20, v), sync_bad(arg, why);
        return o->period = (int)x, PCC_OK;
    case 5:
        if (strcmp(v, "0") && strcmp(v, "1")) return snprintf(why, sizeof why, "nesterov wants 0 or 1, got \"%.40s\"", v), sync_bad(arg, why);
        return o->nesterov = *v == '1', PCC_OK;
    case 6: return o->hogwild = true, PCC_OK;
    case 7:
        if (!num_of(v, 0, 1ull << 40, &x) || x != floor(x))
            return snprintf(why, sizeof why, "chunk wants a whole number of bytes from 0 (no chunks) to 2^40, got \"%.40s\"", v), sync_bad(arg, why);
        return o->chunk_bytes = (int64_t)x, PCC_OK;
    case 8:
        if (!num_of(v, 0, 1ull << 40, &x) || x != floor(x))
            return snprintf(why, sizeof why, "bucket wants a whole number of bytes from 0 (one parameter a collective) to 2^40, got \"%.40s\"", v),
                   sync_bad(arg, why);
        return o->bucket_bytes = (int64_t)x, PCC_OK;
    default: {
        double *dst = k == 2 ? &o->alpha : k == 3 ? &o->eta : &o->zeta;
        double lo = k == 3 ? 0 : 1e-9, hi = k == 3 ? 0.999999 : k == 2 ? 1 : 100;
        if (!num_of(v, lo, hi, &x))
            return snprintf(why, sizeof why, "%s wants a number in %s%g, %g], got \"%.40s\"", kv, k == 3 ? "[" : "(", k == 3 ? lo : 0, hi, v),
                   sync_bad(arg, why);
        *dst = x;
        return PCC_OK;
    }
    }
}

pcc_status sync_parse(const char *arg, pcc_sync_opts *o) {
    memset(o, 0, sizeof *o);
    if (!strcmp(arg, "allreduce")) return PCC_OK;
    static const char prefix[] = "background:";
    if (strncmp(arg, prefix, sizeof prefix - 1)) return sync_bad(arg, "not allreduce and not background:...");
    char buf[256];
    if (strlen(arg) >= sizeof buf) return sync_bad(arg, "too long");
    snprintf(buf, sizeof buf, "%s", arg + sizeof prefix - 1);
    o->period = 1, o->algo = PCC_SYNC_ALLREDUCE;
    unsigned seen = 0;
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save))
        if (sync_key(arg, kv, o, &seen)) return PCC_ERR_INPUT;
    if (o->algo == PCC_SYNC_ALLREDUCE) return sync_bad(arg, "background needs algo=");
    if ((seen & 4u) && o->algo != PCC_SYNC_EASGD) return sync_bad(arg, "alpha is EASGD's");
    if ((seen & 0x38u) && o->algo != PCC_SYNC_BMUF) return sync_bad(arg, "eta, zeta and nesterov are BMUF's");
    if (!(seen & 4u)) o->alpha = -1;
    if (!(seen & 8u)) o->eta = -1;
    if (!(seen & 16u)) o->zeta = -1;
    if (!(seen & 32u)) o->nesterov = -1;
    if (!(seen & 128u)) o->chunk_bytes = -1;
    return PCC_OK;
}

// o with the defaults that depend on the number of trainers filled in.
static pcc_sync_opts sync_resolve(const pcc_sync_opts *o, int n_rep) {
    pcc_sync_opts r = *o;
    if (r.alpha < 0) r.alpha = 0.5 / n_rep;      // a moving rate N alpha of 1/2
    if (r.eta < 0) r.eta = 1.0 - 1.0 / n_rep;    // Chen & Huo's block momentum
    if (r.zeta < 0) r.zeta = 1.0;
    if (r.nesterov < 0) r.nesterov = 1;
    if (r.chunk_bytes < 0) r.chunk_bytes = BG_CHUNK_BYTES;
    return r;
}

const char *sync_str(pcc_arena *a, const pcc_sync_opts *o) {
    static const char *const algo[] = {"allreduce", "ma", "easgd", "bmuf"};
    if (o->algo == PCC_SYNC_ALLREDUCE) return "allreduce";
    char period[24], extra[256] = "";
    if (o->period) snprintf(period, sizeof period, "%d", o->period);
    else snprintf(period, sizeof period, "continuous");
    size_t k = 0;
    if (o->alpha >= 0) k += (size_t)snprintf(extra + k, sizeof extra - k, ",alpha=%.17g", o->alpha);
    if (o->eta >= 0) k += (size_t)snprintf(extra + k, sizeof extra - k, ",eta=%.17g", o->eta);
    if (o->zeta >= 0) k += (size_t)snprintf(extra + k, sizeof extra - k, ",zeta=%.17g", o->zeta);
    if (o->nesterov >= 0) k += (size_t)snprintf(extra + k, sizeof extra - k, ",nesterov=%d", o->nesterov);
    if (o->chunk_bytes >= 0) k += (size_t)snprintf(extra + k, sizeof extra - k, ",chunk=%lld", (long long)o->chunk_bytes);
    if (o->bucket_bytes > 0) snprintf(extra + k, sizeof extra - k, ",bucket=%lld", (long long)o->bucket_bytes);
    return arena_printf(a, "background:algo=%s,period=%s%s%s", algo[o->algo], period, extra, o->hogwild ? ",hogwild" : "");
}

/* ---- the background program ---- */

// The room each array the background program appends to has in the plan's arena (plan_grow;
// 0: exactly what phase 3 left there).
typedef struct bg_room {
    uint32_t tensors, buffers, insns, args, attrs;
} bg_room;

typedef struct bg {
    plan *p;
    plan_program *pr;
    uint32_t stream, group;     // group: the current param's replicas
    uint64_t end;               // the arena's end so far
    const pcc_cluster *c;       // the cost model of a chunk: an all-reduce of its bytes over the replicas
    pcc_group_shape replicas;
    bg_room room;
} bg;

// Room for n_new items in array old of n_old (plan_grow, asserted: the background program
// appends an item at a time, and a copy each time cost 3.5 GB and 11 s for dlrm-small's chunked
// rounds on 4 ranks).
static void *grow(plan *p, void *old, uint32_t n_old, uint32_t n_new, size_t size, uint32_t *room) {
    void *v = plan_grow(p, old, n_old, n_new, room, size);
    PCC_ASSERT(v);
    return v;
}

// The state tensor "NAME<suffix>" shaped as tensor t (appended once for the whole plan).
static uint32_t state_tensor(bg *B, uint32_t t, const char *suffix) {
    plan *p = B->p;
    char name[256];
    snprintf(name, sizeof name, "%s%s", p->tensors[t].name ? p->tensors[t].name : "", suffix);
    for (uint32_t i = 0; i < p->n_tensors; i++)
        if (p->tensors[i].name && !strcmp(p->tensors[i].name, name)) return i;
    p->tensors = grow(p, p->tensors, p->n_tensors, p->n_tensors + 1, sizeof *p->tensors, &B->room.tensors);
    plan_tensor *s = &p->tensors[p->n_tensors];
    *s = p->tensors[t];
    s->kind = PLAN_T_STATE, s->source = 0, s->a = s->b = 0;
    char *d = plan_alloc(p, strlen(name) + 1);
    PCC_ASSERT(d);
    memcpy(d, name, strlen(name) + 1);
    s->name = d;
    return p->n_tensors++;
}

// A buffer like buffer `like` (its shard and size) for tensor t, past the arena's end; packed:
// right after the previous one (a bucket's buffers lie back to back), else aligned.
static uint32_t bg_buffer_at(bg *B, uint32_t like, uint32_t t, bool persist, bool packed) {
    plan_program *pr = B->pr;
    plan_buffer b = pr->buffers[like];
    PCC_ASSERT(b.mb_slots == 1 && b.layer_slots == 1);
    b.tensor = t, b.offset = B->end, b.flags = persist ? PLAN_BUF_PERSIST : 0, b.mb_stride = b.layer_stride = 0;
    B->end = packed ? B->end + b.bytes : (B->end + b.bytes + BG_ALIGN - 1) / BG_ALIGN * BG_ALIGN;
    pr->buffers = grow(B->p, pr->buffers, pr->n_buffers, pr->n_buffers + 1, sizeof b, &B->room.buffers);
    pr->buffers[pr->n_buffers] = b;
    return pr->n_buffers++;
}

static uint32_t bg_buffer(bg *B, uint32_t like, uint32_t t, bool persist) { return bg_buffer_at(B, like, t, persist, false); }

static plan_insn *bg_insn(bg *B, plan_insn_kind kind, const uint32_t *args, int nargs, float t_s) {
    plan_program *pr = B->pr;
    pr->insns = grow(B->p, pr->insns, pr->n_insns, pr->n_insns + 1, sizeof *pr->insns, &B->room.insns);
    pr->args = grow(B->p, pr->args, pr->n_args, pr->n_args + (uint32_t)nargs, sizeof *pr->args, &B->room.args);
    plan_insn *in = &pr->insns[pr->n_insns++];
    memset(in, 0, sizeof *in);
    in->kind = (uint8_t)kind, in->stream = (uint8_t)B->stream, in->nargs = (uint16_t)nargs, in->args = pr->n_args;
    in->attrs = PLAN_NONE, in->t_s = t_s;
    for (int i = 0; i < nargs; i++) pr->args[pr->n_args++] = args[i];
    return in;
}

static void bg_copy(bg *B, uint32_t src, uint32_t dst, float t_s) { bg_insn(B, PLAN_I_COPY, (uint32_t[]){src, dst}, 2, t_s); }

static void bg_add(bg *B, uint32_t a, uint32_t b, uint32_t out, float t_s) {
    bg_insn(B, PLAN_I_COMPUTE, (uint32_t[]){a, b, out}, 3, t_s)->code = PCC_OP_ADD;
}

static void bg_scale(bg *B, uint32_t in, uint32_t out, double k, float t_s) {
    plan_program *pr = B->pr;
    pr->attrs = grow(B->p, pr->attrs, pr->n_attrs, pr->n_attrs + 1, sizeof *pr->attrs, &B->room.attrs);
    memset(&pr->attrs[pr->n_attrs], 0, sizeof pr->attrs[0]);
    pr->attrs[pr->n_attrs].f[PLAN_AF_SCALE] = k;
    plan_insn *x = bg_insn(B, PLAN_I_COMPUTE, (uint32_t[]){in, out}, 2, t_s);
    x->code = PCC_OP_SCALE, x->attrs = pr->n_attrs++;
}

static void bg_allreduce(bg *B, uint32_t buf, float t_s) {
    plan_insn *x = bg_insn(B, PLAN_I_COLL, (uint32_t[]){buf, buf}, 2, t_s);
    x->code = PCC_COLL_ALL_REDUCE, x->a = (int32_t)B->group;
}

// One in-place all-reduce instruction over the n buffers a[0..n), a bucket when n > 1 (their
// slots lie back to back, so a runtime reduces them as one vector: one collective's latency).
static void bg_allreduce_bucket(bg *B, const uint32_t *a, int n, float t_s) {
    uint32_t args[2 * BG_BUCKET_MAX];
    PCC_ASSERT(n >= 1 && n <= BG_BUCKET_MAX);
    for (int j = 0; j < n; j++) args[j] = args[n + j] = a[j];
    plan_insn *x = bg_insn(B, PLAN_I_COLL, args, 2 * n, t_s);
    x->code = PCC_COLL_ALL_REDUCE, x->a = (int32_t)B->group;
}

// The in-place all-reduce of buf in pieces of at most `chunk` bytes (0: one piece), each a
// collective over elements start .. end - 1 (attrs; runtime/PLAN_FORMAT.md), its time the cost
// model's all-reduce of its own bytes (each chunk pays the collective's latency again; the
// share of t_s its bytes are would leave that out).
static void bg_allreduce_chunked(bg *B, uint32_t buf, float t_s, int64_t chunk) {
    plan_program *pr = B->pr;
    uint64_t eb = plan_dtype_bytes(pr->buffers[buf].dtype), n = pr->buffers[buf].bytes / eb;
    uint64_t per = chunk > 0 ? (uint64_t)chunk / eb : n;
    if (per < 1) per = 1;
    if (per >= n) {
        bg_allreduce(B, buf, t_s);
        return;
    }
    for (uint64_t lo = 0; lo < n; lo += per) {
        uint64_t hi = lo + per < n ? lo + per : n;
        pr->attrs = grow(B->p, pr->attrs, pr->n_attrs, pr->n_attrs + 1, sizeof *pr->attrs, &B->room.attrs);
        memset(&pr->attrs[pr->n_attrs], 0, sizeof pr->attrs[0]);
        pr->attrs[pr->n_attrs].i[PLAN_AI_START] = (int64_t)lo, pr->attrs[pr->n_attrs].i[PLAN_AI_END] = (int64_t)hi;
        double bytes = (double)((hi - lo) * eb);
        plan_insn *x = bg_insn(B, PLAN_I_COLL, (uint32_t[]){buf, buf}, 2, (float)cost_collective_s(B->c, PCC_COLL_ALL_REDUCE, bytes, B->replicas));
        x->code = PCC_COLL_ALL_REDUCE, x->a = (int32_t)B->group, x->attrs = pr->n_attrs++;
    }
}

// One parameter's part of a round: its buffers, then the operators before its all-reduce (pre)
// and after it (post); the all-reduce of A itself is its bucket's (the file's essay has the
// algebra).
typedef struct bg_slot {
    const pcc_bg_param *q;
    pcc_sync_opts o;
    uint32_t X, S, A, C, W, M, T;
} bg_slot;

static void bg_pre(bg *B, bg_slot *z) {
    const pcc_sync_opts *o = &z->o;
    uint32_t X = z->X, t = z->q->tensor, S, A = z->A;
    float e = z->q->pass_s;
    z->S = S = bg_buffer(B, X, t, false);
    bg_copy(B, X, S, e);
    if (o->algo == PCC_SYNC_MA) {
        bg_scale(B, S, A, 1.0 / z->q->replicas.size, e);
    } else if (o->algo == PCC_SYNC_EASGD) {
        uint32_t C = z->C = bg_buffer(B, X, state_tensor(B, t, ":easgd_center"), true);
        bg_scale(B, C, A, -1, e);
        bg_add(B, S, A, A, e);
        bg_scale(B, A, A, o->alpha, e); // d = alpha (s - c)
        bg_copy(B, A, S, e);            // keep d
    } else {
        z->W = bg_buffer(B, X, state_tensor(B, t, ":bmuf_global"), true);
        z->M = bg_buffer(B, X, state_tensor(B, t, ":bmuf_delta"), true);
        z->T = bg_buffer(B, X, t, false);
        bg_scale(B, S, A, 1.0 / z->q->replicas.size, e);
    }
}

static void bg_post(bg *B, const bg_slot *z) {
    const pcc_sync_opts *o = &z->o;
    uint32_t X = z->X, S = z->S, A = z->A;
    float e = z->q->pass_s;
    if (o->algo == PCC_SYNC_MA) {
        bg_scale(B, S, S, -1, e);
        bg_add(B, A, S, A, e);
        bg_add(B, X, A, X, e);
    } else if (o->algo == PCC_SYNC_EASGD) {
        bg_add(B, z->C, A, z->C, e); // c += the sum of every rank's d
        bg_scale(B, S, S, -1, e);
        bg_add(B, X, S, X, e);
    } else {
        uint32_t W = z->W, M = z->M, T = z->T;
        if (o->nesterov) {               // the block started from w + eta m, not from w
            bg_scale(B, M, T, o->eta, e);
            bg_add(B, W, T, T, e);
            bg_scale(B, T, T, -1, e);
        } else {
            bg_scale(B, W, T, -1, e);
        }
        bg_add(B, A, T, A, e);           // g = avg - (w [+ eta m])
        bg_scale(B, M, M, o->eta, e);
        bg_scale(B, A, A, o->zeta, e);
        bg_add(B, M, A, M, e);           // m = eta m + zeta g
        bg_add(B, W, M, W, e);           // w += m
        if (o->nesterov) {
            bg_scale(B, M, T, o->eta, e);
            bg_add(B, W, T, T, e);
        } else {
            bg_scale(B, W, T, 1, e); // a copy between tensors: W is the state, T the param
        }
        bg_scale(B, S, S, -1, e);
        bg_add(B, T, S, T, e);
        bg_add(B, X, T, X, e);
    }
}

// The round of slots z[0..n), which share a group: their A buffers back to back, every pre,
// one all-reduce (a bucket of n; one slot alone may be chunked), every post.
static void bg_bucket(bg *B, bg_slot *z, int n) {
    uint32_t a[BG_BUCKET_MAX];
    double bytes = 0;
    for (int j = 0; j < n; j++) {
        a[j] = z[j].A = bg_buffer_at(B, z[j].X, z[j].q->tensor, false, n > 1);
        bytes += (double)B->pr->buffers[a[j]].bytes;
    }
    B->end = (B->end + BG_ALIGN - 1) / BG_ALIGN * BG_ALIGN;
    B->group = z[0].q->group, B->replicas = z[0].q->replicas;
    for (int j = 0; j < n; j++) bg_pre(B, &z[j]);
    if (n == 1)
        bg_allreduce_chunked(B, a[0], z[0].q->coll_s, z[0].o.chunk_bytes);
    else
        bg_allreduce_bucket(B, a, n, (float)cost_collective_s(B->c, PCC_COLL_ALL_REDUCE, bytes, B->replicas));
    for (int j = 0; j < n; j++) bg_post(B, &z[j]);
}

void bgsync_emit(plan *p, plan_program *pr, const pcc_sync_opts *o, const pcc_bg_param *ps, int n, uint32_t stop_group,
                 const pcc_cluster *c) {
    PCC_ASSERT(o->algo != PCC_SYNC_ALLREDUCE && pr->n_streams < 8);
    if (n == 0) return;
    bg B = {.p = p, .pr = pr, .stream = pr->n_streams, .c = c, .end = (pr->arena_bytes + BG_ALIGN - 1) / BG_ALIGN * BG_ALIGN};
    int32_t lowest = 0;
    for (uint32_t s = 0; s < pr->n_streams; s++)
        if (pr->priority[s] > lowest) lowest = pr->priority[s];
    pr->priority[pr->n_streams++] = lowest + 1; // after everything else (CUDA: a larger number runs later)
    uint32_t loop = pr->n_insns;
    plan_insn *L = bg_insn(&B, PLAN_I_LOOP, NULL, 0, 0);
    L->stream = 0, L->attrs = PLAN_NONE;
    // Buckets (bucket=BYTES > 0): the params of one group in order, together up to BYTES; a
    // param larger than that alone. Without: every param alone. A param alone larger than
    // chunk= bytes is all-reduced in chunks.
    bg_slot *z = plan_alloc(p, sizeof *z * (size_t)n);
    bool *done = plan_alloc(p, sizeof *done * (size_t)n);
    PCC_ASSERT(z && done);
    memset(done, 0, sizeof *done * (size_t)n);
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        int k = 0;
        uint64_t held = 0;
        for (int j = i; j <= n; j++) {
            bool take = j < n && !done[j] && ps[j].group == ps[i].group;
            uint64_t bytes = take ? pr->buffers[ps[j].buffer].bytes : 0;
            pcc_sync_opts ro = take ? sync_resolve(o, ps[j].replicas.size) : *o;
            bool alone = take && (ro.bucket_bytes <= 0 || bytes > (uint64_t)ro.bucket_bytes);
            bool full = take && k && (alone || k == BG_BUCKET_MAX || held + bytes > (uint64_t)ro.bucket_bytes);
            if (k && (j == n || full)) bg_bucket(&B, z, k), k = 0, held = 0;
            if (!take) continue;
            done[j] = true;
            z[k++] = (bg_slot){.q = &ps[j], .o = ro, .X = ps[j].buffer};
            held += bytes;
            if (alone) bg_bucket(&B, z, k), k = 0, held = 0;
        }
    }
    B.group = stop_group;
    if (o->period == 0) { // the stop flag: a 4-byte f32 scratch, filled, set by the runtime, all-reduced
        pr->buffers = grow(p, pr->buffers, pr->n_buffers, pr->n_buffers + 1, sizeof *pr->buffers, &B.room.buffers);
        plan_buffer *f = &pr->buffers[pr->n_buffers];
        memset(f, 0, sizeof *f);
        f->tensor = PLAN_NONE, f->dtype = 0, f->offset = B.end, f->bytes = 4;
        f->mb_slots = f->layer_slots = 1;
        B.end += BG_ALIGN;
        bg_insn(&B, PLAN_I_COMPUTE, &pr->n_buffers, 1, 0)->code = PCC_OP_FILL; // the runtime sets it after this
        bg_allreduce(&B, pr->n_buffers++, 0);
    }
    L = &pr->insns[loop];
    L->code = (uint16_t)(o->hogwild ? PLAN_LOOP_BACKGROUND_HOGWILD : PLAN_LOOP_BACKGROUND);
    L->a = o->period;
    L->b = (int32_t)(pr->n_insns - loop - 1);
    pr->arena_bytes = B.end;
}
