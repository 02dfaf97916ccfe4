/*
 * preserve.c: phase 3, data dependency preservation (nnScaler's third phase).
 *
 * Input: a strategy from phase 2 (mesh pp x dp x tp, every forward operator's split along dp and
 * tp, recompute, stages). Output (preserve): one program per pipeline stage, which every rank of
 * the stage (its dp x tp ranks) runs: instructions over streams, with events between them, and
 * buffers not yet placed (pcc_programs: the memory planner places them, the emitter writes the
 * plan). Phase 3's first half, layout.c, decides where every value lives and in what layout, and
 * what the step does with it (pcc_values); this file builds the programs from those decisions.
 * A program is built in execution order:
 *
 *   [zero the accumulators of block-summed gradients]
 *   the units of the micro-batch schedule (pipeline.c), in its loops:
 *                                      F(mb) = recv inputs; forward operators; send outputs
 *                                      B(mb) = recv gradients; backward operators; send gradients
 *   the last micro-batch's backward, out of any loop, with the parameters' gradients
 *   synchronized on stream 1 in buckets as soon as they are final (overlapped with the rest of
 *   the backward); with ZeRO-2 and several micro-batches (or ZeRO-3), every micro-batch's
 *   backward reduce-scatters its gradient contributions onto the rank's shard instead, a block
 *   copy's in one collective on stream 1 while the next copy computes (zero2_flush)
 *   wait for the synchronization; the optimizer (ZeRO-1 and 2: its updated shards gathered one
 *   collective per block copy); parameter copies to the stages that share them
 *
 * handoff.c is phase 3's entry: it makes the builder (its types are in preserve.h), has
 * schedule.c build each stage's program in its order (p3_program) from this file's parts, and
 * turns them into phase 3's output (META, groups, ranks).
 *
 * Resharding. Where the buffer that holds a value has another layout than a reader wants,
 * reshard() emits reshard.c's chain (reshard_steps): collectives over mesh axes,
 * undoing splits from the least significant axis up (all-reduce of partial sums, all-gather of
 * pieces; reduce-scatter and all-to-all where they land directly on the wanted layout), then one
 * local copy that slices what is left. A chain made once is reused by the other readers of the
 * same value and layout until the value changes or a loop boundary passes.
 *
 * Values that cross stages are sent at the end of the producer's phase and received at the
 * start of the consumer's, in tensor order on every channel, so both sides agree. A parameter
 * used on several stages (tied embeddings) lives on the stage of its first use, which runs its
 * optimizer; the others hold a copy that is received after the optimizer, and accumulate their
 * gradient contributions over the micro-batches and send the sum once, after the last one (as
 * Megatron-LM all-reduces the embedding's gradient after the pipeline flush): sent per
 * micro-batch, the message would sit in the same NCCL group as the pipeline's own and hold the
 * last stage until the first stage reaches that micro-batch's backward, one wave at a time.
 * A gradient that a repeated block sums over its copies (T5's position bias, which every copy
 * reads), with the copies on several stages: each stage adds its copies' part to the partial sum
 * that arrives from the stage after and sends it on with its backward pass, like a carry
 * (acc_reg); the stage of copy 0 holds the sum. With 1F1B, a backward message between stages
 * that are not neighbours is passed on by each stage between (layout.c's relayed; relay_buf),
 * and with interlaced operators between the passes a forward one too.
 *
 * Interlaced operators (layout.c's interlace: on every stage, split over pp x tp) run in three
 * phases that every program holds at the same place: before the first forward unit, before the
 * first backward unit (with 1F1B, per micro-batch inside the steady state) and after
 * the last backward unit; schedule.c places them among the passes.
 *
 * --sync background (ShadowSync): the dense parameters (not embedding tables) replicated over an
 * axis on which their gradient holds partial sums, dp, or tp where the ILP split their operator
 * along the batch (ShadowSync's own layout: tables sharded over the tp group with all-to-all
 * exchanges, the dense layers data-parallel beside them), are trained per replica (layout.c's
 * `local`): their gradient's all-reduce over those axes becomes a scale by the replicas there
 * (the loss gives each rank its sum over the global batch; the replica wants its local mean).
 * Each program hands on the parameters its background round averages, with their groups
 * (background_params_of); the emitter has bgsync.c append that round.
 *
 * Memory: every buffer is made with what the memory planner needs to place it: its bytes, its
 * slots (one per micro-batch in flight for a kept activation, one per block copy for a block's
 * parameter), and whether it lives for the whole program (parameters, optimizer state, inputs,
 * the loss and accumulators) or in a contiguous bucket of gradients.
 *
 * Times. Every instruction carries the cost model's time for one execution (plan_insn.t_s), so
 * that the simulator (runtime/sim.c) needs nothing but the plan: an operator at the per-device
 * shape of its operands' layouts (cost_op_s, as the step-time estimate costs it); a collective
 * from the bytes it moves over its group's shape; a send or receive as a two-member transfer
 * along the pipeline axis; a copy as a memory-bound kernel. Each instruction also says which
 * part of the step it is in (forward, backward, recomputed forward, optimizer), and META has the
 * step's FLOPs as Megatron-LM counts them, for TFLOP/s and MFU.
 */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "preserve.h"

/* ---- building a program ---- */

static int in_flight(const builder *E, int stage) { return E->v->inflight[stage]; }

// Interleaved: the most micro-batches any chunk of stage's device holds (a top-level tensor's
// buffer is shared by the device's chunks).
static int device_in_flight(const builder *E, int stage) {
    int most = 1;
    for (int c = stage % E->pp; c < E->ns; c += E->pp) most = E->v->inflight[c] > most ? E->v->inflight[c] : most;
    return most;
}

// A parameter's gradient contribution summed inside the block copy that makes it (co-shard's
// pieces, autodiff.c's sum_now): read there and gone, so one slot rather than one per copy.
static bool summed_in_copy(const pcc_graph *g, int t) {
    if (graph_is_final_param_grad(g, t) || g->tensors[t].block < 0) return false;
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        for (int i = 0; i < bl->n_acc; i++)
            if (bl->acc[i].inner == t) return false;
        for (int i = 0; i < bl->n_out; i++)
            if (bl->out[i].inner == t) return false;
    }
    return true;
}

// ZeRO-2/3: whether a block copy's gradients are reduce-scattered together on stream 1 while the
// next copy computes (zero2_flush), as FSDP and DeepSpeed's overlap_comm do; not with --prefetch
// none, which holds one layer's gradients, not two.
static bool rs_behind(const builder *E) { return E->s->zero == 2 || (E->s->zero == 3 && !E->s->zero3_late); }

// The buffer that holds tensor t on this stage (made on first use).
static int home(builder *E, prog *P, int t) {
    if (P->home[t] >= 0) return P->home[t];
    const pcc_graph *g = E->g;
    const pcc_tensor *T = &g->tensors[t];
    uint32_t mb = 1, layers = 1, base = 0;
    if (T->block >= 0) {
        int fb = graph_block_family(g, T->block);
        bool per_copy = T->kind == PCC_T_PARAM || T->kind == PCC_T_STATE || E->v->kept[t] || (graph_is_param_grad(g, t) && !E->v->zero2[t] && !summed_in_copy(g, t));
        if (per_copy) {
            layers = (uint32_t)(E->v->copy_hi[fb][P->stage] - E->v->copy_lo[fb][P->stage]);
            base = (uint32_t)E->v->copy_lo[fb][P->stage];
        } else if (E->v->zero2[t] && rs_behind(E) && E->v->copy_hi[fb][P->stage] - E->v->copy_lo[fb][P->stage] > 1) {
            // The copy's gradients are reduce-scattered while the next copy computes into the
            // other slot (zero2_flush).
            layers = 2, base = (uint32_t)E->v->copy_lo[fb][P->stage];
        }
    }
    if (T->kind == PCC_T_INPUT || t == g->loss || (E->v->xil && E->v->xil[t])) mb = (uint32_t)E->M;
    else if (E->v->kept[t] && T->block < 0 && E->V > 1) mb = (uint32_t)device_in_flight(E, P->stage);
    else if (E->v->kept[t]) mb = (uint32_t)in_flight(E, P->stage);
    else if (E->v->xchunk[t] && !E->v->deferred[t] && !graph_is_param_grad(g, t)) mb = (uint32_t)E->M;
    int b = p3_buf(E, P, t, E->v->home_sh[t], mb, layers, base);
    P->buf[b].persist = T->kind == PCC_T_PARAM || T->kind == PCC_T_STATE || T->kind == PCC_T_INPUT;
    P->buf[b].whole = P->buf[b].persist || t == g->loss || (graph_is_final_param_grad(g, t) && !E->v->zero2[t]) || E->v->deferred[t];
    P->home[t] = b;
    return b;
}

/* ---- times (plan_insn.t_s): the cost model's, per execution ---- */

static void bucket_flush(builder *E, prog *P);
static void sharded_wait(builder *E, prog *P);

// A loop boundary closes the open gradient bucket: one instruction cannot span it. It also
// waits for ZeRO-3's reduce-scatters of top-level gradients (and, with --prefetch none, a
// copy's) on stream 1 (zero2_grad): their buffers then die in the iteration that made them.
static void loop_open(builder *E, prog *P, plan_loop_var var, int count) {
    PCC_ASSERT(P->depth < PLAN_MAX_LOOP_DEPTH);
    bucket_flush(E, P);
    sharded_wait(E, P);
    P->n_cache = 0;
    int saved = E->delta;
    E->delta = 0;
    plan_insn *in = p3_insn(E, P, PLAN_I_LOOP, 0, NULL, 0);
    E->delta = saved;
    in->code = (uint16_t)var;
    in->a = count;
    P->loops[P->depth++] = P->n_insn - 1;
}

static void loop_close(builder *E, prog *P) {
    bucket_flush(E, P);
    sharded_wait(E, P);
    P->n_pref = 0;
    int l = P->loops[--P->depth];
    P->insn[l].b = P->n_insn - l - 1;
    P->n_cache = 0;
    PCC_ASSERT(P->insn[l].b > 0);
    if (P->rs_loop) { // the last copy's reduce-scatters (zero2_flush)
        P->rs_loop = false;
        p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_SYNCED);
    }
}

// The sync stream goes on from here once the compute stream has reached it.
static void sync_follows(builder *E, prog *P) {
    p3_event(E, P, PLAN_I_RECORD, STREAM_MAIN, EV_GRAD);
    p3_event(E, P, PLAN_I_WAIT, STREAM_SYNC, EV_GRAD);
    P->used_sync = true;
}

/* ---- phase 3: resharding (reshard.c's chain of steps, emitted) ---- */

// The buffer that already holds buffer src's value in layout want, -1.
static int cached(const prog *P, int src, plan_shard want) {
    for (int i = 0; i < P->n_cache; i++)
        if (P->cache[i].src == src && p3_shard_eq(P->cache[i].want, want)) return P->cache[i].buf;
    return -1;
}

// Emits the chain that turns the value in buffer src into layout want; the last step writes
// into buffer dst (>= 0, which has layout want) or a new buffer. Returns the buffer written.
static int reshard_on(builder *E, prog *P, int src, plan_shard want, int dst, int stream) {
    ebuf *sb = &P->buf[src];
    if (p3_shard_eq(sb->shard, want)) {
        if (dst < 0 || dst == src) return src;
        p3_copy(E, P, src, dst);
        return dst;
    }
    int hit = dst < 0 ? cached(P, src, want) : -1;
    if (hit >= 0) return hit;
    int t = (int)sb->tensor;
    pcc_reshard_step step[PCC_AXES + 1];
    int n = reshard_steps(sb->shard, want, E->g->tensors[t].rank, step), b = src;
    for (int k = 0; k < n; k++) {
        int nb = k == n - 1 && dst >= 0 ? dst : p3_buf(E, P, t, step[k].after, 1, 1, 0);
        if (step[k].kind < 0) p3_copy_on(E, P, b, nb, stream);
        else p3_coll(E, P, (pcc_coll)step[k].kind, step[k].axes, stream, b, nb);
        b = nb;
    }
    if (dst < 0) *VEC_PUSH(E->g->arena, P->cache, P->n_cache, P->cap_cache) = (cache_entry){src, want, b};
    return b;
}

static int reshard_to(builder *E, prog *P, int src, plan_shard want, int dst) { return reshard_on(E, P, src, want, dst, STREAM_MAIN); }
static int reshard(builder *E, prog *P, int src, plan_shard want) { return reshard_to(E, P, src, want, -1); }

/* ---- operators ---- */

static void sync_grad(builder *E, prog *P, int gp);
static void zero2_grad(builder *E, prog *P, int gp);
static void coll_bucket(builder *E, prog *P, pcc_coll kind, unsigned axes, int stream, const int *in, const int *out, int n);

// One step of n resharding chains at once: pair k (unless done[k]) goes from in[k] to out[k] by
// step[k]. A local step is a copy of its own; the collectives are one instruction (a bucket) per
// kind, axes and dtype, where the first pair of each was; all on `stream`, with layer_delta d.
// Every pair is done after it.
static void step_buckets(builder *E, prog *P, const pcc_reshard_step *step, const int *in, const int *out, bool *done, int n,
                         int stream, int d) {
    int *bi = arena_alloc(E->g->arena, sizeof(int) * (size_t)n), *bo = arena_alloc(E->g->arena, sizeof(int) * (size_t)n);
    for (int k = 0; k < n; k++) {
        if (done[k]) continue;
        if (step[k].kind < 0) {
            p3_copy_on(E, P, in[k], out[k], stream);
        } else {
            int m = 0;
            for (int j = k; j < n; j++) {
                if (done[j] || step[j].kind != step[k].kind || step[j].axes != step[k].axes ||
                    P->buf[out[j]].dtype != P->buf[out[k]].dtype)
                    continue;
                bi[m] = in[j], bo[m++] = out[j];
                done[j] = true;
            }
            coll_bucket(E, P, (pcc_coll)step[k].kind, step[k].axes, stream, bi, bo, m);
        }
        done[k] = true;
        P->insn[P->n_insn - 1].layer_delta = (int16_t)d;
    }
}

/* ---- ZeRO-3: the next block copy's parameters gathered ahead, on stream 1 ---- */

// As FSDP's forward and backward prefetch: while stream 0 runs copy v of a block, stream 1
// all-gathers the parameters of the copy its loop runs next (v + 1 in a layer loop, v - 1 in a
// reverse one: the gathers' layer_delta, which the loop's last iteration skips) into the other
// of two layer slots; the loop's first copy is gathered before the loop (prefetch_first). At the
// top of each iteration stream 0 waits for its copy's gathers (the event recorded in the
// iteration before, or before the loop: a wait matches the latest record before it in program
// order), then marks where it is, which stream 1 waits for before it gathers into the slot that
// the copy before this one read. So a layer's gathers overlap the layer before it, and only the
// first copy's are exposed; the gathered buffers hold two copies (FSDP's too: the layer at work
// and the one prefetched).

static void prefetch_add(builder *E, prog *P, int o, int i) {
    const pcc_graph *g = E->g;
    int t = g->ops[o].in[i];
    if (g->tensors[t].kind != PCC_T_PARAM) return;
    int src = home(E, P, t);
    plan_shard want = E->v->sh[o][i];
    if (p3_shard_eq(P->buf[src].shard, want)) return;
    for (int k = 0; k < P->n_pref; k++)
        if (P->pref[k].src == src && p3_shard_eq(P->pref[k].want, want)) return;
    prefetch *e = VEC_PUSH(E->g->arena, P->pref, P->n_pref, P->cap_pref);
    memset(e, 0, sizeof *e);
    e->src = src, e->want = want;
    e->n = reshard_steps(P->buf[src].shard, want, g->tensors[t].rank, e->step);
    for (int k = 0; k < e->n; k++) e->buf[k] = -1;
}

// The parameters a copy of block b gathers (those of its recomputed forward operators too).
static void prefetch_list(builder *E, prog *P, int b) {
    const pcc_graph *g = E->g;
    const pcc_block *bl = &g->blocks[b];
    P->n_pref = 0;
    if (E->s->zero != 3) return;
    if (bl->fwd >= 0) {
        const pcc_block *fb = &g->blocks[bl->fwd];
        for (int o = fb->first_op; o < fb->first_op + fb->n_ops; o++)
            for (int i = 0; E->v->recomp[o] && i < g->ops[o].nin; i++) prefetch_add(E, P, o, i);
    }
    for (int o = bl->first_op; o < bl->first_op + bl->n_ops; o++)
        for (int i = 0; i < g->ops[o].nin; i++) prefetch_add(E, P, o, i);
}

// The buffers of a parameter's gather: one set per stage, which the forward and backward passes
// of its block and every micro-batch share, so two layers' parameters are live, as with FSDP.
static void prefetch_bufs(builder *E, prog *P, prefetch *e, int slots, int base) {
    for (int k = 0; k < P->n_gath; k++) {
        const prefetch *x = &P->gath[k];
        if (x->src != e->src || !p3_shard_eq(x->want, e->want)) continue;
        PCC_ASSERT(x->n == e->n && P->buf[x->buf[0]].layer_slots == (uint32_t)slots);
        memcpy(e->buf, x->buf, sizeof e->buf);
        return;
    }
    int t = (int)P->buf[e->src].tensor;
    for (int s = 0; s < e->n; s++) e->buf[s] = p3_buf(E, P, t, e->step[s].after, 1, (uint32_t)slots, (uint32_t)base);
    *VEC_PUSH(E->g->arena, P->gath, P->n_gath, P->cap_gath) = *e;
}

// Stream 1 gathers every listed parameter of the copy at layer_delta d (outside the loop: the
// loop's first copy) into its buffers of `slots` layer slots from copy `base`, and records. As
// FSDP's flat parameter: step s of all of them is one collective (a bucket) per kind, axes and
// dtype, so a copy pays one collective's latency, not one per parameter.
static void prefetch_gather(builder *E, prog *P, int slots, int base, int d) {
    if (!P->n_pref) return;
    sync_follows(E, P);
    int most = 0, n = P->n_pref;
    for (int k = 0; k < n; k++) {
        prefetch *e = &P->pref[k];
        if (e->n && e->buf[0] < 0) prefetch_bufs(E, P, e, slots, base);
        if (e->n > most) most = e->n;
    }
    int *in = arena_alloc(E->g->arena, sizeof(int) * (size_t)n), *out = arena_alloc(E->g->arena, sizeof(int) * (size_t)n);
    bool *done = arena_alloc(E->g->arena, (size_t)n);
    pcc_reshard_step *step = arena_alloc(E->g->arena, sizeof(pcc_reshard_step) * (size_t)n);
    for (int s = 0; s < most; s++) {
        for (int k = 0; k < n; k++) {
            const prefetch *e = &P->pref[k];
            done[k] = e->n <= s;
            if (done[k]) continue;
            step[k] = e->step[s], in[k] = s ? e->buf[s - 1] : e->src, out[k] = e->buf[s];
        }
        step_buckets(E, P, step, in, out, done, n, STREAM_SYNC, d);
    }
    p3_event(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_PREFETCH);
}

// Before the loop over block b's copies lo..hi-1 on this stage: the first copy's gathers. With
// --prefetch none (zero3_late) there are none ahead: each copy gathers its own at its start, into
// one slot, and waits for them (one layer gathered at a time, its gathers exposed).
static void prefetch_first(builder *E, prog *P, int b, int lo, int hi) {
    prefetch_list(E, P, b);
    int n = hi - lo;
    if (!E->s->zero3_late) prefetch_gather(E, P, n > 1 ? 2 : 1, lo, E->g->blocks[b].fwd >= 0 ? n - 1 : 0);
}

// At the top of a copy: wait for its gathers, then gather the next copy's.
static void prefetch_next(builder *E, prog *P, int b, int lo, int hi) {
    if (!P->n_pref) return;
    if (E->s->zero3_late) prefetch_gather(E, P, 1, lo, 0);
    p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_PREFETCH);
    if (hi - lo > 1 && !E->s->zero3_late) prefetch_gather(E, P, 2, lo, E->g->blocks[b].fwd >= 0 ? -1 : 1);
    // The operators find this copy's gathered values in the cache (the gathers above write the
    // other slot; added after them, as a collective forgets what its output held).
    for (int k = 0; k < P->n_pref; k++) {
        const prefetch *e = &P->pref[k];
        *VEC_PUSH(E->g->arena, P->cache, P->n_cache, P->cap_cache) = (cache_entry){e->src, e->want, e->buf[e->n - 1]};
    }
}

static uint32_t scale_attrs(builder *E, prog *P, double k) {
    plan_attrs a;
    memset(&a, 0, sizeof a);
    a.f[PLAN_AF_SCALE] = k;
    return p3_intern_attrs(E, P, &a);
}

/* ---- ring attention (--cp N --cp-form ring) ----
 *
 * Attention split along its sequence over cp (search.c's cp_letter: q, k, v, the output and
 * their gradients all hold the rank's piece, D(1) on cp) runs as ring attention (Liu et al.,
 * "Ring Attention with Blockwise Transformers", 2023): cp steps of attention_block (runtime/ops.def)
 * over the k/v block in hand, which the `shift` collective passes to the next cp rank between two
 * steps (c -> c+1, the last to the first), each step merged into the one before by log-sum-exp.
 * The gradient recomputes that ring (the merged output and lse; FlashAttention-2's backward saves
 * neither), then runs it again with attention_block_grad: dq sums on the rank, dk and dv travel
 * with their block and come home with one shift more. The blocks and partial results are scratch
 * buffers (the shifted blocks hold other ranks' pieces, which no shard of the mesh describes).
 * Causal: a block wholly above the diagonal is skipped by the kernel (no load balancing: rank c
 * computes c + 1 blocks of cp) - unless the sequence is in zigzag order (--cp-form zigzag: the
 * inputs hold it so, emit.c; each step's attrs i[END] gives the kernel its 2 cp chunks), where
 * every rank computes half a block at every step. Overlap: the k/v block of step j + 1 travels on a stream of
 * its own (STREAM_RING) while step j computes (double buffering: two blocks in hand); the stream starts the shift once
 * the compute stream reaches step j (an event), and step j + 1 waits for it (another). The
 * gradient's dk and dv travel on the compute stream, after the step that adds to them. */

// A scratch buffer of `bytes` in tensor t's dtype.
static int ring_scratch(builder *E, prog *P, int t, uint64_t bytes) { return p3_scratch(E, P, E->g->tensors[t].dtype, bytes); }

// Buffer b passed one step around the ring on `stream`: the buffer that receives the previous rank's.
static int ring_shift(builder *E, prog *P, int t, int b, int stream) {
    int nb = ring_scratch(E, P, t, P->buf[b].bytes);
    p3_coll(E, P, PCC_COLL_SHIFT, 1u << PCC_AX_CP, stream, b, nb);
    return nb;
}

// Starts passing the k/v block (*kb, *vb of tensors kt, vt; then the buffers that receive the
// next) on the ring's own stream, once the compute stream has reached this point; ring_arrive
// makes the compute stream wait for it. A stream of its own (as Megatron-Core's context-parallel
// stream): on the sync stream the shift would queue behind ZeRO-3's gathers of the next layer and
// the reduce-scatters of the last, and the ring's steps wait for them (GPT-3 175B, dp 512 x cp 2,
// ZeRO-3: 4.5 s of 19.5 s a step).
static void ring_pass(builder *E, prog *P, int kt, int vt, int *kb, int *vb) {
    p3_event(E, P, PLAN_I_RECORD, STREAM_MAIN, EV_RING_GO);
    p3_event(E, P, PLAN_I_WAIT, STREAM_RING, EV_RING_GO);
    P->used_ring = true;
    *kb = ring_shift(E, P, kt, *kb, STREAM_RING), *vb = ring_shift(E, P, vt, *vb, STREAM_RING);
    p3_event(E, P, PLAN_I_RECORD, STREAM_RING, EV_RING);
}

static void ring_arrive(builder *E, prog *P) { p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_RING); }

// One ring step: op `code` at ring step j over args, with op's attrs.
static void ring_step(builder *E, prog *P, int o, pcc_op_kind code, int j, const int *args, int n, int nout) {
    plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, args, n);
    in->code = (uint16_t)code;
    // zigzag, causal: half a whole block per step, where the op's time is a whole one (unfused;
    // the flash form's causal time is half a block already): estimate.c's est_ring
    const pcc_op *fo = &E->g->ops[E->g->ops[o].phase == PCC_PHASE_FWD ? o : E->g->ops[o].fwd];
    bool half = E->s->config.cp_zigzag && fo->attrs.causal && fo->attrs.mode != PLAN_ATTN_FLASH;
    in->t_s = p3_op_time_s(E, o) * (half ? 0.5f : 1.0f);
    plan_attrs pa;
    uint32_t a = p3_attrs_of(E, P, &E->g->ops[o], false, false);
    if (a == PLAN_NONE) memset(&pa, 0, sizeof pa);
    else pa = P->attrs[a];
    pa.i[PLAN_AI_START] = j;
    pa.i[PLAN_AI_END] = E->s->config.cp_zigzag ? 2 * E->cp : 0; // the zigzag chunks: the step masks by logical positions
    in->attrs = p3_intern_attrs(E, P, &pa);
    for (int i = n - nout; i < n; i++) p3_forget(P, args[i]);
}

// The forward ring of attention op f (the forward op) on the rank's q, k, v buffers: writes the
// output into yb (-1: a scratch buffer) and returns it; *lse the merged lse (scratch).
static int ring_forward(builder *E, prog *P, int o, int f, const int *qkv, int yb, int *lse) {
    const pcc_graph *g = E->g;
    const pcc_op *fo = &g->ops[f];
    int qt = fo->in[0];
    int64_t d = g->dims[g->tensors[qt].dims[3]].size, e = g->dims[g->tensors[fo->in[2]].dims[3]].size;
    uint64_t lbytes = P->buf[qkv[0]].bytes / (uint64_t)d, ybytes = lbytes * (uint64_t)e;
    int kb = qkv[1], vb = qkv[2], y = -1, l = -1;
    for (int j = 0; j < E->cp; j++) {
        int nk = kb, nv = vb;
        if (j + 1 < E->cp) ring_pass(E, P, fo->in[1], fo->in[2], &nk, &nv);
        int ny = j == E->cp - 1 && yb >= 0 ? yb : ring_scratch(E, P, qt, ybytes), nl = ring_scratch(E, P, qt, lbytes);
        int args[9] = {qkv[0], qkv[1], qkv[2], kb, vb}, n = 5;
        if (j) args[n++] = y, args[n++] = l;
        args[n++] = ny, args[n++] = nl;
        ring_step(E, P, o, PCC_OP_ATTENTION_BLOCK, j, args, n, 2);
        if (j + 1 < E->cp) ring_arrive(E, P);
        y = ny, l = nl, kb = nk, vb = nv;
    }
    *lse = l;
    return y;
}

// Attention or its gradient (op o), split along the sequence over cp, as ring attention.
static void ring_attention(builder *E, prog *P, int o) {
    const pcc_op *op = &E->g->ops[o];
    int f = op->phase == PCC_PHASE_FWD ? o : op->fwd, nin = op->kind == PCC_OP_ATTENTION ? 3 : 4, in[4], lse;
    for (int i = 0; i < nin; i++) in[i] = reshard(E, P, home(E, P, op->in[i]), E->v->sh[o][i]);
    if (op->kind == PCC_OP_ATTENTION) {
        ring_forward(E, P, o, f, in, home(E, P, op->out[0]), &lse);
        return;
    }
    int y = ring_forward(E, P, f, f, in + 1, -1, &lse), out[3];
    for (int i = 0; i < 3; i++) out[i] = home(E, P, op->out[i]);
    int kb = in[2], vb = in[3], dq = -1, dk = -1, dv = -1;
    for (int j = 0; j < E->cp; j++) {
        int nk = kb, nv = vb;
        if (j) dk = ring_shift(E, P, op->in[2], dk, STREAM_MAIN), dv = ring_shift(E, P, op->in[3], dv, STREAM_MAIN);
        if (j + 1 < E->cp) ring_pass(E, P, op->in[2], op->in[3], &nk, &nv);
        int args[14] = {in[0], in[1], in[2], in[3], y, lse, kb, vb}, n = 8;
        if (j) args[n++] = dq, args[n++] = dk, args[n++] = dv;
        dq = j == E->cp - 1 ? out[0] : ring_scratch(E, P, op->out[0], P->buf[out[0]].bytes);
        dk = ring_scratch(E, P, op->out[1], P->buf[in[2]].bytes), dv = ring_scratch(E, P, op->out[2], P->buf[in[3]].bytes);
        args[n++] = dq, args[n++] = dk, args[n++] = dv;
        ring_step(E, P, o, PCC_OP_ATTENTION_BLOCK_GRAD, j, args, n, 3);
        if (j + 1 < E->cp) ring_arrive(E, P);
        kb = nk, vb = nv;
    }
    // home: the block and its sums are back on the rank that owns them
    p3_copy(E, P, ring_shift(E, P, op->in[2], dk, STREAM_MAIN), out[1]);
    p3_copy(E, P, ring_shift(E, P, op->in[3], dv, STREAM_MAIN), out[2]);
}

static void emit_op(builder *E, prog *P, int o, bool last_mb) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[o];
    if (p3_ring_op(E, o)) {
        ring_attention(E, P, o);
        return;
    }
    int args[PCC_MAX_OPERANDS + 1];
    for (int i = 0; i < op->nin; i++) args[i] = reshard(E, P, home(E, P, op->in[i]), E->v->sh[o][i]);
    for (int i = 0; i < op->nout; i++) {
        args[op->nin + i] = home(E, P, op->out[i]);
        PCC_ASSERT(P->buf[args[op->nin + i]].bytes == p3_shard_bytes(E, op->out[i], E->v->sh[o][op->nin + i]));
    }
    bool defers = false, sharded = false; // its output goes to another stage once per step: sum it here first
    for (int i = 0; i < op->nout; i++) defers |= E->v->deferred[op->out[i]], sharded |= E->v->zero2[op->out[i]];
    uint32_t attrs = p3_attrs_of(E, P, op, defers, sharded);
    unsigned vocab = p3_vocab_axes(E, o);
    if (vocab) {
        p3_vocab_ce(E, P, o, vocab, args, attrs);
    } else {
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, args, op->nin + op->nout);
        in->code = (uint16_t)op->kind, in->t_s = p3_op_time_s(E, o), in->attrs = attrs;
    }
    for (int i = 0; i < op->nout; i++) p3_forget(P, args[op->nin + i]);
    if (pcc_ops[op->kind].flags & PCC_OPF_INPLACE) {
        // The update lands in the buffers it was given; carry it back to where the values live
        // (ZeRO 1 and 2: the parameter's shard is all-gathered into the whole parameter).
        for (int i = 0; i < op->nin; i++) p3_forget(P, args[i]);
        for (int i = 0; i < op->nin; i++) {
            int hb = home(E, P, op->in[i]);
            if (args[i] == hb || i == 1) continue;
            if (E->post_later) {
                int *e = *VEC_PUSH(g->arena, P->post, P->n_post, P->cap_post);
                e[0] = args[i], e[1] = hb;
            } else {
                reshard_to(E, P, args[i], P->buf[hb].shard, hb);
            }
        }
        P->n_cache = 0;
    }
    for (int i = 0; i < op->nout; i++) {
        int t = op->out[i];
        if (E->v->zero2[t]) zero2_grad(E, P, t);
        else if (last_mb && E->v->sync[t] && graph_is_final_param_grad(g, t)) sync_grad(E, P, t);
    }
}

// --sync background: the replica's own gradient, the gradient of its local mean (the loss gives
// each rank its sum over the global batch, so the replicas along `axes` times it), in place of
// the all-reduce over those axes.
static int local_grad(builder *E, prog *P, int gp, int b, unsigned axes, int stream) {
    plan_shard next = P->buf[b].shard;
    for (int a = 0; a < PCC_AXES; a++)
        if (axes >> a & 1u) next.map[a] = PLAN_SHARD_R;
    int nb = p3_buf(E, P, gp, next, 1, P->buf[b].layer_slots, P->buf[b].layer_base);
    P->buf[nb].whole = true;
    plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, stream, (int[]){b, nb}, 2);
    in->code = PCC_OP_SCALE;
    in->attrs = scale_attrs(E, P, (double)p3_axes_group(E, axes).size);
    in->t_s = p3_memory_s(E, P, 2.0 * (double)P->buf[nb].bytes, nb);
    return nb;
}

// --sync background: a gradient trained per replica, synchronized by itself (no bucket): the
// local scale over its replica axes, the all-reduce or reduce-scatter over the other axes where
// it holds partial sums (those the producer left V). With collectives, on stream 1; a scale
// alone (dp's dense params) on a cpu cluster stays on stream 0, where a record and a wait per
// parameter (a thread handing over to another) cost more than the scale. On a GPU the scale
// goes to stream 1 too: its launch would otherwise delay the backward pass's next kernel.
static void sync_grad_local(builder *E, prog *P, int gp) {
    const pcc_graph *g = E->g;
    int p = g->tensors[gp].of, hb = home(E, P, gp);
    plan_shard want = E->v->opt_sh[p], made = layout_grad_made(E->v, gp);
    unsigned mine = 0, other = 0; // the replica axes where the producer left partial sums (dp with one rank: none); the rest
    for (int a = 0; a < PCC_AXES; a++)
        if (made.map[a] == PLAN_SHARD_V) *(E->v->local[gp] >> a & 1u ? &mine : &other) |= 1u << a;
    if (!other && (!mine || E->c->cpu)) {
        P->home[gp] = mine ? local_grad(E, P, gp, hb, mine, STREAM_MAIN) : hb;
        return;
    }
    sync_follows(E, P);
    int b = mine ? local_grad(E, P, gp, hb, mine, STREAM_SYNC) : hb;
    for (int a = PCC_AXES - 1; a >= 0; a--) {
        if (made.map[a] != PLAN_SHARD_V || (mine >> a & 1u)) continue;
        if (want.map[a] >= 2 && P->buf[b].shard.map[a] == PLAN_SHARD_V) {
            plan_shard next = P->buf[b].shard;
            next.map[a] = want.map[a];
            int nb = p3_buf(E, P, gp, next, 1, P->buf[hb].layer_slots, P->buf[hb].layer_base);
            P->buf[nb].whole = true;
            p3_coll(E, P, PCC_COLL_REDUCE_SCATTER, 1u << a, STREAM_SYNC, b, nb);
            b = nb;
        } else {
            p3_coll(E, P, PCC_COLL_ALL_REDUCE, 1u << a, STREAM_SYNC, b, b);
        }
    }
    P->home[gp] = b; // the optimizer reads the synchronized gradient
}

/* ---- gradient synchronization: buckets ---- */

static bool steps_eq(const pcc_reshard_step *x, int nx, const pcc_reshard_step *y, int ny) {
    if (nx != ny) return false;
    for (int k = 0; k < nx; k++)
        if (x[k].kind != y[k].kind || x[k].axes != y[k].axes) return false;
    return true;
}

// Buffers bk[0..n) of one bucket lie back to back in the arena (the memory planner places them
// as one), where each holds one slot per block copy, the same count, for the whole program.
static void bucket_layout(prog *P, const int *bk, int n) {
    for (int j = 0; j < n; j++) {
        const ebuf *b = &P->buf[bk[j]];
        if (!b->whole || b->mb_slots != 1 || b->in_bucket || b->layer_slots != P->buf[bk[0]].layer_slots) return;
    }
    for (int j = 0; j < n; j++) {
        P->buf[bk[j]].in_bucket = true;
        P->buf[bk[j]].bucket_next = j + 1 < n ? bk[j + 1] : -1;
    }
}

// One collective instruction over the pairs (in[j], out[j]): a bucket of n when n > 1.
static void coll_bucket(builder *E, prog *P, pcc_coll kind, unsigned axes, int stream, const int *in, const int *out, int n) {
    int *args = arena_alloc(E->g->arena, sizeof(int) * (size_t)(2 * n));
    double bytes = 0;
    for (int j = 0; j < n; j++) {
        args[j] = in[j], args[n + j] = out[j];
        bytes += cost_coll_bytes(kind, (double)P->buf[in[j]].bytes, (double)P->buf[out[j]].bytes);
    }
    plan_insn *i = p3_insn(E, P, PLAN_I_COLL, stream, args, 2 * n);
    i->code = (uint16_t)kind;
    i->a = p3_group(E, (int)axes, stream);
    i->t_s = (float)(cost_collective_s(E->c, kind, bytes, p3_axes_group(E, axes)) + cost_launch_s(E->c));
    for (int j = 0; j < n; j++) p3_forget(P, out[j]);
}

// Issues the open bucket: stream 1 waits for the gradients, then runs one collective per step
// of their synchronization over all of them, while the backward pass goes on on stream 0.
static void bucket_flush(builder *E, prog *P) {
    int n = P->n_bucket;
    if (n == 0) return;
    P->n_bucket = 0, P->bucket_bytes = 0;
    plan_phase saved = E->phase;
    E->phase = PLAN_PHASE_BWD; // also when the last one closes after the backward pass
    sync_follows(E, P);
    pcc_reshard_step step[PCC_AXES];
    int ns = layout_sync_steps(E->v, P->bucket[0], step);
    int *cur = arena_alloc(E->g->arena, sizeof(int) * (size_t)n), *next = arena_alloc(E->g->arena, sizeof(int) * (size_t)n);
    for (int j = 0; j < n; j++) cur[j] = home(E, P, P->bucket[j]);
    bucket_layout(P, cur, n);
    for (int k = 0; k < ns; k++) {
        for (int j = 0; j < n; j++) {
            next[j] = cur[j];
            if (step[k].kind != PCC_COLL_REDUCE_SCATTER) continue;
            const ebuf *hb = &P->buf[cur[j]];
            pcc_reshard_step mine[PCC_AXES]; // the same kinds and axes as step; its own layouts
            layout_sync_steps(E->v, P->bucket[j], mine);
            next[j] = p3_buf(E, P, P->bucket[j], mine[k].after, 1, hb->layer_slots, hb->layer_base);
            P->buf[next[j]].whole = true;
        }
        coll_bucket(E, P, (pcc_coll)step[k].kind, step[k].axes, STREAM_SYNC, cur, next, n);
        if (step[k].kind == PCC_COLL_REDUCE_SCATTER) bucket_layout(P, next, n);
        memcpy(cur, next, sizeof(int) * (size_t)n);
    }
    for (int j = 0; j < n; j++) P->home[P->bucket[j]] = cur[j]; // the optimizer reads the synchronized gradient
    E->phase = saved;
}

// The gradient gp is final: it joins the open bucket (ordered as the backward pass finishes
// them, as PyTorch DDP's and Megatron-LM's buckets), which is issued once it holds
// --bucket-mb's bytes. A gradient synchronized by other collectives, or of another dtype or
// slot count, closes the open bucket first.
static void sync_grad(builder *E, prog *P, int gp) {
    if (E->v->bg && E->v->local[gp]) {
        bucket_flush(E, P);
        sync_grad_local(E, P, gp);
        return;
    }
    int hb = home(E, P, gp);
    if (P->n_bucket > 0) {
        pcc_reshard_step a[PCC_AXES], b[PCC_AXES];
        int first = home(E, P, P->bucket[0]);
        if (!steps_eq(a, layout_sync_steps(E->v, P->bucket[0], a), b, layout_sync_steps(E->v, gp, b)) || P->buf[first].dtype != P->buf[hb].dtype ||
            P->buf[first].layer_slots != P->buf[hb].layer_slots)
            bucket_flush(E, P);
    }
    *VEC_PUSH(E->g->arena, P->bucket, P->n_bucket, P->cap_bucket) = gp;
    P->bucket_bytes += P->buf[hb].bytes;
    if (P->bucket_bytes >= E->bucket_cap || P->n_bucket == PLAN_MAX_BUCKET) bucket_flush(E, P);
}

// Whether a gradient whose synchronization is the n steps step (layout_sync_steps) has its last
// reduce-scatter write the shard straight into the buffer the optimizer reads: with one
// micro-batch there is nothing to sum over, so no fill and no add.
static bool shard_direct(const builder *E, const pcc_reshard_step *step, int n) {
    return E->M == 1 && n > 0 && step[n - 1].kind == PCC_COLL_REDUCE_SCATTER;
}

// ZeRO-2/3: this micro-batch's contribution to the n gradients gp[] is in their (transient,
// whole) buffers: synchronize them on `stream` (all-reduce over the axes the optimizer keeps
// whole, reduce-scatter onto the rank's shard over dp), as one collective per step for all of
// them (step_buckets), and add each shard to the one summed over the micro-batches, which the
// optimizer reads (with one micro-batch, the reduce-scatter's output).
static void zero2_sync(builder *E, prog *P, const int *gp, int n, int stream) {
    pcc_arena *A = E->g->arena;
    pcc_reshard_step(*steps)[PCC_AXES] = arena_alloc(A, sizeof *steps * (size_t)n), *step = arena_alloc(A, sizeof *step * (size_t)n);
    int *ns = arena_alloc(A, sizeof(int) * (size_t)n), *cur = arena_alloc(A, sizeof(int) * (size_t)n);
    int *next = arena_alloc(A, sizeof(int) * (size_t)n), most = 0;
    bool *done = arena_alloc(A, (size_t)n), *direct = arena_alloc(A, (size_t)n);
    for (int j = 0; j < n; j++) {
        ns[j] = layout_sync_steps(E->v, gp[j], steps[j]);
        cur[j] = home(E, P, gp[j]);
        direct[j] = shard_direct(E, steps[j], ns[j]);
        if (ns[j] > most) most = ns[j];
    }
    for (int k = 0; k < most; k++) {
        for (int j = 0; j < n; j++) {
            done[j] = ns[j] <= k, next[j] = cur[j];
            if (done[j]) continue;
            step[j] = steps[j][k];
            if (step[j].kind == PCC_COLL_REDUCE_SCATTER)
                next[j] = direct[j] && k == ns[j] - 1 ? P->shard_acc[gp[j]] : p3_buf(E, P, gp[j], step[j].after, 1, 1, 0);
        }
        step_buckets(E, P, step, cur, next, done, n, stream, 0);
        memcpy(cur, next, sizeof(int) * (size_t)n);
    }
    for (int j = 0; j < n; j++) {
        if (direct[j]) continue;
        int acc = P->shard_acc[gp[j]];
        PCC_ASSERT(acc >= 0 && P->buf[acc].bytes == P->buf[cur[j]].bytes);
        int args[3] = {acc, cur[j], acc};
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, stream, args, 3);
        in->code = PCC_OP_ADD;
        in->t_s = p3_memory_s(E, P, 3 * (double)P->buf[acc].bytes, acc);
    }
}

// ZeRO-2/3: gradient gp is final. A block copy's wait for the copy's end (zero2_flush), as
// FSDP's flat parameter and Megatron-LM's buckets: one collective per copy, not one per
// parameter, each paying the ring's latency. The others are synchronized now (and so are a
// copy's with --prefetch none): ZeRO-2's on the compute stream, the next micro-batch's backward
// reuses the buffer; ZeRO-3's on stream 1, as FSDP's, which stream 0 waits for at the next
// loop boundary (sharded_wait; the memory planner keeps the buffers stream 1 uses live until
// that wait).
static void zero2_grad(builder *E, prog *P, int gp) {
    if (E->g->tensors[gp].block >= 0 && rs_behind(E)) {
        *VEC_PUSH(E->g->arena, P->zpend, P->n_zpend, P->cap_zpend) = gp;
        return;
    }
    int stream = E->s->zero == 3 ? STREAM_SYNC : STREAM_MAIN;
    if (stream == STREAM_SYNC) {
        sync_follows(E, P);
        P->sharding = true;
    }
    zero2_sync(E, P, &gp, 1, stream);
}

// At the end of a block copy, its gradients together, on stream 1 while the next copy computes.
// Stream 0 waits for them at the end of that copy, before it hands over this one's (the
// gradients' buffers have two layer slots, home), and after the loop for the last copy's: the
// event recorded before the loop (block_range) stands for the copy before the first. (ZeRO-3:
// the next copy's gathers, queued behind them on stream 1, order them too; the wait stands
// where a block gathers nothing.)
static void zero2_flush(builder *E, prog *P) {
    int n = P->n_zpend;
    if (!n) return;
    P->n_zpend = 0;
    p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_SYNCED);
    sync_follows(E, P);
    zero2_sync(E, P, P->zpend, n, STREAM_SYNC);
    p3_event(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_SYNCED);
    P->rs_loop = true;
}

// ZeRO-3: stream 0 waits for the reduce-scatters stream 1 has queued since the last wait.
static void sharded_wait(builder *E, prog *P) {
    if (!P->sharding) return;
    P->sharding = false;
    p3_event(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_SYNCED);
    p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_SYNCED);
}

/* ---- ZeRO-2 ---- */

// ZeRO-2: the buffers the gradient shards of this stage sum in over the micro-batches, zeroed
// at the start of the step (a slot per block copy: a layer loop of fills); with one micro-batch
// the reduce-scatter writes the shard there itself (shard_direct), with nothing to zero.
static void zero2_accumulators(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    P->shard_acc = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) {
        P->shard_acc[t] = -1;
        if (!E->v->zero2[t]) continue;
        const pcc_tensor *T = &g->tensors[t];
        int lo = 0, hi = 1;
        if (T->block >= 0) {
            int fb = graph_block_family(g, T->block);
            lo = E->v->copy_lo[fb][P->stage], hi = E->v->copy_hi[fb][P->stage];
        } else if (E->v->tstage[t] != P->stage && E->v->tstage[t] != PCC_STAGE_ALL) { // interlaced: on every stage
            continue;
        }
        if (hi <= lo) continue;
        pcc_reshard_step step[PCC_AXES];
        int n = layout_sync_steps(E->v, t, step);
        int acc = p3_buf(E, P, t, step[n - 1].after, 1, (uint32_t)(hi - lo), T->block >= 0 ? (uint32_t)lo : 0);
        P->buf[acc].whole = true;
        P->shard_acc[t] = acc;
        if (shard_direct(E, step, n)) continue;
        if (hi - lo > 1) loop_open(E, P, PLAN_LOOP_LAYER, hi - lo);
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, &acc, 1);
        in->code = PCC_OP_FILL;
        in->t_s = p3_memory_s(E, P, (double)P->buf[acc].bytes, acc);
        if (hi - lo > 1) loop_close(E, P);
    }
}

/* ---- units: top-level ops and block ranges ---- */

static bool on_stage(const builder *E, int o, int stage) { return E->v->ostage[o] == stage; }

// Whether this stage receives block b's carries from another stage and also sends them to one
// (its copies lie strictly inside the block's, with other stages on both sides).
static bool carry_passes_through(const builder *E, int b, int stage) {
    int fb = graph_block_family(E->g, b), lo = E->v->copy_lo[fb][stage], hi = E->v->copy_hi[fb][stage];
    return hi > lo && lo > 0 && hi < (int)E->g->blocks[fb].repeat && layout_copy_stage(E->v, b, lo - 1) != stage &&
           layout_copy_stage(E->v, b, hi) != stage;
}

// The register that carries value k of block b from one copy to the next (a scratch buffer of
// the carried tensor's size: the carry's source and destination hold the same layout); k past
// the carries: the partial sum of a gradient the backward block sums over its copies, passed
// between stages (acc_reg), a buffer of the sum's tensor and layout, which the copies add into.
static int carry_reg(builder *E, prog *P, int b, int k) {
    if (P->carry[b][k] < 0) {
        const pcc_block *bl = &E->g->blocks[b];
        int src = k < bl->n_carry ? bl->carry[k].inner : bl->acc[k - bl->n_carry].outer;
        // Two micro-batch slots where one group of sends and receives may send the register's
        // value for one micro-batch and receive into it for the next (PLAN_FORMAT.md: a run of
        // sends and receives is one group, across loop iterations too, and its receives may land
        // before its sends read): on a stage that receives the carry and passes it on (plain 1F1B
        // at pp >= 3: the warm-up loop's send of mb and its next iteration's receive of mb + 1),
        // and interleaved (consecutive units of one chunk have consecutive micro-batches).
        bool two = E->V > 1 || carry_passes_through(E, b, P->stage);
        if (k < bl->n_carry) {
            P->carry[b][k] = p3_buf(E, P, -1, p3_shard_r(), two ? 2 : 1, 1, 0);
            P->buf[P->carry[b][k]].bytes = p3_shard_bytes(E, src, E->v->home_sh[src]);
        } else {
            P->carry[b][k] = p3_buf(E, P, src, E->v->home_sh[src], two ? 2 : 1, 1, 0); // the operators add into it
        }
    }
    return P->carry[b][k];
}

// Where a backward block's copies are on several stages, each stage sums its own copies' part of
// a gradient summed over copies (acc i) into a register that travels with the backward pass like
// a carry: from the stage of the copies after (or zeros, on the stage of the last copy), through
// this stage's copies, to the stage of the copies before. The stage of copy 0 holds the sum; it
// adds what arrives into it before its own copies. The register of acc i; -1 where the sum
// itself is the target (the stage of copy 0).
static int acc_reg(builder *E, prog *P, int b, int i) {
    const pcc_block *bl = &E->g->blocks[b];
    if (E->v->copy_lo[graph_block_family(E->g, b)][P->stage] == 0) return -1;
    return carry_reg(E, P, b, bl->n_carry + i);
}

// One copy of block b: the body of its layer loop.
static void block_body(builder *E, prog *P, int b, bool last_mb) {
    const pcc_graph *g = E->g;
    const pcc_block *bl = &g->blocks[b];
    // The carried inputs arrive from the previous copy through the carry registers.
    // (Each call that may make a buffer is a statement of its own: the order of a call's arguments
    // is unspecified, and buffer numbers must not depend on the C compiler.)
    for (int i = 0; i < bl->n_carry; i++) {
        int dst = home(E, P, bl->carry[i].inner);
        p3_copy(E, P, carry_reg(E, P, b, i), dst);
    }
    int fam = graph_block_family(g, b);
    prefetch_next(E, P, b, E->v->copy_lo[fam][P->stage], E->v->copy_hi[fam][P->stage]);
    if (bl->fwd >= 0) {
        // Backward: re-run the recomputed forward ops of this copy first.
        const pcc_block *fb = &g->blocks[bl->fwd];
        E->phase = PLAN_PHASE_RECOMPUTE;
        for (int o = fb->first_op; o < fb->first_op + fb->n_ops; o++)
            if (E->v->recomp[o]) emit_op(E, P, o, false);
        E->phase = PLAN_PHASE_BWD;
    }
    for (int o = bl->first_op; o < bl->first_op + bl->n_ops; o++) emit_op(E, P, o, last_mb);
    for (int i = 0; i < bl->n_acc; i++) {
        int G = acc_reg(E, P, b, i);
        if (G < 0) G = home(E, P, bl->acc[i].outer);
        int dx = reshard(E, P, home(E, P, bl->acc[i].inner), E->v->home_sh[bl->acc[i].outer]);
        int args[3] = {G, dx, G};
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, args, 3);
        in->code = PCC_OP_ADD;
        in->t_s = p3_memory_s(E, P, 3 * (double)P->buf[G].bytes, G);
    }
    for (int i = 0; i < bl->n_carry; i++) {
        int reg = carry_reg(E, P, b, i);
        p3_copy(E, P, home(E, P, bl->carry[i].outer), reg);
    }
    zero2_flush(E, P);
}

// Whether block b's operators make gradients that zero2_flush reduce-scatters.
static bool block_shards(const builder *E, int b) {
    const pcc_block *bl = &E->g->blocks[b];
    for (int o = bl->first_op; rs_behind(E) && o < bl->first_op + bl->n_ops; o++)
        for (int i = 0; i < E->g->ops[o].nout; i++)
            if (E->v->zero2[E->g->ops[o].out[i]]) return true;
    return false;
}

// Before a backward block's copies on this stage, per micro-batch: the sum of acc i starts at
// zero (on the stage of its last copy), or at the partial sum that arrived from the copies after
// (acc_reg), which the stage of copy 0 copies into the sum. A parameter's gradient starts at zero
// once per step (stage_prologue); its block is on one stage (layout.c refuses more).
static void acc_start(builder *E, prog *P, int b, int i, bool first) {
    int t = E->g->blocks[b].acc[i].outer, reg = acc_reg(E, P, b, i);
    if (graph_is_param_grad(E->g, t)) {
        PCC_ASSERT(reg < 0 && first);
        return;
    }
    int G = reg >= 0 ? reg : home(E, P, t);
    if (first) {
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, &G, 1);
        in->code = PCC_OP_FILL;
        in->t_s = p3_memory_s(E, P, (double)P->buf[G].bytes, G);
    } else if (reg < 0) {
        p3_copy(E, P, carry_reg(E, P, b, E->g->blocks[b].n_carry + i), G);
    }
}

static void block_range(builder *E, prog *P, int b, bool last_mb) {
    const pcc_graph *g = E->g;
    const pcc_block *bl = &g->blocks[b];
    int fb = graph_block_family(g, b), lo = E->v->copy_lo[fb][P->stage], hi = E->v->copy_hi[fb][P->stage];
    if (hi <= lo) return;
    bool bwd = bl->fwd >= 0;
    int R = (int)bl->repeat;
    // Inputs: a carried one goes into its carry register for the first copy (later ones get it
    // from the stage before); every copy reads the buffer of one that is not carried.
    bool first = bwd ? hi == R : lo == 0;
    for (int i = 0; first && i < bl->n_in; i++) {
        int inner = bl->in[i].inner, k = graph_carry_of(bl, inner, true);
        if (k < 0) continue;
        int ob = reshard(E, P, home(E, P, bl->in[i].outer), E->v->home_sh[inner]);
        p3_copy(E, P, ob, carry_reg(E, P, b, k));
    }
    for (int i = 0; i < bl->n_in; i++) {
        int inner = bl->in[i].inner;
        if (graph_carry_of(bl, inner, true) < 0) P->home[inner] = reshard(E, P, home(E, P, bl->in[i].outer), E->v->home_sh[inner]);
    }
    for (int i = 0; i < bl->n_acc; i++) acc_start(E, P, b, i, first);
    prefetch_first(E, P, b, lo, hi);
    if (block_shards(E, b) && !P->sharding) p3_event(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_SYNCED); // zero2_flush's first wait (else sharded_wait's)
    loop_open(E, P, bwd ? PLAN_LOOP_REVERSE_LAYER : PLAN_LOOP_LAYER, hi - lo);
    block_body(E, P, b, last_mb);
    loop_close(E, P);
    if ((bwd ? lo == 0 : hi == R))
        for (int i = 0; i < bl->n_out; i++) {
            int ob = home(E, P, bl->out[i].outer), k = graph_carry_of(bl, bl->out[i].inner, false);
            p3_copy(E, P, k >= 0 ? carry_reg(E, P, b, k) : home(E, P, bl->out[i].inner), ob);
        }
}

/* ---- stage boundaries ---- */

// The buffer a stage passes a relayed message on from (layout_transfers): two micro-batch slots,
// since the send of one micro-batch and the receive of the next may fall in one group of sends
// and receives (1F1B's cool-down), whose receives may land before its sends read. A value kept
// for the backward pass (a forward message relayed, layout.c's il_mid, that this stage may read
// too: T5's encoder output) lives in its home, a slot per micro-batch in flight.
static int relay_buf(builder *E, prog *P, int t) {
    if (E->v->kept[t]) return home(E, P, t);
    if (P->home[t] < 0) P->home[t] = p3_buf(E, P, t, E->v->home_sh[t], 2, 1, 0);
    return P->home[t];
}

static void p2p(builder *E, prog *P, bool bwd, bool send, bool last_mb) {
    const pcc_graph *g = E->g;
    pcc_xfer *x;
    int n = layout_transfers(E->v, P->stage, bwd, send, last_mb, &x);
    for (int i = 0; i < n; i++) {
        int buf, off = x[i].peer % E->pp - P->stage % E->pp;
        if (off == 0) continue; // interleaved: another chunk of this device, which holds the same buffer
        bool dfr = x[i].key < g->n_tensors && E->v->deferred[x[i].key];
        if (send && E->V > 1 && dfr != E->deferred_sends) continue; // sent after the device's last unit
        if (x[i].key >= g->n_tensors) {
            int k = x[i].key - g->n_tensors;
            buf = carry_reg(E, P, k / 8, k % 8);
        } else if (x[i].relay) {
            buf = relay_buf(E, P, x[i].key);
        } else {
            buf = home(E, P, x[i].key);
        }
        plan_insn *in = p3_insn(E, P, send ? PLAN_I_SEND : PLAN_I_RECV, STREAM_MAIN, &buf, 1);
        in->a = PCC_AX_PP;
        in->b = off;
        in->tag = (uint8_t)(E->V == 1 ? 0 : dfr ? TAG_DEFERRED : bwd ? TAG_BWD : TAG_FWD);
        in->t_s = p3_transfer_s(E, P, buf, in->b);
        if (!send) p3_forget(P, buf);
    }
}

// The held run goes: its inputs' collectives (where the buffer that holds a value needs one
// collective to the layout its reader wants, each value and layout once) as buckets, one per
// kind, axes and dtype (step_buckets), then its operators, which find their inputs made.
static void run_release(builder *E, prog *P, p3_held *h, bool last_mb) {
    const pcc_graph *g = E->g;
    if (!h->n) return;
    int cap = 0;
    for (int j = 0; j < h->n; j++) cap += g->ops[h->op[j]].nin;
    int *in = arena_alloc(g->arena, sizeof(int) * (size_t)cap), *out = arena_alloc(g->arena, sizeof(int) * (size_t)cap), n = 0;
    int *to = arena_alloc(g->arena, sizeof(int) * (size_t)cap);
    pcc_reshard_step *step = arena_alloc(g->arena, sizeof(pcc_reshard_step) * (size_t)cap);
    plan_shard *want = arena_alloc(g->arena, sizeof(plan_shard) * (size_t)cap);
    for (int j = 0; j < h->n; j++) {
        const pcc_op *op = &g->ops[h->op[j]];
        for (int i = 0; i < op->nin; i++) {
            int src = home(E, P, op->in[i]), k = 0;
            plan_shard w = E->v->sh[h->op[j]][i];
            pcc_reshard_step st[PCC_AXES + 1];
            if (p3_shard_eq(P->buf[src].shard, w) || cached(P, src, w) >= 0) continue;
            if (reshard_steps(P->buf[src].shard, w, g->tensors[op->in[i]].rank, st) != 1 || st[0].kind < 0 ||
                (st[0].axes & ~(1u << PCC_AX_TP | 1u << PCC_AX_TQ)))
                continue;
            while (k < n && !(in[k] == src && p3_shard_eq(want[k], w))) k++;
            if (k < n) continue;
            in[n] = src, want[n] = w, step[n] = st[0], to[n] = p3_charged_to(g, h->op[j], i);
            out[n++] = p3_buf(E, P, op->in[i], st[0].after, 1, 1, 0);
        }
    }
    bool *done = arena_alloc(g->arena, (size_t)(n ? n : 1));
    pcc_group_shape *grp = arena_alloc(g->arena, sizeof(pcc_group_shape) * (size_t)(n ? n : 1));
    for (int k = 0; k < n; k++) grp[k] = p3_axes_group(E, step[k].axes);
    p3_run_credit(E, P, step, in, out, grp, to, n);
    step_buckets(E, P, step, in, out, done, n, STREAM_MAIN, 0);
    for (int k = 0; k < n; k++) *VEC_PUSH(g->arena, P->cache, P->n_cache, P->cap_cache) = (cache_entry){in[k], want[k], out[k]};
    for (int j = 0; j < h->n; j++) emit_op(E, P, h->op[j], last_mb);
    p3_release(E, h);
}

/* ---- phases ---- */

// One micro-batch's forward (bwd false) or backward pass on this stage: receive, the stage's
// top-level ops and block ranges in program order, send. part: PCC_PART_RECV, _COMPUTE, _SEND,
// or all three (an interleaved schedule issues them apart).

static void pass_part(builder *E, prog *P, int delta, bool bwd, bool last_mb, int part) {
    const pcc_graph *g = E->g;
    E->delta = delta;
    E->phase = bwd ? PLAN_PHASE_BWD : PLAN_PHASE_FWD;
    P->n_cache = 0;
    if (part & PCC_PART_RECV) p2p(E, P, bwd, false, last_mb);
    const bool *waits = part & PCC_PART_COMPUTE ? p3_run_plan(E, P, bwd) : NULL;
    p3_held *h = &P->held;
    for (int o = bwd ? g->n_fwd_ops : 0; (part & PCC_PART_COMPUTE) && o < (bwd ? g->n_ops : g->n_fwd_ops); o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != (bwd ? PCC_PHASE_BWD : PCC_PHASE_FWD)) continue;
        if (op->block < 0) {
            if (!on_stage(E, o, P->stage)) continue;
            if (h->n && (!p3_may_wait(E, o) || p3_reads_held(E, h, o))) run_release(E, P, h, last_mb);
            if (!waits[o]) {
                emit_op(E, P, o, last_mb);
                continue;
            }
            if (!h->op) *h = p3_held_new(E);
            p3_hold(E, h, o, (p3_sig){0});
            continue;
        }
        run_release(E, P, h, last_mb);
        block_range(E, P, op->block, last_mb);
        o = g->blocks[op->block].first_op + g->blocks[op->block].n_ops - 1;
    }
    run_release(E, P, h, last_mb);
    if (part & PCC_PART_SEND) p2p(E, P, bwd, true, last_mb);
    P->n_cache = 0;
    E->phase = PLAN_PHASE_NONE;
}


// The updated shards the optimizer left (ZeRO-1 and 2) go into their homes: one collective per
// kind, axes and dtype over all of them (a block copy's, or a stretch of top-level parameters'),
// as Megatron-LM's distributed optimizer and FSDP gather a bucket, not a parameter, at a time.
// A chain of several steps, or a local one, goes on its own.
static void post_flush(builder *E, prog *P) {
    int n = P->n_post;
    if (!n) return;
    P->n_post = 0;
    int *in = arena_alloc(E->g->arena, sizeof(int) * (size_t)n), *out = arena_alloc(E->g->arena, sizeof(int) * (size_t)n);
    bool *done = arena_alloc(E->g->arena, (size_t)n);
    pcc_reshard_step *step = arena_alloc(E->g->arena, sizeof(pcc_reshard_step) * (size_t)n);
    for (int k = 0; k < n; k++) {
        pcc_reshard_step s[PCC_AXES + 1];
        in[k] = P->post[k][0], out[k] = P->post[k][1];
        const ebuf *b = &P->buf[in[k]];
        int m = reshard_steps(b->shard, P->buf[out[k]].shard, E->g->tensors[b->tensor].rank, s);
        done[k] = m != 1 || s[0].kind < 0;
        if (done[k]) reshard_to(E, P, in[k], P->buf[out[k]].shard, out[k]);
        else step[k] = s[0];
    }
    step_buckets(E, P, step, in, out, done, n, STREAM_MAIN, 0);
}

static void optimizer(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    E->delta = 0;
    E->phase = PLAN_PHASE_OPT;
    E->post_later = true;
    for (int o = g->n_fwd_ops; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != PCC_PHASE_OPT) continue;
        if (op->block < 0) {
            if (on_stage(E, o, P->stage) || E->v->ostage[o] == PCC_STAGE_ALL) emit_op(E, P, o, false);
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        int fb = graph_block_family(g, op->block), lo = E->v->copy_lo[fb][P->stage], hi = E->v->copy_hi[fb][P->stage];
        if (hi > lo) {
            post_flush(E, P);
            loop_open(E, P, PLAN_LOOP_LAYER, hi - lo);
            for (int k = bl->first_op; k < bl->first_op + bl->n_ops; k++) emit_op(E, P, k, false);
            post_flush(E, P);
            loop_close(E, P);
        }
        o = bl->first_op + bl->n_ops - 1;
    }
    post_flush(E, P);
    E->post_later = false;
}

// Parameters used on several stages: the owner sends the updated value to the others.
static void share_params(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    bool *users = arena_alloc(g->arena, sizeof(bool) * (size_t)E->ns);
    bool *dev = arena_alloc(g->arena, sizeof(bool) * (size_t)E->pp);
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].kind != PCC_T_PARAM || g->tensors[t].block >= 0) continue;
        int owner = E->v->tstage[t];
        if (owner < 0) continue; // an interlaced operator's: a shard on every stage
        memset(users, 0, sizeof(bool) * (size_t)E->ns);
        memset(dev, 0, sizeof(bool) * (size_t)E->pp);
        for (int o = 0; o < g->n_ops; o++) {
            const pcc_op *op = &g->ops[o];
            if (op->block >= 0 || op->phase == PCC_PHASE_OPT) continue;
            for (int i = 0; i < op->nin; i++)
                if (op->in[i] == t && E->v->ostage[o] >= 0) users[E->v->ostage[o]] = true;
        }
        // Once per device that uses it (interleaved: its chunks share the buffer).
        int od = owner % E->pp, me = P->stage % E->pp;
        for (int s = 0; s < E->ns; s++) {
            int d = s % E->pp;
            if (d == od || !users[s] || dev[d]) continue;
            dev[d] = true;
            if (me != od && me != d) continue;
            int buf = home(E, P, t);
            plan_insn *in = p3_insn(E, P, me == od ? PLAN_I_SEND : PLAN_I_RECV, STREAM_MAIN, &buf, 1);
            in->a = PCC_AX_PP;
            in->b = me == od ? d - od : od - d;
            in->tag = (uint8_t)(E->V > 1 ? TAG_SHARE : 0);
            in->t_s = p3_transfer_s(E, P, buf, in->b);
        }
    }
}

// A stage's tables of buffers: its homes per tensor and its carry registers, all unmade.
static void stage_tables(builder *E, int **home, int ***carry) {
    const pcc_graph *g = E->g;
    *home = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    *carry = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    for (int t = 0; t < g->n_tensors; t++) (*home)[t] = -1;
    for (int b = 0; b < g->n_blocks; b++) {
        int nr = layout_block_regs(&g->blocks[b]);
        (*carry)[b] = arena_alloc(g->arena, sizeof(int) * (size_t)(nr + 1));
        for (int k = 0; k < nr; k++) (*carry)[b][k] = -1;
    }
}

// Interleaved: makes model chunk c (on this device) the stage being emitted. The chunks of a
// device keep their own buffers for the tensors of repeated blocks (each holds other copies)
// and their own carry registers, and share one buffer per top-level tensor.
static void chunk_enter(builder *E, prog *P, int c) {
    const pcc_graph *g = E->g;
    if (P->home && c == P->stage) return;
    int *to = P->chunk_home[c / E->pp];
    if (P->home && P->home != to)
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].block < 0) to[t] = P->home[t];
    bucket_flush(E, P);
    P->home = to;
    P->carry = P->chunk_carry[c / E->pp];
    P->stage = c;
    P->n_cache = 0;
}

// What a stage zeroes at the start of the step.
static void stage_prologue(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    // Block-summed parameter gradients start at zero once per step.
    for (int b = 0; b < g->n_blocks; b++)
        for (int i = 0; i < g->blocks[b].n_acc; i++) {
            int t = g->blocks[b].acc[i].outer, fb = graph_block_family(g, b);
            if (!graph_is_param_grad(g, t)) continue;
            if (E->v->copy_hi[fb][P->stage] <= E->v->copy_lo[fb][P->stage]) continue;
            int G = home(E, P, t);
            plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, &G, 1);
            in->code = PCC_OP_FILL;
            in->t_s = p3_memory_s(E, P, (double)P->buf[G].bytes, G);
        }
    // Deferred contributions summed here read zeros until theirs arrives after the last micro-batch.
    for (int t = 0; t < g->n_tensors; t++) {
        bool here = false;
        for (int o = 0; E->v->deferred[t] && o < g->n_ops && !here; o++)
            for (int i = 0; i < g->ops[o].nin; i++) here |= g->ops[o].in[i] == t && E->v->ostage[o] == P->stage;
        if (!here) continue;
        int G = home(E, P, t);
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, &G, 1);
        in->code = PCC_OP_FILL;
        in->t_s = p3_memory_s(E, P, (double)P->buf[G].bytes, G);
    }
}

// After the last backward pass: wait for the gradient synchronization, the optimizer, and the
// parameters shared with other stages.
static void epilogue(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    bucket_flush(E, P);
    P->sharding = false; // the wait below covers them
    for (int t = 0; t < g->n_tensors; t++)
        if (P->shard_acc[t] >= 0) P->home[t] = P->shard_acc[t]; // ZeRO-2: the optimizer reads the summed shard
    E->delta = 0;
    if (P->used_sync) {
        p3_event(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_SYNCED);
        p3_event(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_SYNCED);
    }
    if (E->V == 1) {
        optimizer(E, P);
    } else {
        int d = P->stage % E->pp;
        for (int v = 0; v < E->V; v++) {
            chunk_enter(E, P, v * E->pp + d);
            optimizer(E, P);
        }
    }
    share_params(E, P);
}

// Interleaved, after the device's last unit: the gradient contributions summed once per step,
// in the group of the last step's sends (pipeline.c says why). Their buffers are top-level
// tensors', which the device's chunks share.
static void deferred_sends(builder *E, prog *P, int d) {
    int at = P->stage;
    E->deferred_sends = true;
    E->phase = PLAN_PHASE_BWD;
    E->delta = E->M - 1;
    for (int c = d; c < E->ns; c += E->pp) {
        P->stage = c;
        p2p(E, P, true, true, true);
    }
    E->deferred_sends = false;
    E->phase = PLAN_PHASE_NONE;
    P->stage = at;
    E->delta = 0;
}

/* ---- phase 3's vocabulary for schedule.c ---- */

int p3_home(builder *E, prog *P, int t) { return home(E, P, t); }
void p3_emit_op(builder *E, prog *P, int o, bool last_mb) { emit_op(E, P, o, last_mb); }
void p3_reshard_to(builder *E, prog *P, int src, plan_shard want, int dst) { reshard_to(E, P, src, want, dst); }
void p3_bucket_flush(builder *E, prog *P) { bucket_flush(E, P); }
void p3_loop(builder *E, prog *P, int count) { loop_open(E, P, PLAN_LOOP_MB, count); }
void p3_loop_end(builder *E, prog *P) { loop_close(E, P); }

// A stage's program up to its schedule: its tables of buffers, the ZeRO-2 accumulators, what it
// zeroes at the start of the step (schedule.c's p3_program runs this, the schedule, p3_epilogue).
void p3_begin(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    int d = P->stage;
    E->phase = PLAN_PHASE_NONE;
    if (E->V > 1) {
        P->chunk_home = arena_alloc(g->arena, sizeof(int *) * (size_t)E->V);
        P->chunk_carry = arena_alloc(g->arena, sizeof(int **) * (size_t)E->V);
        for (int v = 0; v < E->V; v++) stage_tables(E, &P->chunk_home[v], &P->chunk_carry[v]);
        P->home = NULL;
        chunk_enter(E, P, d);
        zero2_accumulators(E, P);
        for (int v = 0; v < E->V; v++) {
            chunk_enter(E, P, v * E->pp + d);
            stage_prologue(E, P);
        }
    } else {
        stage_tables(E, &P->home, &P->carry);
        zero2_accumulators(E, P);
        stage_prologue(E, P);
    }
}

void p3_epilogue(builder *E, prog *P) { epilogue(E, P); }
void p3_pass(builder *E, prog *P, int delta, bool bwd, bool last_mb, int part) { pass_part(E, P, delta, bwd, last_mb, part); }
void p3_chunk_enter(builder *E, prog *P, int c) { chunk_enter(E, P, c); }
void p3_deferred_sends(builder *E, prog *P, int d) { deferred_sends(E, P, d); }
