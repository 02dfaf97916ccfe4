/*
 * buffers.c: where a program's buffers live in a rank's arena, and what piece of its tensor each
 * holds. A buffer has slots per micro-batch and per layer (plan_buffer's mb_slots, layer_slots);
 * rt_slot_addr finds one. With f64 (rk->scale 2) every offset, stride and size is doubled. A
 * buffer of a tensor holds the piece its shard names on the rank (rt_shard_box); a scratch buffer
 * is a flat vector. The interpreter (interp.c), the run-time guards (guard.c) and checkpoints
 * (st.c) read and write buffers through these.
 */
#include "rt.h"

#include <string.h>

void rt_shard_box(const plan *p, const plan_tensor *t, plan_shard s, const uint32_t *coord, rt_box *box) {
    memset(box, 0, sizeof *box);
    box->rank = t->rank;
    for (int d = 0; d < t->rank; d++) {
        int64_t idx = 0, ways = 1;
        for (uint32_t a = 0; a < p->meta.n_axes; a++)
            if (s.map[a] == PLAN_SHARD_D(d)) idx = idx * p->meta.mesh[a] + coord[a], ways *= p->meta.mesh[a];
        box->full[d] = t->shape[d];
        box->shape[d] = t->shape[d] / ways;
        box->start[d] = idx * box->shape[d];
    }
}

// With f64 (rk->scale 2) every offset, stride and size is doubled: an f32 element's place holds
// a double, and an i32 buffer keeps its values in the first half of its doubled place.
uint8_t *rt_slot_addr(const rt_rank *rk, const plan_buffer *b, uint32_t mb, uint32_t l) {
    return rk->arena + (b->offset + (uint64_t)(mb % b->mb_slots) * b->mb_stride +
                        (uint64_t)(l % b->layer_slots) * b->layer_stride) * rk->scale;
}

uint64_t rt_slot_bytes(const rt_rank *rk, const plan_buffer *b) { return b->bytes * rk->scale; }

// The type buffer b's elements have in the arena (f32 ones are doubles with f64).
uint32_t rt_elem_dtype(const rt_rank *rk, const plan_buffer *b) { return b->dtype == 0 && rk->scale == 2 ? RT_DTYPE_F64 : b->dtype; }

void rt_view_of_box(rt_view *v, const rt_box *box, void *data, uint8_t dtype) {
    memset(v, 0, sizeof *v);
    v->data = data;
    v->dtype = dtype;
    v->rank = box->rank;
    v->once = true;
    for (int d = 0; d < PLAN_MAX_RANK; d++) {
        bool in = d < box->rank;
        v->shape[d] = in ? box->shape[d] : 1;
        v->full[d] = in ? box->full[d] : 1;
        v->start[d] = in ? box->start[d] : 0;
    }
}

// A scratch buffer as a flat vector of its dtype's elements.
void rt_scratch_box(const plan_buffer *b, rt_box *box) {
    memset(box, 0, sizeof *box);
    box->rank = 1;
    uint32_t es = plan_dtype_bytes(b->dtype); // 2 for f16/bf16 scratch (the cuda backend)
    box->shape[0] = box->full[0] = (int64_t)(b->bytes / (es ? es : 4));
}

void rt_buffer_view(const rt_run *r, const rt_rank *rk, uint32_t bi, uint32_t mb, uint32_t l, rt_view *v) {
    const plan_buffer *b = &rk->pg->buffers[bi];
    rt_box box;
    if (b->tensor == PLAN_NONE) rt_scratch_box(b, &box);
    else rt_shard_box(r->p, &r->p->tensors[b->tensor], b->shard, rk->coord, &box);
    rt_view_of_box(v, &box, rt_slot_addr(rk, b, mb, l), b->dtype);
}

int rt_buffer_read(const rt_run *r, const rt_rank *rk, uint32_t bi, uint32_t mb, uint32_t l, void *host, char *err, size_t err_n) {
    const plan_buffer *b = &rk->pg->buffers[bi];
    return rt_backend_download(r->be, rk->rank, host, rt_slot_addr(rk, b, mb, l), rt_slot_bytes(rk, b), err, err_n);
}

int rt_buffer_write(const rt_run *r, const rt_rank *rk, uint32_t bi, uint32_t mb, uint32_t l, const void *host, char *err, size_t err_n) {
    const plan_buffer *b = &rk->pg->buffers[bi];
    return rt_backend_upload(r->be, rk->rank, rt_slot_addr(rk, b, mb, l), host, rt_slot_bytes(rk, b), err, err_n);
}
