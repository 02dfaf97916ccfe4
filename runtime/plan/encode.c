/*
 * encode.c: a plan in memory to the bytes of its file (plan_encode), and to a file (plan_write).
 *
 * The encoder lays out the header, the section table and the sections in the order plan.h and
 * format.h give, writing the canonical form (format.h) into a growable buffer, then fills the
 * table's offsets, sizes and CRCs and the header's. It refuses a plan that fails plan_validate
 * (check_struct.c) or that was read for one rank (its other programs are not there), and one
 * whose sections outgrow the format's u32 sizes. plan_write goes through file.c's plan_out (a
 * temporary file, fsync and a rename, so a reader sees the old file or the whole new one; a
 * device or a FIFO written in place).
 */
#include "format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- little-endian writing into a growable buffer ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

// Appends n bytes from src, or n zeros when src is NULL.
static void w_bytes(wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (n > w->cap - w->n) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap - w->n < n) {
            if (cap > SIZE_MAX / 2) {
                w->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->oom = true;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    if (src) memcpy(w->p + w->n, src, n);
    else memset(w->p + w->n, 0, n);
    w->n += n;
}

static void put_u16(uint8_t *d, uint16_t v) {
    d[0] = (uint8_t)v;
    d[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *d, uint64_t v) {
    for (int i = 0; i < 8; i++) d[i] = (uint8_t)(v >> (8 * i));
}
static void w_u8(wbuf *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(wbuf *w, uint16_t v) {
    uint8_t b[2];
    put_u16(b, v);
    w_bytes(w, b, 2);
}
static void w_u32(wbuf *w, uint32_t v) {
    uint8_t b[4];
    put_u32(b, v);
    w_bytes(w, b, 4);
}
static void w_u64(wbuf *w, uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    w_bytes(w, b, 8);
}
static void w_f64(wbuf *w, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    w_u64(w, u);
}
static void w_f32(wbuf *w, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    w_u32(w, u);
}
static void w_zero(wbuf *w, size_t n) { w_bytes(w, NULL, n); }
static void w_pad8(wbuf *w) { w_zero(w, (8 - w->n % 8) % 8); }

// A name held in a char array of n bytes: its bytes up to the NUL, then zeros.
static void w_name(wbuf *w, const char *s, size_t n) {
    size_t len = strnlen(s, n);
    w_bytes(w, s, len);
    w_zero(w, n - len);
}

/* ---- the encoder ---- */

// The strings go into STRINGS in this order: model name, options, notes, tensor names, program
// names.
// Writing the other sections in the same order, str_next gives each string's offset.
static uint32_t str_next(uint64_t *cursor, const char *s) {
    if (!s) return PLAN_NONE;
    uint64_t off = *cursor;
    *cursor += strlen(s) + 1;
    return (uint32_t)off;
}

static void w_string(wbuf *w, const char *s) {
    if (s) w_bytes(w, s, strlen(s) + 1);
}

// STRINGS; false if the strings do not fit in u32 offsets.
static bool enc_strings(wbuf *w, const plan *p) {
    size_t start = w->n;
    w_zero(w, 8);
    w_string(w, p->meta.model_name);
    w_string(w, p->meta.options);
    w_string(w, p->meta.notes);
    for (uint32_t i = 0; i < p->n_tensors; i++) w_string(w, p->tensors[i].name);
    for (uint32_t i = 0; i < p->n_programs; i++) w_string(w, p->programs[i].name);
    size_t n = w->n - start - 8;
    if (n >= UINT32_MAX) return false;
    if (!w->oom) put_u32(w->p + start, (uint32_t)n);
    w_pad8(w);
    return true;
}

static void enc_meta(wbuf *w, const plan *p, uint64_t *sc) {
    const plan_meta *m = &p->meta;
    w_name(w, m->compiler, sizeof(m->compiler));
    w_u32(w, str_next(sc, m->model_name));
    w_u32(w, str_next(sc, m->options));
    w_u32(w, m->world);
    w_u32(w, m->n_axes);
    for (uint32_t i = 0; i < PLAN_MAX_AXES; i++) w_u32(w, i < m->n_axes ? m->mesh[i] : 0);
    for (uint32_t i = 0; i < PLAN_MAX_AXES; i++) w_name(w, i < m->n_axes ? m->axis_names[i] : "", 8);
    w_u32(w, m->micro_batches);
    w_u32(w, (uint32_t)m->schedule);
    w_u32(w, m->zero_stage);
    w_u32(w, m->loss);
    w_f64(w, m->est_step_s);
    w_f64(w, m->est_peak_bytes);
    w_u32(w, str_next(sc, m->notes));
    w_u32(w, 0);
    w_f64(w, m->model_flops);
    w_f64(w, m->device_peak_flops);
}

static void enc_tensors(wbuf *w, const plan *p, uint64_t *sc) {
    w_u32(w, p->n_tensors);
    w_u32(w, 0);
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *t = &p->tensors[i];
        w_u32(w, str_next(sc, t->name));
        w_u8(w, t->dtype);
        w_u8(w, t->kind);
        w_u8(w, t->rank);
        w_u8(w, t->source);
        w_u32(w, t->copies);
        w_u16(w, t->zigzag);
        w_u8(w, t->zigzag ? t->zigzag_dim : 0);
        w_u8(w, 0);
        for (int d = 0; d < PLAN_MAX_RANK; d++) w_u64(w, d < t->rank ? (uint64_t)t->shape[d] : 0);
        unsigned used = plan_source_args(t->kind, t->source);
        w_f64(w, used >= 1 ? t->a : 0);
        w_f64(w, used >= 2 ? t->b : 0);
    }
}

static void enc_groups(wbuf *w, const plan *p) {
    uint64_t members = 0;
    for (uint32_t i = 0; i < p->n_groups; i++) members += p->groups[i].n_ranks;
    w_u32(w, p->n_groups);
    w_u32(w, (uint32_t)members);
    for (uint32_t i = 0; i < p->n_groups; i++) {
        w_u32(w, p->groups[i].axes);
        w_u32(w, p->groups[i].n_ranks);
    }
    for (uint32_t i = 0; i < p->n_groups; i++)
        for (uint32_t j = 0; j < p->groups[i].n_ranks; j++) w_u32(w, p->groups[i].ranks[j]);
}

static void enc_ranks(wbuf *w, const plan *p) {
    w_u32(w, p->n_ranks);
    w_u32(w, 0);
    for (uint32_t i = 0; i < p->n_ranks; i++) w_u32(w, p->ranks[i].program);
}

static void enc_buffer(wbuf *w, const plan_buffer *b) {
    w_u32(w, b->tensor);
    w_u8(w, b->dtype);
    w_u8(w, b->flags);
    w_zero(w, 2);
    w_bytes(w, b->shard.map, PLAN_MAX_AXES);
    w_u32(w, b->layer_base);
    w_u32(w, 0);
    w_u64(w, b->offset);
    w_u64(w, b->bytes);
    w_u32(w, b->mb_slots);
    w_u32(w, b->layer_slots);
    w_u64(w, b->mb_stride);
    w_u64(w, b->layer_stride);
}

static void enc_attrs(wbuf *w, const plan_attrs *a) {
    for (int i = 0; i < 8; i++) w_f64(w, a->f[i]);
    for (int i = 0; i < 8; i++) w_u64(w, (uint64_t)a->i[i]);
    for (int i = 0; i < PLAN_MAX_RANK; i++) w_u32(w, (uint32_t)a->perm[i]);
    for (int i = 0; i < 6; i++) w_u32(w, (uint32_t)a->win[i]);
}

static void enc_insn(wbuf *w, plan_insn in) {
    w_u8(w, in.kind);
    w_u8(w, in.stream);
    w_u16(w, in.code);
    w_u16(w, in.nargs);
    w_u16(w, (uint16_t)in.mb_delta);
    w_u32(w, in.args);
    w_u32(w, (uint32_t)in.a);
    w_u32(w, (uint32_t)in.b);
    w_u32(w, in.attrs);
    w_f32(w, in.t_s);
    w_u8(w, in.phase);
    w_u8(w, in.tag);
    w_u16(w, (uint16_t)in.layer_delta);
}

// PROGRAM k: the head, then buffers, attrs, instructions (canonical) and their arguments in
// instruction order. False if the arguments do not fit in u32 offsets.
static bool enc_program(wbuf *w, const plan *p, uint32_t k, uint64_t *sc) {
    const plan_program *pg = &p->programs[k];
    uint64_t nargs = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) nargs += pg->insns[i].nargs;
    if (nargs >= UINT32_MAX) return false;
    w_u32(w, k);
    w_u32(w, str_next(sc, pg->name));
    w_u64(w, pg->arena_bytes);
    w_u32(w, pg->n_streams);
    w_u32(w, pg->n_events);
    for (uint32_t s = 0; s < 8; s++) w_u32(w, s < pg->n_streams ? (uint32_t)pg->priority[s] : 0);
    w_u32(w, pg->n_buffers);
    w_u32(w, pg->n_attrs);
    w_u32(w, pg->n_insns);
    w_u32(w, (uint32_t)nargs);
    for (uint32_t i = 0; i < pg->n_buffers; i++) enc_buffer(w, &pg->buffers[i]);
    for (uint32_t i = 0; i < pg->n_attrs; i++) enc_attrs(w, &pg->attrs[i]);
    uint32_t at = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        enc_insn(w, plan_insn_canonical(pg->insns[i], at));
        at += pg->insns[i].nargs;
    }
    for (uint32_t i = 0; i < pg->n_insns; i++)
        for (uint32_t j = 0; j < pg->insns[i].nargs; j++) w_u32(w, pg->args[pg->insns[i].args + j]);
    w_pad8(w);
    return true;
}

// Writes table entry i for the section that runs from `start` to the end of w.
static bool table_entry(wbuf *w, uint32_t i, uint32_t kind, uint32_t index, size_t start) {
    if (w->oom) return true;
    size_t bytes = w->n - start;
    if (bytes > UINT32_MAX) return false;
    uint8_t *e = w->p + PLAN_HEADER_BYTES + (size_t)i * TABLE_ENTRY_BYTES;
    put_u32(e, kind);
    put_u32(e + 4, index);
    put_u64(e + 8, start);
    put_u32(e + 16, (uint32_t)bytes);
    put_u32(e + 20, plan_crc32c(0, w->p + start, bytes));
    return true;
}

static void header_fill(uint8_t *h, const plan *p, uint32_t count, size_t file_n) {
    memcpy(h, PLAN_MAGIC, 8);
    put_u32(h + 8, PLAN_VERSION);
    put_u32(h + 12, PLAN_HEADER_BYTES);
    put_u64(h + 16, file_n);
    put_u32(h + 24, count);
    put_u32(h + 28, plan_crc32c(0, h + PLAN_HEADER_BYTES, (size_t)count * TABLE_ENTRY_BYTES));
    put_u64(h + 32, p->meta.model_hash);
    put_u64(h + 40, p->meta.cluster_hash);
    put_u64(h + 48, p->meta.options_hash);
    put_u32(h + 56, plan_crc32c(0, h, 56));
    put_u32(h + 60, 0);
}

// Every section in file order; false if one does not fit the format's u32 sizes.
static bool enc_sections(wbuf *w, const plan *p) {
    uint64_t sc = 0;
    size_t start = w->n;
    enc_meta(w, p, &sc);
    bool ok = table_entry(w, 0, PLAN_SEC_META, 0, start);
    start = w->n;
    ok = ok && enc_strings(w, p) && table_entry(w, 1, PLAN_SEC_STRINGS, 0, start);
    start = w->n;
    enc_tensors(w, p, &sc);
    ok = ok && table_entry(w, 2, PLAN_SEC_TENSORS, 0, start);
    start = w->n;
    enc_groups(w, p);
    w_pad8(w);
    ok = ok && table_entry(w, 3, PLAN_SEC_GROUPS, 0, start);
    start = w->n;
    enc_ranks(w, p);
    w_pad8(w);
    ok = ok && table_entry(w, 4, PLAN_SEC_RANKS, 0, start);
    for (uint32_t k = 0; ok && k < p->n_programs; k++) {
        start = w->n;
        ok = enc_program(w, p, k, &sc) && table_entry(w, FIXED_SECTIONS + k, PLAN_SEC_PROGRAM, k, start);
    }
    return ok;
}

plan_status plan_encode(const plan *p, uint8_t **out, size_t *n, char *err, size_t err_n) {
    *out = NULL;
    *n = 0;
    plan_status st = plan_validate(p, err, err_n);
    if (st) return st;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (!p->programs[k].name)
            return plan_errorf(PLAN_ERR_FORMAT, err, err_n,
                        "program %u is not loaded (a plan read for one rank cannot be encoded)", k);
    if (p->n_programs > UINT32_MAX - FIXED_SECTIONS)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "too many programs (%u)", p->n_programs);
    uint32_t count = FIXED_SECTIONS + p->n_programs;
    wbuf w = {0};
    w_zero(&w, PLAN_HEADER_BYTES + (size_t)count * TABLE_ENTRY_BYTES);
    bool fits = enc_sections(&w, p);
    if (w.oom || !fits) {
        free(w.p);
        return plan_errorf(w.oom ? PLAN_ERR_IO : PLAN_ERR_FORMAT, err, err_n,
                    w.oom ? "out of memory" : "a section is larger than the format's 4 GiB limit");
    }
    header_fill(w.p, p, count, w.n);
    *out = w.p;
    *n = w.n;
    return PLAN_OK;
}

/* ---- files ---- */

plan_status plan_write(const plan *p, const char *path, char *err, size_t err_n) {
    uint8_t *data;
    size_t n;
    plan_status st = plan_encode(p, &data, &n, err, err_n);
    if (st) return st;
    st = plan_out_write_file(path, data, n, err, err_n);
    free(data);
    return st;
}
