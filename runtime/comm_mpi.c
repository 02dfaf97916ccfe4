/*
 * comm_mpi.c: the CPU backend with one rank per process, its sends, receives and collectives
 * through MPI (rt.h, "comm_mpi.c"). planrun uses it when mpirun starts it with a world of more
 * than one: `mpirun -np 4 planrun gpt.plan` runs the 4-rank plan as 4 processes, on one machine
 * or several.
 *
 * Everything but communication is the CPU backend's (cpu/backend.c): kernels, copies, arenas,
 * and the events between the streams of this process's rank (comm.c, which also stops every
 * local thread on the first failure and reports a deadlock among them). This file replaces its
 * p2p, coll and host_sum entries.
 *
 * The same results, bit for bit. The threaded backend (comm.c, run_cop) computes each member's
 * output of a collective as zero plus the contributing members' inputs in member order (rank
 * ascending), with rt_box_add. Here every member sends its input and its boxes to every other
 * member, and each member runs the same rt_box_add calls in the same order on what it received:
 * the same additions in the same order give the same bits. That moves (n - 1) whole inputs per
 * member, more than a ring all-reduce would; the CPU backend is the reference, not the fast
 * path. The step's loss (host_sum) is sent by every process to every other and summed in rank order as
 * interp.c sums it over the ranks of one process; each rank's part is a float's value in double,
 * and sums of a few such values are exact in double, so grouping them by process changes no bit.
 * Under --precision f64 the parts are doubles, and a loss spread over several ranks and several
 * micro-batches (summed per process here, per rank and micro-batch there) can differ in its last
 * bits: the printed loss only, not the parameters.
 *
 * Matching. A message's MPI tag is its plan tag and its sequence number on the channel (both
 * counted in program order by the interpreter, as comm.c matches them); a collective's tag is its
 * group and its sequence number on the group instance, on a communicator of its own. Within the
 * tag's bits (MPI_TAG_UB, 2^31 - 1 with OpenMPI) the numbers wrap, which is harmless: two
 * messages on one channel 2^27 sequence numbers apart are never in flight together.
 *
 * Waiting. Every MPI call is nonblocking and made under one lock (MPI_THREAD_SERIALIZED is all
 * this needs); a waiting thread polls its requests, backing off from a yield to a millisecond's
 * sleep. So it sees the failure of another thread of its process at once, and gives up after
 * --timeout seconds in which none of its requests completed, naming the ranks it waited for
 * ("rank 2 may have died or hung"). A process that fails calls MPI_Abort (planrun, rt_mpi_end),
 * which makes mpirun stop every other rank; a rank that dies makes mpirun do the same and name
 * it, and a rank that hangs makes its peers time out naming it. Messages larger than 2 GiB are
 * refused (MPI counts in int).
 *
 * Without MPI (meson found no OpenMPI) the entry points say so and fail.
 */
#define _GNU_SOURCE 1
#include "rt.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PLANCC_HAVE_MPI
#include <mpi.h>

#define WIRE_MAGIC 0x4d43504cu // "LPCM"
#define MAX_NAMED 8

static struct {
    bool started;                   // rt_mpi_begin called MPI_Init_thread
    int rank, world;
    pthread_mutex_t mu;             // every MPI call
    MPI_Comm p2p, coll, host;       // duplicates of MPI_COMM_WORLD: tag spaces of their own
    uint64_t host_sums;             // host_sum calls so far (their tag)
    int seq_bits_p2p, seq_bits_coll, group_bits;
    const plan *p;
    uint32_t *coord;                // per rank, PLAN_MAX_AXES coordinates
    double timeout_s;
    void (*cpu_free)(rt_backend *b);
} M = {.mu = PTHREAD_MUTEX_INITIALIZER};

int rt_mpi_begin(int *rank, int *world, char *err, size_t err_n) {
    int init = 0, provided = 0;
    MPI_Initialized(&init);
    if (!init) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return rt_say(err, err_n, "MPI_Init_thread failed");
        M.started = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &M.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &M.world);
    *rank = M.rank, *world = M.world;
    return 0;
}

void rt_mpi_end(int exit_code, bool agreed) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (!init) return;
    MPI_Finalized(&fin);
    if (fin) return;
    if (exit_code && !agreed) {
        fflush(stdout), fflush(stderr);
        // Ranks that fail together (their peers' timeouts) abort one after another, lowest first:
        // the first abort stops the rest, and OpenMPI's mpirun can crash on many at once.
        struct timespec stagger = {M.rank / 10, (long)(M.rank % 10) * 100000000L};
        nanosleep(&stagger, NULL);
        MPI_Abort(MPI_COMM_WORLD, exit_code); // the other ranks stop now rather than at their timeout
    }
    if (M.started) MPI_Finalize();
}

/* ---- waiting ---- */

// Polls reqs[0..n) until all complete; peer[k] is the rank at the other end of reqs[k] (for the
// messages of a failure). 0, or -1 with err after a failure of this process's run, an MPI error
// or --timeout seconds in which nothing completed. st[k] receives each request's status.
static int wait_all(rt_backend *b, MPI_Request *reqs, MPI_Status *st, int n, const int *peer, const char *what, char *err,
                    size_t err_n) {
    int *idx = malloc(sizeof *idx * (size_t)(n ? n : 1));
    MPI_Status *got = malloc(sizeof *got * (size_t)(n ? n : 1));
    if (!idx || !got) return free(idx), free(got), rt_say(err, err_n, "out of memory waiting for %s", what);
    double last = rt_clock_s();
    int rc = 0;
    for (unsigned spin = 0;; spin++) {
        int outc = 0;
        pthread_mutex_lock(&M.mu);
        int mrc = MPI_Testsome(n, reqs, &outc, idx, got);
        pthread_mutex_unlock(&M.mu);
        if (mrc != MPI_SUCCESS) {
            int bad = 0;
            for (int k = 0; k < outc && outc != MPI_UNDEFINED; k++)
                if (got[k].MPI_ERROR != MPI_SUCCESS) bad = idx[k];
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(mrc == MPI_ERR_IN_STATUS ? got[0].MPI_ERROR : mrc, text, &len);
            rc = rt_say(err, err_n, "%s: communication with rank %d failed: %s (did rank %d die?)", what, peer[bad], text, peer[bad]);
            break;
        }
        if (outc == MPI_UNDEFINED) break; // every request done
        for (int k = 0; k < outc; k++) st[idx[k]] = got[k];
        if (outc > 0) last = rt_clock_s(), spin = 0;
        if (b->error(b)) {
            rc = rt_say(err, err_n, "%s", b->error(b));
            break;
        }
        if (rt_clock_s() - last > M.timeout_s) {
            char who[256] = "";
            size_t w = 0;
            int named = 0;
            for (int k = 0; k < n && named < MAX_NAMED; k++) {
                if (reqs[k] == MPI_REQUEST_NULL) continue;
                char one[16];
                snprintf(one, sizeof one, " %d,", peer[k]);
                if (strstr(who, one)) continue;
                w += (size_t)snprintf(who + w, sizeof who - w, "%s", one), named++;
            }
            if (w) who[w - 1] = 0;
            rc = rt_say(err, err_n, "timeout: rank %d heard nothing from rank%s for %g s while %s (rank%s may have died or hung; raise "
                     "--timeout if a step is that slow)", M.rank, who, M.timeout_s, what, who);
            break;
        }
        if (spin < 64) sched_yield();
        else nanosleep(&(struct timespec){0, spin < 512 ? 50000L : 1000000L}, NULL);
    }
    free(idx), free(got);
    return rc;
}

/* ---- send and receive ---- */

static int p2p_tag(uint32_t tag, uint64_t seq) {
    return (int)((tag << M.seq_bits_p2p) | (uint32_t)(seq & ((1ull << M.seq_bits_p2p) - 1)));
}

static int mpi_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n) {
    (void)x;
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)(n ? n : 1));
    MPI_Status *st = calloc((size_t)(n ? n : 1), sizeof *st);
    int *peer = calloc((size_t)(n ? n : 1), sizeof *peer);
    if (!reqs || !st || !peer) return free(reqs), free(st), free(peer), rt_say(err, err_n, "out of memory posting %d messages", n);
    int rc = 0;
    for (int i = 0; i < n; i++) reqs[i] = MPI_REQUEST_NULL, peer[i] = items[i].peer;
    pthread_mutex_lock(&M.mu);
    for (int i = 0; i < n && !rc; i++) {
        if (items[i].bytes > INT_MAX) {
            rc = rt_say(err, err_n, "%s: %llu bytes: the MPI backend moves at most 2 GiB in one message", items[i].what,
                     (unsigned long long)items[i].bytes);
            break;
        }
        int tag = p2p_tag(items[i].tag, items[i].seq), count = (int)items[i].bytes;
        int mrc = items[i].send ? MPI_Isend(items[i].data, count, MPI_BYTE, items[i].peer, tag, M.p2p, &reqs[i])
                                : MPI_Irecv(items[i].data, count, MPI_BYTE, items[i].peer, tag, M.p2p, &reqs[i]);
        if (mrc != MPI_SUCCESS) rc = rt_say(err, err_n, "%s: MPI could not post it (error %d)", items[i].what, mrc);
    }
    pthread_mutex_unlock(&M.mu);
    if (!rc) rc = wait_all(b, reqs, st, n, peer, n ? items[0].what : "messages", err, err_n);
    for (int i = 0; i < n && !rc; i++) {
        int count = 0;
        if (items[i].send) continue;
        MPI_Get_count(&st[i], MPI_BYTE, &count);
        if ((uint64_t)count != items[i].bytes)
            rc = rt_say(err, err_n, "message size mismatch: %s receives %llu bytes, but rank %d sends %d", items[i].what,
                     (unsigned long long)items[i].bytes, items[i].peer, count);
    }
    if (rc) return b->fail(b, err), rc; // requests may still be in flight: the buffers stay (the process ends)
    free(reqs), free(st), free(peer);
    return 0;
}

/* ---- collectives ---- */

typedef struct wire {
    uint32_t magic, kind;
    int32_t n, me;
    uint8_t dtype, contributes, rank, pad;
    int64_t start[PLAN_MAX_RANK], shape[PLAN_MAX_RANK], full[PLAN_MAX_RANK];
} wire;

static int coll_tag(uint32_t group, uint64_t seq) {
    return (int)(((group & ((1u << M.group_bits) - 1)) << M.seq_bits_coll) | (uint32_t)(seq & ((1ull << M.seq_bits_coll) - 1)));
}

static int64_t box_numel(const rt_box *b) {
    int64_t n = 1;
    for (int d = 0; d < b->rank; d++) n *= b->shape[d];
    return n;
}

static void box_of(const wire *w, rt_box *b) {
    memset(b, 0, sizeof *b);
    b->rank = w->rank;
    memcpy(b->start, w->start, sizeof b->start), memcpy(b->shape, w->shape, sizeof b->shape), memcpy(b->full, w->full, sizeof b->full);
}

// The members of group g's instance that holds this process's rank, ascending (interp.c's order).
static int group_members(uint32_t group, int *members) {
    const plan_group *g = &M.p->groups[group];
    int n = 0;
    if (!g->axes) {
        for (uint32_t j = 0; j < g->n_ranks; j++) members[n++] = (int)g->ranks[j];
        return n;
    }
    const uint32_t *mine = &M.coord[(size_t)M.rank * PLAN_MAX_AXES];
    for (int q = 0; q < M.world; q++) {
        bool same = true;
        for (uint32_t a = 0; a < M.p->meta.n_axes && same; a++)
            if (!(g->axes >> a & 1) && M.coord[(size_t)q * PLAN_MAX_AXES + a] != mine[a]) same = false;
        if (same) members[n++] = q;
    }
    return n;
}

typedef struct coll_io {
    const rt_coll *c;
    int *members;
    wire *hdr;                      // per member: its description (mine at c->me)
    void **data;                    // per member: its input as received (NULL for mine and non-contributors)
    MPI_Request *reqs;              // [0, n_hdr): the descriptions, sent and received; then the inputs
    MPI_Status *st;
    int *peer;
    int n_hdr, n_reqs;
} coll_io;

// Posts the receives of every other member's description and the sends of mine, then the sends
// of my input (after my description to the same member: MPI keeps their order). The inputs are
// waited for only after the descriptions: a large send completes only once its receive is posted.
static int coll_post_headers(coll_io *io, char *err, size_t err_n) {
    const rt_coll *c = io->c;
    int n = c->n_members, tag = coll_tag(c->group, c->seq);
    wire *w = &io->hdr[c->me];
    *w = (wire){.magic = WIRE_MAGIC, .kind = c->kind, .n = n, .me = c->me, .dtype = c->dtype, .contributes = c->mine.contributes,
                .rank = c->mine.in_box.rank};
    memcpy(w->start, c->mine.in_box.start, sizeof w->start), memcpy(w->shape, c->mine.in_box.shape, sizeof w->shape);
    memcpy(w->full, c->mine.in_box.full, sizeof w->full);
    uint64_t bytes = (uint64_t)box_numel(&c->mine.in_box) * rt_dtype_bytes(c->dtype);
    if (bytes > INT_MAX) return rt_say(err, err_n, "%s: %llu bytes: the MPI backend moves at most 2 GiB at once", c->what, (unsigned long long)bytes);
    int rc = 0;
    pthread_mutex_lock(&M.mu);
    for (int s = 0; s < n && !rc; s++) {
        if (s == c->me) continue;
        int q = io->members[s], k = io->n_hdr;
        rc |= MPI_Irecv(&io->hdr[s], (int)sizeof(wire), MPI_BYTE, q, tag, M.coll, &io->reqs[k]) != MPI_SUCCESS;
        rc |= MPI_Isend(w, (int)sizeof(wire), MPI_BYTE, q, tag, M.coll, &io->reqs[k + 1]) != MPI_SUCCESS;
        io->peer[k] = io->peer[k + 1] = q, io->n_hdr += 2;
    }
    io->n_reqs = 2 * n;
    for (int s = 0; s < n && !rc && c->mine.contributes && bytes; s++) {
        if (s == c->me) continue;
        rc |= MPI_Isend(c->mine.in, (int)bytes, MPI_BYTE, io->members[s], tag, M.coll, &io->reqs[io->n_reqs]) != MPI_SUCCESS;
        io->peer[io->n_reqs++] = io->members[s];
    }
    pthread_mutex_unlock(&M.mu);
    return rc ? rt_say(err, err_n, "%s: MPI could not post it", c->what) : 0;
}

// After the descriptions arrived: checks them and posts the receives of the contributors' inputs.
static int coll_post_data(coll_io *io, char *err, size_t err_n) {
    const rt_coll *c = io->c;
    int tag = coll_tag(c->group, c->seq), rc = 0;
    for (int s = 0; s < c->n_members && !rc; s++) {
        const wire *w = &io->hdr[s];
        if (s == c->me) continue;
        if (w->magic != WIRE_MAGIC || w->n != c->n_members || w->me != s || w->dtype != c->dtype || w->kind != c->kind ||
            w->rank > PLAN_MAX_RANK)
            return rt_say(err, err_n, "collective mismatch: %s meets rank %d, which issues another collective there (member %d of %d, "
                       "kind %u, dtype %u)", c->what, io->members[s], w->me, w->n, w->kind, w->dtype);
        if (!w->contributes) continue;
        rt_box box;
        box_of(w, &box);
        uint64_t bytes = (uint64_t)box_numel(&box) * rt_dtype_bytes(c->dtype);
        if (!bytes) continue;
        if (bytes > INT_MAX || !(io->data[s] = malloc((size_t)bytes))) return rt_say(err, err_n, "%s: cannot take %llu bytes", c->what, (unsigned long long)bytes);
        pthread_mutex_lock(&M.mu);
        rc = MPI_Irecv(io->data[s], (int)bytes, MPI_BYTE, io->members[s], tag, M.coll, &io->reqs[io->n_reqs]) != MPI_SUCCESS;
        pthread_mutex_unlock(&M.mu);
        io->peer[io->n_reqs++] = io->members[s];
    }
    return rc ? rt_say(err, err_n, "%s: MPI could not post a receive", c->what) : 0;
}

// This member's output: zero plus every contributing member's input, in member order (comm.c's run_cop).
static int coll_reduce(coll_io *io, char *err, size_t err_n) {
    const rt_coll *c = io->c;
    size_t es = rt_dtype_bytes(c->dtype);
    int64_t out_n = box_numel(&c->mine.out_box);
    void *tmp = calloc((size_t)(out_n ? out_n : 1), es);
    if (!tmp) return rt_say(err, err_n, "out of memory running %s", c->what);
    for (int s = 0; s < c->n_members; s++) {
        if (s == c->me) {
            if (c->mine.contributes) rt_box_add(tmp, &c->mine.out_box, c->mine.in, &c->mine.in_box, c->dtype);
            continue;
        }
        rt_box box;
        box_of(&io->hdr[s], &box);
        if (io->hdr[s].contributes && io->data[s]) rt_box_add(tmp, &c->mine.out_box, io->data[s], &box, c->dtype);
    }
    memcpy(c->mine.out, tmp, (size_t)out_n * es);
    free(tmp);
    return 0;
}

static int mpi_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n) {
    (void)x;
    int n = c->n_members, cap = 4 * (n ? n : 1);
    coll_io io = {.c = c, .members = calloc((size_t)M.world, sizeof(int)), .hdr = calloc((size_t)n, sizeof(wire)),
                  .data = calloc((size_t)n, sizeof(void *)), .reqs = malloc(sizeof(MPI_Request) * (size_t)cap),
                  .st = calloc((size_t)cap, sizeof(MPI_Status)), .peer = calloc((size_t)cap, sizeof(int))};
    int rc = !io.members || !io.hdr || !io.data || !io.reqs || !io.st || !io.peer ? rt_say(err, err_n, "out of memory in %s", c->what) : 0;
    for (int k = 0; !rc && k < cap; k++) io.reqs[k] = MPI_REQUEST_NULL;
    if (!rc && (group_members(c->group, io.members) != n || c->me < 0 || c->me >= n || io.members[c->me] != M.rank))
        rc = rt_say(err, err_n, "%s: this process (rank %d) is not member %d of %d of its group", c->what, M.rank, c->me, n);
    if (!rc) rc = coll_post_headers(&io, err, err_n);
    // The descriptions first (their requests come in pairs with my sends), then the inputs.
    if (!rc) rc = wait_all(b, io.reqs, io.st, io.n_hdr, io.peer, c->what, err, err_n);
    if (!rc) rc = coll_post_data(&io, err, err_n);
    if (!rc) rc = wait_all(b, io.reqs, io.st, io.n_reqs, io.peer, c->what, err, err_n);
    if (!rc) rc = coll_reduce(&io, err, err_n);
    if (rc) return b->fail(b, err), -1; // requests may still be in flight: the buffers stay (the process ends)
    for (int s = 0; s < n; s++) free(io.data[s]);
    free(io.members), free(io.hdr), free(io.data), free(io.reqs), free(io.st), free(io.peer);
    return 0;
}

/* ---- the loss, and the backend ---- */

// Every process's n values reach every process (a send to and a receive from each, so that a
// timeout names the ranks that sent nothing); then the sums in rank order.
static int mpi_host_sum(rt_backend *b, double *v, int n, char *err, size_t err_n) {
    int w = M.world, k = 0, tag = (int)(M.host_sums++ & 0x7fff);
    double *all = calloc((size_t)w * (size_t)(n ? n : 1), sizeof *all);
    MPI_Request *reqs = malloc(sizeof *reqs * 2 * (size_t)w);
    MPI_Status *st = calloc(2 * (size_t)w, sizeof *st);
    int *peer = calloc(2 * (size_t)w, sizeof *peer);
    if (!all || !reqs || !st || !peer) return free(all), free(reqs), free(st), free(peer), rt_say(err, err_n, "out of memory summing the loss");
    memcpy(&all[(size_t)M.rank * (size_t)n], v, sizeof *v * (size_t)n);
    int rc = 0;
    pthread_mutex_lock(&M.mu);
    for (int q = 0; q < w; q++) {
        if (q == M.rank) continue;
        rc |= MPI_Irecv(&all[(size_t)q * (size_t)n], n, MPI_DOUBLE, q, tag, M.host, &reqs[k]) != MPI_SUCCESS;
        rc |= MPI_Isend(v, n, MPI_DOUBLE, q, tag, M.host, &reqs[k + 1]) != MPI_SUCCESS;
        peer[k] = peer[k + 1] = q, k += 2;
    }
    pthread_mutex_unlock(&M.mu);
    if (rc) rc = rt_say(err, err_n, "the loss: MPI could not post its messages");
    if (!rc) rc = wait_all(b, reqs, st, k, peer, "gathering the step's loss from every rank", err, err_n);
    for (int i = 0; !rc && i < n; i++) {
        double s = 0; // rank order, as interp.c's read_loss adds the ranks of one process
        for (int q = 0; q < w; q++) s += all[(size_t)q * (size_t)n + (size_t)i];
        v[i] = s;
    }
    if (rc) return -1; // requests may still be in flight: the buffers stay (the process ends)
    free(all), free(reqs), free(st), free(peer);
    return 0;
}

static void mpi_free(rt_backend *b) {
    pthread_mutex_lock(&M.mu);
    MPI_Comm_free(&M.p2p);
    MPI_Comm_free(&M.coll);
    MPI_Comm_free(&M.host);
    pthread_mutex_unlock(&M.mu);
    free(M.coord);
    M.coord = NULL;
    M.cpu_free(b);
}

static int bits_for(uint64_t n) {
    int b = 0;
    while ((1ull << b) < n) b++;
    return b;
}

rt_backend *rt_backend_mpi_init(const plan *p, const rt_options *o, uint32_t streams, uint32_t events, char *err, size_t err_n) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) return rt_say(err, err_n, "the MPI backend needs rt_mpi_begin first"), NULL;
    if ((int)p->meta.world != M.world) {
        rt_say(err, err_n, "the plan has %u ranks and mpirun started %d processes: start one per rank (mpirun -np %u)", p->meta.world,
            M.world, p->meta.world);
        return NULL;
    }
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    int tag_bits = flag && ub ? bits_for((uint64_t)*ub + 1) - 1 : 15; // the largest b with 2^b - 1 <= ub
    M.group_bits = bits_for(p->n_groups + 1ull);
    M.seq_bits_p2p = tag_bits - 3, M.seq_bits_coll = tag_bits - M.group_bits;
    if (M.seq_bits_coll < 8) return rt_say(err, err_n, "the plan's %u groups leave too few bits of MPI's tags (MPI_TAG_UB %d)", p->n_groups,
                                        ub ? *ub : 0), NULL;
    M.p = p, M.timeout_s = o->timeout_s;
    if (!(M.coord = calloc((size_t)M.world * PLAN_MAX_AXES, sizeof *M.coord))) return rt_say(err, err_n, "out of memory"), NULL;
    for (int q = 0; q < M.world; q++)
        for (int a = (int)p->meta.n_axes - 1, rest = q; a >= 0; a--)
            M.coord[(size_t)q * PLAN_MAX_AXES + (size_t)a] = (uint32_t)rest % p->meta.mesh[a], rest /= (int)p->meta.mesh[a];
    // The local streams' waits for each other (events) give up later than the waits on other
    // processes: when a peer hangs, the wait that knows which peer it was speaks first.
    rt_backend *b = rt_backend_cpu_init(M.world, streams, events, 2 * o->timeout_s + 1, o->f64 ? RT_CPU_F64 : 0, err, err_n);
    if (!b) return free(M.coord), M.coord = NULL, NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &M.p2p);
    MPI_Comm_dup(MPI_COMM_WORLD, &M.coll);
    MPI_Comm_dup(MPI_COMM_WORLD, &M.host);
    MPI_Comm_set_errhandler(M.p2p, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(M.coll, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(M.host, MPI_ERRORS_RETURN);
    M.cpu_free = b->free;
    b->name = "cpu over MPI";
    b->p2p = mpi_p2p, b->coll = mpi_coll, b->host_sum = mpi_host_sum, b->free = mpi_free;
    return b;
}

#else // no MPI in this build

int rt_mpi_begin(int *rank, int *world, char *err, size_t err_n) {
    *rank = 0, *world = 1;
    snprintf(err, err_n, "this planrun was built without MPI (meson found no OpenMPI: install libopenmpi-dev, see tools/setup.sh)");
    return -1;
}

void rt_mpi_end(int exit_code, bool agreed) { (void)exit_code, (void)agreed; }

rt_backend *rt_backend_mpi_init(const plan *p, const rt_options *o, uint32_t streams, uint32_t events, char *err, size_t err_n) {
    (void)p, (void)o, (void)streams, (void)events;
    snprintf(err, err_n, "this planrun was built without MPI");
    return NULL;
}

#endif
