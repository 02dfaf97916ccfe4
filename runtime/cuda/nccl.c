/*
 * cuda/nccl.c: the CUDA backend's communication through NCCL, with exactly the semantics of
 * the CPU backend's in-process NCCL (comm.c): every member's output element is the sum of the
 * contributing members' inputs that hold it.
 *
 * Communicators. The world's, from rank 0's ncclUniqueId (the rendezvous, launch.c); then, for
 * every plan group that some program uses, in group order on every rank, ncclCommSplit of the
 * world with color = this rank's instance of the group (the lowest member rank; 0 for an
 * explicit group) or NCCL_SPLIT_NOCOLOR, and key = the member's index, so the new
 * communicator's ranks are the interpreter's member indices. All are nonblocking
 * (ncclConfig_t.blocking = 0): every call may return ncclInProgress, and cu_nccl_settle polls
 * ncclCommGetAsyncError until the communicator is ready, with the run's timeout, so that no
 * call can hang forever on a dead peer.
 *
 * Send and receive: each of the walker's groups (a maximal run of send/recv on one stream) is
 * one ncclGroupStart/End, ncclSend/ncclRecv of bytes on the communicator of the message's tag:
 * the world's for tag 0, and for each other tag that some program uses a copy of the world
 * (ncclCommSplit, color 0, key = rank), so that messages of different tags between two ranks
 * never match each other: NCCL matches in issue order per communicator and peer, which is the
 * plan's order per (channel, tag). NCCL runs the operations of one communicator in the order
 * they are issued; the walker issues a rank's whole program in order, which is the cpu-serial
 * backend's order, so a plan that runs on cpu-serial does not deadlock here (the equivalence
 * suite runs cpu-serial).
 *
 * Collectives. A member knows only its own piece (rt_coll: boxes in the logical tensor), but
 * which NCCL call implements a collective depends on everyone's. So the first time a
 * collective instance runs (key: group, instance, seq; the same instruction in every step)
 * its members all-gather a small description (kind, dtype, boxes, contributes) over the group's
 * communicator, check that they agree (a mismatch is an error naming both sides, not a hang),
 * choose one of these paths, and cache the choice:
 *   ALLREDUCE      every member holds the same piece in and out: ncclAllReduce (a member that
 *                  does not contribute passes zeros);
 *   BROADCAST      the same, with exactly one contributor: ncclBroadcast from it;
 *   ALLGATHER      the inputs are the output's consecutive blocks in member order: ncclAllGather
 *                  straight into the output;
 *   REDUCESCATTER  the outputs are the input's consecutive blocks in member order:
 *                  ncclReduceScatter straight into the output;
 *   GATHER_UNPACK  inputs of one size, any layout (a D split along a non-leading dimension):
 *                  ncclAllGather into scratch, then each contributing member's piece is added
 *                  into place (ck_box_move);
 *   PACK_SCATTER   outputs of one size, any layout: each member's chunk is packed into place in
 *                  scratch (zeros where the input does not reach), then ncclReduceScatter;
 *   P2P            anything else (all_to_all, send_recv, uneven pieces): every member sends each
 *                  other member the intersection of its input with their output, as grouped
 *                  ncclSend/ncclRecv, and adds what it receives into place.
 *   A group of one member is a local box copy.
 * The exchange waits for the GPU once per collective instance in the first step only.
 *
 * Waiting for the GPU (cu_wait_event, which backend.c uses too) polls the event, NCCL's
 * asynchronous errors and the run's timeout, and aborts every communicator when one of the
 * last two ends the wait, so that a dead peer cannot hang a rank.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <stdlib.h>

enum { PATH_LOCAL, PATH_ZERO, PATH_ALLREDUCE, PATH_BROADCAST, PATH_ALLGATHER, PATH_REDUCESCATTER, PATH_GATHER_UNPACK,
       PATH_PACK_SCATTER, PATH_P2P };

static const char *const path_names[] = {"local", "zero", "all-reduce", "broadcast", "all-gather", "reduce-scatter",
                                         "all-gather+unpack", "pack+reduce-scatter", "send/recv"};

typedef struct cu_member {
    ck_box in, out;
    bool contributes;
} cu_member;

struct cu_layout {
    uint32_t group, instance;
    uint64_t seq;
    int path, root, n;
    int64_t count;                  // elements per member for the NCCL call
    cu_member *m;                   // every member's pieces (paths that need them), else NULL
};

const char *cu_nccl_str(ncclResult_t s) {
    static __thread char buf[512];
    const char *last = ncclGetLastError(NULL);
    snprintf(buf, sizeof buf, "%s%s%s%s", ncclGetErrorString(s), last && *last ? " (" : "", last && *last ? last : "",
             last && *last ? ")" : "");
    return buf;
}

static ncclDataType_t nccl_type(int dtype) {
    switch (dtype) {
    case CK_F16: return ncclFloat16;
    case CK_BF16: return ncclBfloat16;
    case CK_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}

/* ---- settling nonblocking calls, errors, abort ---- */

// Waits until comm has finished the calls issued on it so far (enqueued, not completed).
static int settle(cu_state *cu, ncclComm_t comm, const char *what, char *err, size_t err_n) {
    double deadline = cu_now() + cu->timeout_s;
    for (int spins = 0;; spins++) {
        ncclResult_t st = ncclInProgress;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &st));
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) {
            cu_say(err, err_n, "NCCL: %s during %s", cu_nccl_str(st), what);
            cu_nccl_abort(cu);
            return -1;
        }
        if (cu_now() > deadline) {
            cu_nccl_abort(cu);
            return cu_say(err, err_n, "%s: NCCL did not get ready within %g s (--timeout): a peer rank is dead, stuck or issues "
                          "its communication in another order", what, cu->timeout_s);
        }
        cu_pause(spins);
    }
}

int cu_nccl_poll(cu_state *cu, char *err, size_t err_n) {
    if (cu->aborted) return cu_say(err, err_n, "the communicators were aborted after an earlier failure");
    for (int t = 1; t < PLAN_MAX_TAGS; t++) {
        ncclResult_t st = ncclSuccess;
        if (!cu->tag_comm[t] || ncclCommGetAsyncError(cu->tag_comm[t], &st) != ncclSuccess) continue;
        if (st != ncclSuccess && st != ncclInProgress) return cu_say(err, err_n, "NCCL: %s on the communicator of message tag %d", cu_nccl_str(st), t);
    }
    for (int g = -1; g < (int)cu->p->n_groups; g++) {
        ncclComm_t c = g < 0 ? cu->world_comm : cu->group_comm ? cu->group_comm[g] : NULL;
        if (!c) continue;
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(c, &st) != ncclSuccess) continue;
        if (st != ncclSuccess && st != ncclInProgress) {
            if (g < 0) return cu_say(err, err_n, "NCCL: %s on the world communicator", cu_nccl_str(st));
            return cu_say(err, err_n, "NCCL: %s on the communicator of group %d", cu_nccl_str(st), g);
        }
    }
    return 0;
}

void cu_nccl_abort(cu_state *cu) {
    if (cu->aborted) return;
    cu->aborted = true;
    for (uint32_t g = 0; cu->group_comm && g < cu->p->n_groups; g++)
        if (cu->group_comm[g]) ncclCommAbort(cu->group_comm[g]), cu->group_comm[g] = NULL;
    for (int t = 1; t < PLAN_MAX_TAGS; t++)
        if (cu->tag_comm[t]) ncclCommAbort(cu->tag_comm[t]), cu->tag_comm[t] = NULL;
    cu->tag_comm[0] = NULL;
    if (cu->world_comm) ncclCommAbort(cu->world_comm), cu->world_comm = NULL;
}

int cu_inflight_add(cu_state *cu, cudaStream_t st, const char *what, char *err, size_t err_n) {
    if (cu->n_inflight == cu->cap_inflight) {
        size_t cap = cu->cap_inflight ? 2 * cu->cap_inflight : 64;
        cu_inflight *p = realloc(cu->inflight, cap * sizeof *p);
        if (!p) return cu_say(err, err_n, "out of memory");
        memset(p + cu->cap_inflight, 0, (cap - cu->cap_inflight) * sizeof *p);
        cu->inflight = p, cu->cap_inflight = cap;
    }
    cu_inflight *f = &cu->inflight[cu->n_inflight];
    if (!f->done) CUDA_CHECK(cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming));
    snprintf(f->what, sizeof f->what, "%s", what ? what : "a communication");
    CUDA_CHECK(cudaEventRecord(f->done, st));
    cu->n_inflight++;
    return 0;
}

/* ---- communicators ---- */

// The rank with this rank's coordinates, except those on the axes in `mask`, which are 0.
static int rank_with_zeros(const cu_state *cu, uint32_t mask) {
    const plan_meta *m = &cu->p->meta;
    int r = 0;
    for (uint32_t a = 0; a < m->n_axes; a++) r = r * (int)m->mesh[a] + (int)(mask >> a & 1 ? 0 : cu->coord[a]);
    return r;
}

// This rank's part in group g: member (color, key = its index) or not; and the group's size.
static void membership(const cu_state *cu, const plan_group *g, int *color, int *key, int *size) {
    const plan_meta *m = &cu->p->meta;
    *color = NCCL_SPLIT_NOCOLOR, *key = 0, *size = 0;
    if (!g->axes) {
        *size = (int)g->n_ranks;
        for (uint32_t j = 0; j < g->n_ranks; j++)
            if ((int)g->ranks[j] == cu->rank) *color = 0, *key = (int)j;
        return;
    }
    int n = 1, me = 0;
    for (uint32_t a = 0; a < m->n_axes; a++)
        if (g->axes >> a & 1) me = me * (int)m->mesh[a] + (int)cu->coord[a], n *= (int)m->mesh[a];
    *size = n, *key = me, *color = rank_with_zeros(cu, g->axes);
}

static void group_used(const plan *p, bool *used) {
    for (uint32_t k = 0; k < p->n_programs; k++)
        for (uint32_t i = 0; i < p->programs[k].n_insns; i++) {
            const plan_insn *in = &p->programs[k].insns[i];
            if (in->kind == PLAN_I_COLL && in->a >= 0 && (uint32_t)in->a < p->n_groups) used[in->a] = true;
        }
}

static int split_groups(cu_state *cu, const bool *used, char *err, size_t err_n) {
    for (uint32_t g = 0; g < cu->p->n_groups; g++) {
        int color, key, size;
        membership(cu, &cu->p->groups[g], &color, &key, &size);
        cu->group_size[g] = size;
        cu->group_me[g] = color == NCCL_SPLIT_NOCOLOR ? -1 : key;
        if (!used[g] || cu->world == 1) continue;
        ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
        conf.blocking = 0;
        ncclComm_t c = NULL;
        char what[96];
        snprintf(what, sizeof what, "ncclCommSplit for plan group %u", g);
        NCCL_CHECK(ncclCommSplit(cu->world_comm, color, key, &c, &conf));
        CU_TRY(settle(cu, cu->world_comm, what, err, err_n));
        if (!c) continue;
        cu->group_comm[g] = c;
        CU_TRY(settle(cu, c, what, err, err_n));
        int count = 0, r = -1;
        NCCL_CHECK(ncclCommCount(c, &count));
        NCCL_CHECK(ncclCommUserRank(c, &r));
        if (count != size || r != key)
            return cu_say(err, err_n, "plan group %u: NCCL made a communicator of %d ranks with this one at %d; the plan says %d and %d",
                          g, count, r, size, key);
    }
    return 0;
}

// Tag 0's communicator is the world's; every other tag that some program sends or receives on
// gets a copy of the world, split in tag order on every rank.
static int split_tags(cu_state *cu, char *err, size_t err_n) {
    bool used[PLAN_MAX_TAGS] = {false};
    for (uint32_t k = 0; k < cu->p->n_programs; k++)
        for (uint32_t i = 0; cu->p->programs[k].insns && i < cu->p->programs[k].n_insns; i++) {
            const plan_insn *in = &cu->p->programs[k].insns[i];
            if ((in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV) && in->tag < PLAN_MAX_TAGS) used[in->tag] = true;
        }
    cu->tag_comm[0] = cu->world_comm;
    for (int t = 1; t < PLAN_MAX_TAGS && cu->world > 1; t++) {
        if (!used[t]) continue;
        ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
        conf.blocking = 0;
        char what[96];
        snprintf(what, sizeof what, "ncclCommSplit for message tag %d", t);
        NCCL_CHECK(ncclCommSplit(cu->world_comm, 0, cu->rank, &cu->tag_comm[t], &conf));
        CU_TRY(settle(cu, cu->world_comm, what, err, err_n));
        if (cu->tag_comm[t]) CU_TRY(settle(cu, cu->tag_comm[t], what, err, err_n));
    }
    return 0;
}

int cu_nccl_init(cu_state *cu, const rt_cuda_config *cfg, char *err, size_t err_n) {
    uint32_t ng = cu->p->n_groups ? cu->p->n_groups : 1;
    cu->group_comm = calloc(ng, sizeof *cu->group_comm);
    cu->group_size = calloc(ng, sizeof *cu->group_size);
    cu->group_me = calloc(ng, sizeof *cu->group_me);
    bool *used = calloc(ng, sizeof *used);
    if (!cu->group_comm || !cu->group_size || !cu->group_me || !used) {
        free(used);
        return cu_say(err, err_n, "out of memory");
    }
    group_used(cu->p, used);
    int rc = 0;
    if (cu->world > 1) {
        ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
        conf.blocking = 0;
        ncclUniqueId id;
        memcpy(&id, cfg->nccl_id, sizeof id);
        ncclResult_t st = ncclCommInitRankConfig(&cu->world_comm, cu->world, id, cu->rank, &conf);
        if (!cu_nccl_ok(st))
            rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(st), "ncclCommInitRankConfig()", __func__, __FILE__, __LINE__);
        else
            rc = settle(cu, cu->world_comm, "creating the world communicator", err, err_n);
    }
    if (!rc) rc = split_groups(cu, used, err, err_n);
    if (!rc) rc = split_tags(cu, err, err_n);
    free(used);
    return rc;
}

// Finalizes c (nonblocking: then waits for it); false when that fails (everything is aborted).
static bool finalize(cu_state *cu, ncclComm_t c) {
    char err[256];
    if (!cu_nccl_ok(ncclCommFinalize(c))) return false;
    return settle(cu, c, "ncclCommFinalize", err, sizeof err) == 0;
}

void cu_nccl_free(cu_state *cu) {
    bool ok = !cu->aborted;
    for (uint32_t g = 0; ok && cu->group_comm && g < cu->p->n_groups; g++)
        if (cu->group_comm[g]) ok = finalize(cu, cu->group_comm[g]);
    for (int t = 1; ok && t < PLAN_MAX_TAGS; t++)
        if (cu->tag_comm[t]) ok = finalize(cu, cu->tag_comm[t]);
    if (ok && cu->world_comm) ok = finalize(cu, cu->world_comm);
    if (!ok) {
        cu_nccl_abort(cu);
    } else {
        for (uint32_t g = 0; cu->group_comm && g < cu->p->n_groups; g++)
            if (cu->group_comm[g]) ncclCommDestroy(cu->group_comm[g]), cu->group_comm[g] = NULL;
        for (int t = 1; t < PLAN_MAX_TAGS; t++)
            if (cu->tag_comm[t]) ncclCommDestroy(cu->tag_comm[t]), cu->tag_comm[t] = NULL;
        cu->tag_comm[0] = NULL;
        if (cu->world_comm) ncclCommDestroy(cu->world_comm), cu->world_comm = NULL;
    }
    for (size_t i = 0; i < cu->cap_layouts; i++)
        if (cu->layouts[i]) free(cu->layouts[i]->m), free(cu->layouts[i]);
    free(cu->layouts);
    for (size_t i = 0; i < cu->cap_inflight; i++)
        if (cu->inflight[i].done) cudaEventDestroy(cu->inflight[i].done);
    free(cu->inflight);
    free(cu->group_comm), free(cu->group_size), free(cu->group_me);
}

int rt_cuda_nccl_id(uint8_t id[RT_CUDA_ID_BYTES], char *err, size_t err_n) {
    ncclUniqueId u;
    _Static_assert(sizeof u == RT_CUDA_ID_BYTES, "ncclUniqueId is 128 bytes");
    NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return 0;
}

/* ---- send and receive ---- */

int cu_nccl_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (n <= 0) return 0;
    if (!cu->world_comm) return cu_say(err, err_n, cu->aborted ? "the communicators were aborted after an earlier failure"
                                                               : "send/recv in a world of one rank");
    for (int i = 0; i < n; i++) {
        if (items[i].peer < 0 || items[i].peer >= cu->world || items[i].peer == cu->rank)
            return cu_say(err, err_n, "%s: peer rank %d", items[i].what ? items[i].what : "send/recv", items[i].peer);
        if (items[i].tag >= PLAN_MAX_TAGS || !cu->tag_comm[items[i].tag])
            return cu_say(err, err_n, "%s: tag %u has no communicator", items[i].what ? items[i].what : "send/recv", items[i].tag);
    }
    NCCL_CHECK(ncclGroupStart());
    ncclResult_t bad = ncclSuccess;
    for (int i = 0; i < n && cu_nccl_ok(bad); i++) {
        rt_p2p *it = &items[i];
        ncclComm_t comm = cu->tag_comm[it->tag];
        bad = it->send ? ncclSend(it->data, (size_t)it->bytes, ncclUint8, it->peer, comm, st)
                       : ncclRecv(it->data, (size_t)it->bytes, ncclUint8, it->peer, comm, st);
    }
    ncclResult_t end = ncclGroupEnd();
    NCCL_CHECK(bad);
    NCCL_CHECK(end);
    char what[200];
    snprintf(what, sizeof what, "%s%s", items[0].what ? items[0].what : "send/recv", n > 1 ? " (and the rest of its group)" : "");
    bool settled[PLAN_MAX_TAGS] = {false};
    for (int i = 0; i < n; i++)
        if (!settled[items[i].tag]) {
            settled[items[i].tag] = true;
            CU_TRY(settle(cu, cu->tag_comm[items[i].tag], what, err, err_n));
        }
    CU_TRY(cu_inflight_add(cu, st, what, err, err_n));
    return 0;
}

/* ---- collectives: the layout exchange ---- */

// One member's description as it travels (int64 fields only: no padding, the same bytes on
// every host).
#define WIRE_MAGIC 0x4c41594f55543031ll // "LAYOUT01"
typedef struct wire {
    int64_t magic, kind, dtype, n, me, contributes, in_rank, out_rank;
    int64_t box[6][CK_MAX_RANK];    // in start, shape, full; out start, shape, full
} wire;

static wire to_wire(const rt_coll *c) {
    wire w;
    memset(&w, 0, sizeof w);
    w.magic = WIRE_MAGIC, w.kind = c->kind, w.dtype = c->dtype, w.n = c->n_members, w.me = c->me;
    w.contributes = c->mine.contributes, w.in_rank = c->mine.in_box.rank, w.out_rank = c->mine.out_box.rank;
    for (int d = 0; d < CK_MAX_RANK && d < PLAN_MAX_RANK; d++) {
        w.box[0][d] = c->mine.in_box.start[d], w.box[1][d] = c->mine.in_box.shape[d], w.box[2][d] = c->mine.in_box.full[d];
        w.box[3][d] = c->mine.out_box.start[d], w.box[4][d] = c->mine.out_box.shape[d], w.box[5][d] = c->mine.out_box.full[d];
    }
    return w;
}

static void from_wire(const wire *w, cu_member *m) {
    memset(m, 0, sizeof *m);
    m->contributes = w->contributes != 0;
    m->in.rank = (int)w->in_rank, m->out.rank = (int)w->out_rank;
    for (int d = 0; d < CK_MAX_RANK; d++) {
        m->in.start[d] = w->box[0][d], m->in.shape[d] = w->box[1][d], m->in.full[d] = w->box[2][d];
        m->out.start[d] = w->box[3][d], m->out.shape[d] = w->box[4][d], m->out.full[d] = w->box[5][d];
    }
}

// A collective's code as a message names it: its row's name in runtime/colls.def, or its number.
static void coll_text(int64_t kind, char *buf, size_t n) {
    if (kind >= 0 && kind < PLAN_COLL_COUNT) snprintf(buf, n, "%s", plan_coll_name((uint32_t)kind));
    else snprintf(buf, n, "collective %lld", (long long)kind);
}

static int check_wires(const rt_coll *c, const wire *w, char *err, size_t err_n) {
    for (int s = 0; s < c->n_members; s++) {
        const wire *o = &w[s];
        if (o->magic != WIRE_MAGIC || o->n != c->n_members || o->me != s)
            return cu_say(err, err_n, "collective mismatch: member %d of %s answered out of turn (another instruction?)", s, c->what);
        if (o->kind != (int64_t)c->kind || o->dtype != c->dtype) {
            char mine[32], theirs[32];
            coll_text(c->kind, mine, sizeof mine);
            coll_text(o->kind, theirs, sizeof theirs);
            return cu_say(err, err_n, "collective mismatch: %s is %s on %s, member %d issues %s on %s at this point", c->what,
                          mine, plan_dtype_name(c->dtype), s, theirs, plan_dtype_name((uint32_t)o->dtype));
        }
        if (o->in_rank < 0 || o->in_rank > CK_MAX_RANK || o->out_rank < 0 || o->out_rank > CK_MAX_RANK)
            return cu_say(err, err_n, "collective mismatch: member %d of %s sent a bad description", s, c->what);
    }
    return 0;
}

// All members' descriptions of collective c (the first time it runs): an all-gather on the
// group's communicator, and a wait for it.
static int exchange(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, wire *all, char *err, size_t err_n) {
    wire mine = to_wire(c);
    void *dev = NULL;
    size_t bytes = sizeof(wire) * (size_t)(c->n_members + 1);
    CU_TRY(cu_scratch(st, bytes, &dev, err, err_n));
    wire *dmine = (wire *)dev, *dall = dmine + 1;
    int rc = 0;
    cudaEvent_t ev = NULL;
    _Static_assert(sizeof(wire) <= CK_PUT_MAX, "a wire fits ck_put_bytes");
    if (ck_put_bytes(st, dmine, &mine, (int)sizeof mine) != cudaSuccess)
        rc = cu_fail(err, err_n, "CUDA", cudaGetErrorString(cudaGetLastError()), "ck_put_bytes()", __func__, __FILE__, __LINE__);
    if (!rc) {
        ncclResult_t s = ncclAllGather(dmine, dall, sizeof(wire), ncclUint8, comm, st);
        if (!cu_nccl_ok(s)) rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(s), "ncclAllGather(layout)", __func__, __FILE__, __LINE__);
    }
    if (!rc) rc = settle(cu, comm, c->what, err, err_n);
    if (!rc && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) rc = cu_say(err, err_n, "cannot create an event");
    if (!rc && cudaEventRecord(ev, st) != cudaSuccess) rc = cu_say(err, err_n, "cannot record an event");
    if (!rc) rc = cu_wait_event(cu, ev, c->what, err, err_n);
    if (!rc && cudaMemcpy(all, dall, sizeof(wire) * (size_t)c->n_members, cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = cu_say(err, err_n, "cannot read the collective's layout back");
    if (ev) cudaEventDestroy(ev);
    cu_scratch_free(st, dev);
    if (rc) return cu_trace(err, err_n, __func__, __FILE__, __LINE__);
    return check_wires(c, all, err, err_n);
}

/* ---- collectives: choosing the path ---- */

static int64_t box_numel(const ck_box *b) {
    int64_t n = 1;
    for (int d = 0; d < b->rank; d++) n *= b->shape[d];
    return n;
}

static bool same_box(const ck_box *a, const ck_box *b) {
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->start[d] != b->start[d] || a->shape[d] != b->shape[d]) return false;
    return true;
}

// Where piece `in` starts inside `whole` (row-major, in elements) when it is one contiguous
// block of it, else -1.
static int64_t block_offset(const ck_box *in, const ck_box *whole) {
    if (in->rank != whole->rank) return -1;
    int r = in->rank, d0 = 0;
    for (int d = 0; d < r; d++)
        if (in->start[d] < whole->start[d] || in->start[d] + in->shape[d] > whole->start[d] + whole->shape[d]) return -1;
    while (d0 < r && in->shape[d0] == 1) d0++;                // leading dimensions of size 1
    for (int d = d0 + 1; d < r; d++)
        if (in->shape[d] != whole->shape[d]) return -1;       // then whole rows of everything after
    int64_t off = 0;
    for (int d = 0; d < r; d++) off = off * whole->shape[d] + (in->start[d] - whole->start[d]);
    return off;
}

static int choose(cu_layout *L, const cu_member *m, int n) {
    int contributors = 0, root = -1;
    for (int s = 0; s < n; s++)
        if (m[s].contributes) contributors++, root = root < 0 ? s : root;
    bool same = true, all_in = contributors == n, in_size = true, out_size = true, in_same = true, out_same = true;
    for (int s = 0; s < n; s++) {
        same &= same_box(&m[s].in, &m[0].in) && same_box(&m[s].out, &m[0].in);
        in_size &= box_numel(&m[s].in) == box_numel(&m[0].in);
        out_size &= box_numel(&m[s].out) == box_numel(&m[0].out);
        in_same &= same_box(&m[s].in, &m[0].in);
        out_same &= same_box(&m[s].out, &m[0].out);
    }
    L->root = root;
    if (contributors == 0) return L->path = PATH_ZERO;
    if (same) return L->count = box_numel(&m[0].in), L->path = contributors == 1 ? PATH_BROADCAST : PATH_ALLREDUCE;
    bool ag = all_in && in_size && out_same, rs = all_in && out_size && in_same;
    for (int s = 0; s < n && ag; s++) ag = block_offset(&m[s].in, &m[0].out) == s * box_numel(&m[0].in);
    for (int s = 0; s < n && rs; s++) rs = block_offset(&m[s].out, &m[0].in) == s * box_numel(&m[0].out);
    if (ag) return L->count = box_numel(&m[0].in), L->path = PATH_ALLGATHER;
    if (rs) return L->count = box_numel(&m[0].out), L->path = PATH_REDUCESCATTER;
    if (in_size) return L->count = box_numel(&m[0].in), L->path = PATH_GATHER_UNPACK;
    if (out_size) return L->count = box_numel(&m[0].out), L->path = PATH_PACK_SCATTER;
    return L->path = PATH_P2P;
}

static size_t hash_key(uint32_t group, uint32_t inst, uint64_t seq) {
    uint64_t h = ((uint64_t)group << 32 | inst) * 0x9e3779b97f4a7c15ull ^ seq * 0xbf58476d1ce4e5b9ull;
    return (size_t)(h ^ (h >> 29));
}

static cu_layout *find_layout(cu_state *cu, uint32_t group, uint32_t inst, uint64_t seq) {
    if (!cu->cap_layouts) return NULL;
    for (size_t i = hash_key(group, inst, seq) & (cu->cap_layouts - 1);; i = (i + 1) & (cu->cap_layouts - 1)) {
        cu_layout *L = cu->layouts[i];
        if (!L) return NULL;
        if (L->group == group && L->instance == inst && L->seq == seq) return L;
    }
}

static int add_layout(cu_state *cu, cu_layout *L, char *err, size_t err_n) {
    if (2 * (cu->n_layouts + 1) > cu->cap_layouts) {
        size_t cap = cu->cap_layouts ? 2 * cu->cap_layouts : 256;
        cu_layout **t = calloc(cap, sizeof *t);
        if (!t) return cu_say(err, err_n, "out of memory");
        for (size_t i = 0; i < cu->cap_layouts; i++) {
            cu_layout *o = cu->layouts[i];
            if (!o) continue;
            size_t j = hash_key(o->group, o->instance, o->seq) & (cap - 1);
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = o;
        }
        free(cu->layouts);
        cu->layouts = t, cu->cap_layouts = cap;
    }
    size_t j = hash_key(L->group, L->instance, L->seq) & (cu->cap_layouts - 1);
    while (cu->layouts[j]) j = (j + 1) & (cu->cap_layouts - 1);
    cu->layouts[j] = L;
    cu->n_layouts++;
    return 0;
}

// The cached layout of c, exchanging and choosing it the first time.
static int layout_of(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, cu_layout **out, char *err, size_t err_n) {
    if ((*out = find_layout(cu, c->group, c->instance, c->seq))) return 0;
    int n = c->n_members;
    wire *w = calloc((size_t)n, sizeof *w);
    cu_member *m = calloc((size_t)n, sizeof *m);
    cu_layout *L = calloc(1, sizeof *L);
    if (!w || !m || !L) {
        free(w), free(m), free(L);
        return cu_say(err, err_n, "out of memory");
    }
    int rc = exchange(cu, st, comm, c, w, err, err_n);
    for (int s = 0; !rc && s < n; s++) from_wire(&w[s], &m[s]);
    free(w);
    if (rc) {
        free(m), free(L);
        return -1;
    }
    *L = (cu_layout){.group = c->group, .instance = c->instance, .seq = c->seq, .n = n};
    choose(L, m, n);
    bool keep = L->path == PATH_GATHER_UNPACK || L->path == PATH_PACK_SCATTER || L->path == PATH_P2P;
    L->m = keep ? m : NULL;
    if (!keep) free(m);
    if (add_layout(cu, L, err, err_n)) {
        free(L->m), free(L);
        return -1;
    }
    if (getenv("PLANRUN_CUDA_DEBUG"))
        fprintf(stderr, "planrun: cuda: rank %d: %s runs as %s\n", cu->rank, c->what, path_names[L->path]);
    *out = L;
    return 0;
}

/* ---- collectives: running them ---- */

static int box_kernel(cudaStream_t st, void *dst, const ck_box *db, const void *src, const ck_box *sb, int dt, int mode, char *err,
                      size_t err_n) {
    CUDA_CHECK(ck_box_move(st, dst, db, src, sb, dt, mode));
    return 0;
}

// The intersection of two boxes (shape 0 somewhere when they do not meet).
static ck_box intersect(const ck_box *a, const ck_box *b) {
    ck_box r = *a;
    for (int d = 0; d < a->rank; d++) {
        int64_t lo = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
        int64_t ea = a->start[d] + a->shape[d], eb = b->start[d] + b->shape[d], hi = ea < eb ? ea : eb;
        r.start[d] = lo, r.shape[d] = hi > lo ? hi - lo : 0;
    }
    return r;
}

// P2P's staging for one collective: the piece of my input each member gets and of theirs I get
// (their intersections with the outputs), and where they sit in one scratch buffer (my sends
// first, then what I receive).
typedef struct p2p_stage {
    ck_box *send, *recv;
    int64_t *soff, *roff;
    void *tmp;
} p2p_stage;

static void p2p_free(cudaStream_t st, p2p_stage *s) {
    cu_scratch_free(st, s->tmp);
    free(s->send), free(s->recv), free(s->soff), free(s->roff);
    *s = (p2p_stage){0};
}

// Before the NCCL calls: the pieces, the scratch, and my sends packed into it.
static int p2p_pack(cudaStream_t st, const rt_coll *c, const cu_layout *L, p2p_stage *s, char *err, size_t err_n) {
    int n = L->n, me = c->me, dt = c->dtype;
    size_t es = cu_dtype_bytes(dt);
    const cu_member *m = L->m;
    s->send = calloc((size_t)n, sizeof *s->send), s->recv = calloc((size_t)n, sizeof *s->recv);
    s->soff = calloc((size_t)n + 1, sizeof *s->soff), s->roff = calloc((size_t)n + 1, sizeof *s->roff);
    if (!s->send || !s->recv || !s->soff || !s->roff) return cu_say(err, err_n, "out of memory");
    int64_t total = 0;
    for (int r = 0; r < n; r++) { // piece r of the send side is what member r gets from me (r == me: my own part)
        s->send[r] = intersect(&m[me].in, &m[r].out);
        s->recv[r] = intersect(&m[r].in, &m[me].out);
        s->soff[r] = total, total += m[me].contributes ? box_numel(&s->send[r]) : 0;
    }
    for (int r = 0; r < n; r++) s->roff[r] = total, total += r != me && m[r].contributes ? box_numel(&s->recv[r]) : 0;
    int rc = cu_scratch(st, (size_t)total * es, &s->tmp, err, err_n);
    char *t = s->tmp;
    for (int r = 0; !rc && r < n; r++)
        if (m[me].contributes && box_numel(&s->send[r]))
            rc = box_kernel(st, t + s->soff[r] * es, &s->send[r], c->mine.in, &m[me].in, dt, CK_BOX_SET, err, err_n);
    return rc;
}

// The sends and receives, inside the caller's ncclGroupStart/End.
static ncclResult_t p2p_issue(ncclComm_t comm, cudaStream_t st, const rt_coll *c, const cu_layout *L, const p2p_stage *s) {
    int n = L->n, me = c->me, dt = c->dtype;
    size_t es = cu_dtype_bytes(dt);
    const cu_member *m = L->m;
    char *t = s->tmp;
    ncclResult_t bad = ncclSuccess;
    for (int r = 0; r < n && cu_nccl_ok(bad); r++) {
        if (r == me) continue;
        if (m[me].contributes && box_numel(&s->send[r]))
            bad = ncclSend(t + s->soff[r] * es, (size_t)box_numel(&s->send[r]), nccl_type(dt), r, comm, st);
        if (cu_nccl_ok(bad) && m[r].contributes && box_numel(&s->recv[r]))
            bad = ncclRecv(t + s->roff[r] * es, (size_t)box_numel(&s->recv[r]), nccl_type(dt), r, comm, st);
    }
    return bad;
}

// After them: my own part and what arrived added into place.
static int p2p_unpack(cudaStream_t st, const rt_coll *c, const cu_layout *L, const p2p_stage *s, char *err, size_t err_n) {
    int n = L->n, me = c->me, dt = c->dtype;
    size_t es = cu_dtype_bytes(dt);
    const cu_member *m = L->m;
    int rc = 0;
    if (cudaMemsetAsync(c->mine.out, 0, (size_t)box_numel(&m[me].out) * es, st) != cudaSuccess)
        rc = cu_say(err, err_n, "cudaMemsetAsync failed");
    for (int r = 0; !rc && r < n; r++) {
        bool self = r == me;
        if (!m[r].contributes) continue;
        const ck_box *piece = self ? &s->send[me] : &s->recv[r];
        if (box_numel(piece))
            rc = box_kernel(st, c->mine.out, &m[me].out, (char *)s->tmp + (self ? s->soff[me] : s->roff[r]) * es, piece, dt,
                            CK_BOX_ADD, err, err_n);
    }
    return rc;
}

// Generic: grouped send/recv of the intersections, then everything added into place.
static int run_p2p(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, const cu_layout *L, char *err, size_t err_n) {
    p2p_stage s = {0};
    int rc = p2p_pack(st, c, L, &s, err, err_n);
    if (!rc) {
        ncclResult_t bad = ncclGroupStart();
        if (cu_nccl_ok(bad)) bad = p2p_issue(comm, st, c, L, &s);
        ncclResult_t end = ncclGroupEnd();
        if (!cu_nccl_ok(bad) || !cu_nccl_ok(end))
            rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(cu_nccl_ok(bad) ? end : bad), "ncclSend/ncclRecv()", __func__, __FILE__, __LINE__);
    }
    if (!rc) rc = settle(cu, comm, c->what, err, err_n);
    if (!rc) rc = p2p_unpack(st, c, L, &s, err, err_n);
    p2p_free(st, &s);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}

static int run_gather_unpack(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, const cu_layout *L, char *err,
                             size_t err_n) {
    int dt = c->dtype, n = L->n;
    size_t es = cu_dtype_bytes(dt);
    void *tmp = NULL;
    CU_TRY(cu_scratch(st, (size_t)L->count * (size_t)n * es, &tmp, err, err_n));
    int rc = 0;
    ncclResult_t s = ncclAllGather(c->mine.in, tmp, (size_t)L->count, nccl_type(dt), comm, st);
    if (!cu_nccl_ok(s)) rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(s), "ncclAllGather()", __func__, __FILE__, __LINE__);
    if (!rc) rc = settle(cu, comm, c->what, err, err_n);
    if (!rc && cudaMemsetAsync(c->mine.out, 0, (size_t)box_numel(&L->m[c->me].out) * es, st) != cudaSuccess)
        rc = cu_say(err, err_n, "cudaMemsetAsync failed");
    for (int r = 0; !rc && r < n; r++)
        if (L->m[r].contributes)
            rc = box_kernel(st, c->mine.out, &L->m[c->me].out, (char *)tmp + (size_t)r * (size_t)L->count * es, &L->m[r].in, dt,
                            CK_BOX_ADD, err, err_n);
    cu_scratch_free(st, tmp);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}

static int run_pack_scatter(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, const cu_layout *L, char *err,
                            size_t err_n) {
    int dt = c->dtype, n = L->n, me = c->me;
    size_t es = cu_dtype_bytes(dt), chunk = (size_t)L->count * es;
    void *tmp = NULL;
    CU_TRY(cu_scratch(st, chunk * (size_t)n, &tmp, err, err_n));
    int rc = 0;
    if (!L->m[me].contributes && cudaMemsetAsync(tmp, 0, chunk * (size_t)n, st) != cudaSuccess) rc = cu_say(err, err_n, "cudaMemsetAsync failed");
    for (int r = 0; !rc && r < n && L->m[me].contributes; r++)
        rc = box_kernel(st, (char *)tmp + (size_t)r * chunk, &L->m[r].out, c->mine.in, &L->m[me].in, dt, CK_BOX_SET, err, err_n);
    if (!rc) {
        ncclResult_t s = ncclReduceScatter(tmp, c->mine.out, (size_t)L->count, nccl_type(dt), ncclSum, comm, st);
        if (!cu_nccl_ok(s)) rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(s), "ncclReduceScatter()", __func__, __FILE__, __LINE__);
    }
    if (!rc) rc = settle(cu, comm, c->what, err, err_n);
    cu_scratch_free(st, tmp);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}

// Before a direct path's NCCL call: its input (a member that does not contribute to an
// all-reduce passes zeros); an all-gather or reduce-scatter in place is refused.
static int direct_input(cudaStream_t st, const rt_coll *c, const cu_layout *L, const void **in, char *err, size_t err_n) {
    *in = c->mine.in;
    if (L->path == PATH_ALLREDUCE && !c->mine.contributes) {
        CUDA_CHECK(cudaMemsetAsync(c->mine.out, 0, (size_t)L->count * cu_dtype_bytes(c->dtype), st));
        *in = c->mine.out;
    }
    if ((L->path == PATH_ALLGATHER || L->path == PATH_REDUCESCATTER) && *in == c->mine.out)
        return cu_say(err, err_n, "%s: %s in place is not supported", c->what, L->path == PATH_ALLGATHER ? "an all-gather" : "a reduce-scatter");
    return 0;
}

// A direct path's one NCCL call on the buffers themselves.
static ncclResult_t direct_issue(ncclComm_t comm, cudaStream_t st, const rt_coll *c, const cu_layout *L, const void *in) {
    ncclDataType_t t = nccl_type(c->dtype);
    switch (L->path) {
    case PATH_ALLREDUCE: return ncclAllReduce(in, c->mine.out, (size_t)L->count, t, ncclSum, comm, st);
    case PATH_BROADCAST: return ncclBroadcast(in, c->mine.out, (size_t)L->count, t, L->root, comm, st);
    case PATH_ALLGATHER: return ncclAllGather(in, c->mine.out, (size_t)L->count, t, comm, st);
    case PATH_REDUCESCATTER: return ncclReduceScatter(in, c->mine.out, (size_t)L->count, t, ncclSum, comm, st);
    default: return ncclInvalidUsage;
    }
}

static bool direct_path(int path) {
    return path == PATH_ALLREDUCE || path == PATH_BROADCAST || path == PATH_ALLGATHER || path == PATH_REDUCESCATTER;
}

// The direct paths: one NCCL call on the buffers themselves.
static int run_direct(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *c, const cu_layout *L, char *err, size_t err_n) {
    if (!direct_path(L->path)) return cu_say(err, err_n, "internal: path %d is not direct", L->path);
    const void *in;
    CU_TRY(direct_input(st, c, L, &in, err, err_n));
    NCCL_CHECK(direct_issue(comm, st, c, L, in));
    CU_TRY(settle(cu, comm, c->what, err, err_n));
    return 0;
}

// A group of one member, or nobody contributing: no communication.
static int run_local(cudaStream_t st, const rt_coll *c, bool zero, char *err, size_t err_n) {
    ck_box ob = cu_box(&c->mine.out_box), ib = cu_box(&c->mine.in_box);
    size_t es = cu_dtype_bytes(c->dtype);
    if (zero || !c->mine.contributes) {
        CUDA_CHECK(cudaMemsetAsync(c->mine.out, 0, (size_t)box_numel(&ob) * es, st));
        return 0;
    }
    if (c->mine.in == c->mine.out && same_box(&ib, &ob)) return 0;
    CUDA_CHECK(ck_box_move(st, c->mine.out, &ob, c->mine.in, &ib, c->dtype, CK_BOX_SET));
    return 0;
}

// The communicator of c's group, after checking that the interpreter and it agree.
static int coll_comm(cu_state *cu, const rt_coll *c, ncclComm_t *comm, char *err, size_t err_n) {
    if (!cu_dtype_bytes(c->dtype)) return cu_say(err, err_n, "%s: dtype %u", c->what, c->dtype);
    if (c->group >= cu->p->n_groups) return cu_say(err, err_n, "%s: group %u of %u", c->what, c->group, cu->p->n_groups);
    *comm = cu->group_comm[c->group];
    if (c->n_members == 1) return 0;
    if (!*comm)
        return cu_say(err, err_n, "%s: %s", c->what, cu->aborted ? "the communicators were aborted after an earlier failure"
                                                                   : "this rank has no communicator for the group");
    if (cu->group_size[c->group] != c->n_members || cu->group_me[c->group] != c->me)
        return cu_say(err, err_n, "%s: the interpreter counts %d members with this rank at %d, the communicator %d and %d", c->what,
                      c->n_members, c->me, cu->group_size[c->group], cu->group_me[c->group]);
    return 0;
}

int cu_nccl_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    ncclComm_t comm;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    CU_TRY(coll_comm(cu, c, &comm, err, err_n));
    if (c->n_members == 1) return run_local(st, c, false, err, err_n);
    cu_layout *L;
    CU_TRY(layout_of(cu, st, comm, c, &L, err, err_n));
    switch (L->path) {
    case PATH_ZERO: CU_TRY(run_local(st, c, true, err, err_n)); return 0;
    case PATH_GATHER_UNPACK: CU_TRY(run_gather_unpack(cu, st, comm, c, L, err, err_n)); break;
    case PATH_PACK_SCATTER: CU_TRY(run_pack_scatter(cu, st, comm, c, L, err, err_n)); break;
    case PATH_P2P: CU_TRY(run_p2p(cu, st, comm, c, L, err, err_n)); break;
    default: CU_TRY(run_direct(cu, st, comm, c, L, err, err_n)); break;
    }
    CU_TRY(cu_inflight_add(cu, st, c->what, err, err_n));
    return 0;
}

// A bucket (the n pairs of one collective instruction, on one group): where every pair runs as
// one NCCL call or as grouped sends and receives, all of them in one ncclGroupStart/End, which
// NCCL aggregates into one launch, so that the bucket pays the group's latency once, as the cost
// model times it; each pair's packing before, its unpacking after. Otherwise pair by pair.
static int run_bucket(cu_state *cu, cudaStream_t st, ncclComm_t comm, const rt_coll *cs, cu_layout **L, p2p_stage *S, const void **in,
                      int n, char *err, size_t err_n) {
    int rc = 0;
    for (int k = 0; k < n && !rc; k++)
        rc = L[k]->path == PATH_P2P ? p2p_pack(st, &cs[k], L[k], &S[k], err, err_n) : direct_input(st, &cs[k], L[k], &in[k], err, err_n);
    if (!rc) {
        ncclResult_t bad = ncclGroupStart();
        for (int k = 0; k < n && cu_nccl_ok(bad); k++)
            bad = L[k]->path == PATH_P2P ? p2p_issue(comm, st, &cs[k], L[k], &S[k]) : direct_issue(comm, st, &cs[k], L[k], in[k]);
        ncclResult_t end = ncclGroupEnd();
        if (!cu_nccl_ok(bad) || !cu_nccl_ok(end))
            rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(cu_nccl_ok(bad) ? end : bad), "a bucket's calls", __func__, __FILE__, __LINE__);
    }
    if (!rc) rc = settle(cu, comm, cs[0].what, err, err_n);
    for (int k = 0; k < n && !rc; k++)
        if (L[k]->path == PATH_P2P) rc = p2p_unpack(st, &cs[k], L[k], &S[k], err, err_n);
    for (int k = 0; k < n; k++)
        if (L[k]->path == PATH_P2P) p2p_free(st, &S[k]);
    if (!rc) rc = cu_inflight_add(cu, st, cs[0].what, err, err_n);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}

int cu_nccl_coll_bucket(rt_backend *b, const rt_exec *x, const rt_coll *cs, int n, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    ncclComm_t comm = NULL;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    cu_layout **L = calloc((size_t)n, sizeof *L);
    p2p_stage *S = calloc((size_t)n, sizeof *S);
    const void **in = calloc((size_t)n, sizeof *in);
    int rc = !L || !S || !in ? cu_say(err, err_n, "out of memory") : 0;
    bool grouped = true;
    for (int k = 0; k < n && !rc && grouped; k++) {
        grouped = cs[k].n_members > 1 && cs[k].group == cs[0].group;
        if (grouped) rc = coll_comm(cu, &cs[k], &comm, err, err_n);
        if (grouped && !rc) rc = layout_of(cu, st, comm, &cs[k], &L[k], err, err_n); // the first step's exchange, outside the group
        grouped = grouped && !rc && (L[k]->path == PATH_P2P || direct_path(L[k]->path));
    }
    if (!rc && grouped) rc = run_bucket(cu, st, comm, cs, L, S, in, n, err, err_n);
    for (int k = 0; k < n && !rc && !grouped; k++) rc = cu_nccl_coll(b, x, &cs[k], err, err_n);
    free(L), free(S), free(in);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}

/* ---- waiting for the GPU ---- */

int cu_wait_event(cu_state *cu, cudaEvent_t ev, const char *what, char *err, size_t err_n) {
    double deadline = cu_now() + cu->timeout_s;
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) {
            cu_nccl_abort(cu);
            return cu_say(err, err_n, "CUDA: %s while waiting for %s", cudaGetErrorString(e), what);
        }
        if (cu_nccl_poll(cu, err, err_n)) {
            cu_nccl_abort(cu);
            return cu_trace(err, err_n, __func__, __FILE__, __LINE__);
        }
        if (cu_now() > deadline) {
            cu_nccl_abort(cu);
            return cu_say(err, err_n, "%s did not finish within %g s (--timeout): a peer rank is dead, stuck or waiting for "
                          "something else", what, cu->timeout_s);
        }
        cu_pause(spins);
    }
}

/* ---- the loss across processes ---- */

int cu_nccl_host_sum(rt_backend *b, double *v, int n, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    if (cu->world == 1 || n <= 0) return 0;
    if (!cu->world_comm) return cu_say(err, err_n, "the communicators were aborted after an earlier failure");
    if ((size_t)n * sizeof *v > CK_PUT_MAX) return cu_say(err, err_n, "host_sum of %d values; at most %d", n, CK_PUT_MAX / 8);
    CUDA_CHECK(cudaSetDevice(cu->device));
    void *dev = NULL;
    cudaEvent_t ev = NULL;
    CU_TRY(cu_scratch(cu->side, (size_t)n * sizeof *v, &dev, err, err_n));
    int rc = 0;
    // Never beside a background round's collectives (another communicator; cuda/backend.c).
    if (cu->round_pending && cudaStreamWaitEvent(cu->side, cu->round_done, 0) != cudaSuccess)
        rc = cu_say(err, err_n, "cannot order the loss's all-reduce after the background round");
    if (!rc && ck_put_bytes(cu->side, dev, v, n * (int)sizeof *v) != cudaSuccess) rc = cu_say(err, err_n, "cannot stage the loss");
    if (!rc) {
        ncclResult_t s = ncclAllReduce(dev, dev, (size_t)n, ncclFloat64, ncclSum, cu->world_comm, cu->side);
        if (!cu_nccl_ok(s)) rc = cu_fail(err, err_n, "NCCL", cu_nccl_str(s), "ncclAllReduce(loss)", __func__, __FILE__, __LINE__);
    }
    if (!rc) rc = settle(cu, cu->world_comm, "the loss's all-reduce", err, err_n);
    if (!rc && (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess || cudaEventRecord(ev, cu->side) != cudaSuccess))
        rc = cu_say(err, err_n, "cannot record an event");
    if (!rc) rc = cu_wait_event(cu, ev, "the loss's all-reduce across the ranks", err, err_n);
    if (!rc && cudaMemcpy(v, dev, (size_t)n * sizeof *v, cudaMemcpyDeviceToHost) != cudaSuccess) rc = cu_say(err, err_n, "cannot read the loss back");
    if (ev) cudaEventDestroy(ev);
    cu_scratch_free(cu->side, dev);
    return rc ? cu_trace(err, err_n, __func__, __FILE__, __LINE__) : 0;
}
