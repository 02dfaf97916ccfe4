/*
 * pipeline.c: the micro-batch schedules: GPipe, 1F1B, and Megatron-LM's interleaved 1F1B.
 *
 * A schedule is, per pipeline device, the order of its units: the forward or the backward pass
 * of one micro-batch on one model chunk (a stage; with V virtual stages, chunk c runs on
 * device c mod pp). pipeline_units lists them as phase 3 (preserve.c) walks them, with the
 * loops over micro-batches that keep a plan small (a unit inside a loop names its micro-batch
 * relative to the loop's iteration); preserve.c emits each unit's receives, operators and
 * sends, and knows nothing of the order. Plain schedules, stage s of pp, M micro-batches:
 *
 *   GPipe   loop M { F(mb) }  loop M-1 { B(mb) }  B(M-1)
 *   1F1B    w = min(pp - s - 1, M) forward passes first (the warm-up), then F(mb + w) B(mb)
 *           in one loop (steady state), then the last w backward passes (cool-down); the last
 *           micro-batch's backward always stands alone, out of any loop, so that its gradients
 *           are final there and their synchronization overlaps the rest of the backward pass.
 *
 * Interleaved 1F1B (Narayanan et al. SC21 section 2.2). Forward unit k (0 <= k < M V) runs local
 * chunk v = (k mod pV) / p for micro-batch (k / pV) p + k mod p: the micro-batches go in groups
 * of p through chunk 0, then the same group through chunk 1, ...; backward unit k the same with
 * v counted down from V-1. Device d first runs w = min((p - d - 1) 2 + (V - 1) p, M V) forward
 * units (warm-up), then alternates forward unit k + w and backward unit k (steady 1F1B), then
 * runs the rest of the backward units (cool-down). As Megatron-LM does, a step computes its
 * units, then sends what they made and receives what the next step's units need, as one group
 * of sends and receives (computing a forward and a backward unit before either sends is what
 * keeps blocking sends from deadlocking): so interleaved units come in parts (receive,
 * compute, send), issued apart. Units are unrolled (O(M V) of them: the plan's loops count
 * micro-batches by one, and the interleaved order steps them by p per group). The gradient
 * contributions summed once per step (preserve.c's deferred ones) go in the group of the last
 * step's sends: sent at their chunk's last backward unit, a blocking send would wait for a
 * receiver that takes them only at its own last unit, while the two still exchange the other
 * micro-batches.
 *
 * Why messages of one tag match in order: every device runs its forward units in the same order
 * of (v, micro-batch), and its backward units in the same order of (V-1-v, micro-batch). The
 * activation from chunk c to c+1 goes from device c mod p, local chunk v, to device (c+1) mod p,
 * local chunk v (or v+1 when c+1 wraps to device 0); for a fixed pair of devices that is a fixed,
 * order-keeping map of v, so the sender sends in the order the receiver receives; gradients
 * likewise. A pair of devices carries both kinds when p = 2 (and the wrap-around from device p-1
 * to 0 carries chunk boundaries), in orders that differ on the two sides: hence preserve.c's
 * message tags (one for activations, one for gradients).
 *
 * pipeline_in_flight says how many micro-batches a chunk holds between its forward and its
 * backward pass at once (the slots its kept activations need), from the same order.
 */
#include "plancc.h"

typedef struct units {
    pcc_arena *a;
    pcc_unit *v;
    int n, cap;
} units;

static void push(units *U, pcc_unit u) { *VEC_PUSH(U->a, U->v, U->n, U->cap) = u; }

static void loop(units *U, int count) { push(U, (pcc_unit){.kind = PCC_UNIT_LOOP, .count = count}); }
static void end(units *U) { push(U, (pcc_unit){.kind = PCC_UNIT_END}); }

static void pass(units *U, bool bwd, int chunk, int mb, bool last) {
    push(U, (pcc_unit){.kind = bwd ? PCC_UNIT_BWD : PCC_UNIT_FWD, .chunk = chunk, .mb = mb, .part = PCC_PART_ALL, .last = last});
}

static void gpipe(units *U, int s, int M) {
    loop(U, M);
    pass(U, false, s, 0, false);
    end(U);
    if (M > 1) {
        loop(U, M - 1);
        pass(U, true, s, 0, false);
        end(U);
    }
    pass(U, true, s, M - 1, true);
}

static void one_f_one_b(units *U, int s, int pp, int M) {
    int w = pp > 1 ? (pp - s - 1 < M ? pp - s - 1 : M) : 0, steady = M - w; // F(mb + w), B(mb)
    if (w > 0) {
        loop(U, w);
        pass(U, false, s, 0, false);
        end(U);
    }
    if (w == 0) {
        if (steady > 1) {
            loop(U, steady - 1);
            pass(U, false, s, w, false);
            pass(U, true, s, 0, false);
            end(U);
        }
        pass(U, false, s, M - 1, false);
        pass(U, true, s, M - 1, true);
        return;
    }
    if (steady > 0) {
        loop(U, steady);
        pass(U, false, s, w, false);
        pass(U, true, s, 0, false);
        end(U);
    }
    if (w > 1) {
        loop(U, w - 1);
        pass(U, true, s, M - w, false);
        end(U);
    }
    pass(U, true, s, M - 1, true);
}

/* ---- interleaved ---- */

// The forward units device d runs before its first backward unit (the warm-up).
static int warmup_units(const pcc_pipeline *p, int d) {
    int n = p->M * p->V, w = (p->pp - d - 1) * 2 + (p->V - 1) * p->pp;
    return w < n ? w : n;
}

// One part of unit u (forward or backward) of device d; nothing when u is past either end.
static void unit_part(units *U, const pcc_pipeline *p, int d, int u, bool bwd, int part) {
    if (u < 0 || u >= p->M * p->V) return;
    int pp = p->pp, V = p->V, v = (u % (pp * V)) / pp;
    int chunk = (bwd ? V - 1 - v : v) * pp + d, mb = (u / (pp * V)) * pp + u % pp;
    push(U, (pcc_unit){.kind = bwd ? PCC_UNIT_BWD : PCC_UNIT_FWD, .chunk = chunk, .mb = mb, .part = part,
                       .last = bwd && mb == p->M - 1});
}

static void interleaved(units *U, const pcc_pipeline *p, int d) {
    int n = p->M * p->V, w = warmup_units(p, d);
    unit_part(U, p, d, 0, false, PCC_PART_RECV);
    for (int k = 0; k < n + w; k++) {
        int f = k < n ? k : -1, b = k - w; // this step's forward and backward units (-1, < 0: none)
        unit_part(U, p, d, f, false, PCC_PART_COMPUTE);
        unit_part(U, p, d, b, true, PCC_PART_COMPUTE);
        unit_part(U, p, d, f, false, PCC_PART_SEND);
        unit_part(U, p, d, b, true, PCC_PART_SEND);
        if (f >= 0) unit_part(U, p, d, f + 1, false, PCC_PART_RECV);
        unit_part(U, p, d, b + 1, true, PCC_PART_RECV);
    }
    push(U, (pcc_unit){.kind = PCC_UNIT_DEFERRED, .chunk = d, .mb = p->M - 1, .part = PCC_PART_SEND, .last = true});
}

int pipeline_units(pcc_arena *a, const pcc_pipeline *p, int d, pcc_unit **out) {
    units U = {.a = a};
    if (p->V > 1) interleaved(&U, p, d);
    else if (p->schedule == PCC_PIPE_GPIPE && p->pp > 1) gpipe(&U, d, p->M);
    else one_f_one_b(&U, d, p->pp, p->M);
    *out = U.v;
    return U.n;
}

int *pipeline_in_flight(pcc_arena *a, const pcc_pipeline *p) {
    int ns = p->pp * p->V, *most = arena_alloc(a, sizeof(int) * (size_t)(ns + 1));
    if (p->V == 1) {
        for (int s = 0; s < ns; s++) {
            int k = p->pp - s;
            most[s] = p->schedule == PCC_PIPE_GPIPE && p->pp > 1 ? p->M : k < p->M ? k : p->M;
        }
        return most;
    }
    // Interleaved: walk each device's units (a chunk's in-flight micro-batches are always
    // consecutive, so slot mb mod that count is free when a forward pass fills it).
    int *now = arena_alloc(a, sizeof(int) * (size_t)(ns + 1));
    for (int d = 0; d < p->pp; d++) {
        pcc_unit *u;
        int n = pipeline_units(a, p, d, &u);
        for (int i = 0; i < n; i++) {
            if (!(u[i].part & PCC_PART_COMPUTE) || (u[i].kind != PCC_UNIT_FWD && u[i].kind != PCC_UNIT_BWD)) continue;
            now[u[i].chunk] += u[i].kind == PCC_UNIT_BWD ? -1 : 1;
            if (now[u[i].chunk] > most[u[i].chunk]) most[u[i].chunk] = now[u[i].chunk];
        }
    }
    return most;
}
