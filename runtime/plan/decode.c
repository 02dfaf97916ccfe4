/*
 * decode.c: the bytes of a plan file to a plan in memory (plan_decode), and a file to a plan
 * (plan_read), whole or only what one rank needs.
 *
 * Nothing in the file is trusted before it is checked: the magic, the version, the header and
 * table CRCs, each section's CRC, the layout of the table (sections contiguous, 8-byte aligned,
 * in the order META, STRINGS, TENSORS, GROUPS, RANKS, PROGRAM 0..n-1), every count against its
 * section's size, every reserved or padding byte (zero), every string offset (strings are
 * stored in the order the items name them), every field an item does not use (the canonical
 * form, format.h), and finally plan_validate for every index and enum value. A fault is
 * PLAN_ERR_FORMAT with a message that names the section and the item; running out of memory
 * or failing to read is PLAN_ERR_IO. Everything a decoded plan points to is allocated with
 * plan_alloc and released by plan_free; on error the plan is left zeroed.
 *
 * Validate on read: plan_decode ends with plan_validate (check_struct.c), the format-level part
 * of the verifier, so that no reader sees an index out of range. The verifier does not read
 * files, so the dependency runs one way. plan_check itself (data flow, matching) is the
 * caller's to run: the compiler after emitting, plandump and planrun after reading.
 *
 * One rank's read: plan_read with rank >= 0 reads the header, the table, META..RANKS (one read:
 * they are contiguous) and that rank's PROGRAM section only; the other programs are left
 * unloaded (name NULL, no instructions).
 */
#include "format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint16_t get_u16(const uint8_t *d) { return (uint16_t)(d[0] | d[1] << 8); }
static uint32_t get_u32(const uint8_t *d) {
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}
static uint64_t get_u64(const uint8_t *d) { return (uint64_t)get_u32(d) | (uint64_t)get_u32(d + 4) << 32; }
static double get_f64(const uint8_t *d) {
    uint64_t u = get_u64(d);
    double x;
    memcpy(&x, &u, sizeof(x));
    return x;
}
static float get_f32(const uint8_t *d) {
    uint32_t u = get_u32(d);
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// count zeroed items of `size` bytes that p owns; NULL for count 0. Clears *ok when out of memory.
static void *alloc_n(plan *p, uint64_t count, size_t size, bool *ok) {
    if (count == 0) return NULL;
    void *v = count <= SIZE_MAX / size ? plan_alloc(p, (size_t)count * size) : NULL;
    if (!v) *ok = false;
    return v;
}

/* ---- the decoder ---- */

typedef struct file_header {
    uint64_t file_bytes;
    uint64_t hash[3];   // model, cluster, options
    uint32_t count;     // sections
    uint32_t table_crc;
} file_header;

typedef struct entry {
    uint32_t kind, index, bytes, crc;
    uint64_t offset;
} entry;

static const char *const sec_kind_names[] = {"?", "META", "STRINGS", "TENSORS", "GROUPS", "RANKS", "PROGRAM"};

// "section 5 (PROGRAM 0)" for table entry i.
static void sec_label(char *buf, size_t n, uint32_t i) {
    if (i < FIXED_SECTIONS) snprintf(buf, n, "section %u (%s)", i, sec_kind_names[i + 1]);
    else snprintf(buf, n, "section %u (PROGRAM %u)", i, i - FIXED_SECTIONS);
}

// The 64-byte header: d holds its first `avail` bytes (fewer when the file is shorter); file_n
// is the file's real size.
static plan_status decode_header(const uint8_t *d, size_t avail, uint64_t file_n, file_header *h, char *err,
                                 size_t err_n) {
    if (memcmp(d, PLAN_MAGIC, avail < 8 ? avail : 8) != 0)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "not a plan file (bad magic: a plan starts with \"PLANCC\\r\\n\")");
    if (file_n < PLAN_HEADER_BYTES)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "truncated: file is %llu bytes, shorter than the %u-byte header",
                    (unsigned long long)file_n, PLAN_HEADER_BYTES);
    if (get_u32(d + 8) != PLAN_VERSION)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "version %u (this reader knows %u)", get_u32(d + 8), PLAN_VERSION);
    if (get_u32(d + 12) != PLAN_HEADER_BYTES)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "header: size %u, expected %u", get_u32(d + 12), PLAN_HEADER_BYTES);
    uint32_t crc = plan_crc32c(0, d, 56);
    if (get_u32(d + 56) != crc)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "header: CRC mismatch (stored 0x%08x, computed 0x%08x)",
                    get_u32(d + 56), crc);
    if (get_u32(d + 60) != 0) return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "header: reserved bytes 60..63 are not zero");
    h->file_bytes = get_u64(d + 16);
    if (h->file_bytes != file_n)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "%s: file is %llu bytes, header says %llu",
                    file_n < h->file_bytes ? "truncated" : "trailing bytes", (unsigned long long)file_n,
                    (unsigned long long)h->file_bytes);
    h->count = get_u32(d + 24);
    h->table_crc = get_u32(d + 28);
    for (int i = 0; i < 3; i++) h->hash[i] = get_u64(d + 32 + 8 * i);
    return PLAN_OK;
}

// One table entry against the layout the format allows: kind and index in order, sections
// contiguous from the end of the table, sizes a multiple of 8, inside the file.
static plan_status check_entry(const entry *e, uint32_t i, uint64_t expect_offset, uint64_t file_bytes, char *err,
                               size_t err_n) {
    uint32_t kind = i < FIXED_SECTIONS ? i + 1 : PLAN_SEC_PROGRAM;
    uint32_t index = i < FIXED_SECTIONS ? 0 : i - FIXED_SECTIONS;
    char label[48];
    sec_label(label, sizeof(label), i);
    if (e->kind != kind || e->index != index)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "section table: entry %u is kind %u index %u, expected %s %u", i,
                    e->kind, e->index, sec_kind_names[kind], index);
    if (e->offset != expect_offset)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "%s: offset %llu, expected %llu (sections are contiguous)", label,
                    (unsigned long long)e->offset, (unsigned long long)expect_offset);
    if (e->bytes % 8)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "%s: %u bytes, not a multiple of 8", label, e->bytes);
    if (e->offset + e->bytes > file_bytes)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "%s: ends at byte %llu, past the end of the file (%llu bytes)", label,
                    (unsigned long long)(e->offset + e->bytes), (unsigned long long)file_bytes);
    return PLAN_OK;
}

// The section table (count entries at t); *out is malloc'd.
static plan_status decode_table(const uint8_t *t, const file_header *h, entry **out, char *err, size_t err_n) {
    *out = NULL;
    uint32_t crc = plan_crc32c(0, t, (size_t)h->count * TABLE_ENTRY_BYTES);
    if (crc != h->table_crc)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "section table: CRC mismatch (stored 0x%08x, computed 0x%08x)",
                    h->table_crc, crc);
    entry *e = malloc(sizeof(entry) * h->count);
    if (!e) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    uint64_t at = PLAN_HEADER_BYTES + (uint64_t)h->count * TABLE_ENTRY_BYTES;
    for (uint32_t i = 0; i < h->count; i++) {
        const uint8_t *r = t + (size_t)i * TABLE_ENTRY_BYTES;
        e[i] = (entry){get_u32(r), get_u32(r + 4), get_u32(r + 16), get_u32(r + 20), get_u64(r + 8)};
        plan_status st = check_entry(&e[i], i, at, h->file_bytes, err, err_n);
        if (st) {
            free(e);
            return st;
        }
        at = e[i].offset + e[i].bytes;
    }
    *out = e;
    if (at != h->file_bytes)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "section table: the sections end at byte %llu, the file has %llu",
                    (unsigned long long)at, (unsigned long long)h->file_bytes);
    return PLAN_OK;
}

// The table's size against the file, before it is read.
static plan_status check_table_size(const file_header *h, char *err, size_t err_n) {
    if (h->count < FIXED_SECTIONS)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n,
                    "section table: %u sections, at least %u (META, STRINGS, TENSORS, GROUPS, RANKS)", h->count,
                    FIXED_SECTIONS);
    uint64_t end = PLAN_HEADER_BYTES + (uint64_t)h->count * TABLE_ENTRY_BYTES;
    if (end > h->file_bytes)
        return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "section table: %u sections need %llu bytes, the file has %llu",
                    h->count, (unsigned long long)end, (unsigned long long)h->file_bytes);
    return PLAN_OK;
}

/* Decoding the sections. */

typedef struct dctx {
    plan *p;
    const char *strs;       // STRINGS data (a copy that p owns)
    uint32_t strs_n;
    uint64_t str_at;        // where the next string that META and TENSORS name must start
    uint32_t *prog_names;   // per program: where its name must start
    char label[48];         // the section being decoded
    char *err;
    size_t err_n;
} dctx;

static plan_status dfail(dctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static plan_status dfail(dctx *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return plan_errorf(PLAN_ERR_FORMAT, c->err, c->err_n, "%s: %s", c->label, msg);
}

static plan_status oom(dctx *c) { return plan_errorf(PLAN_ERR_IO, c->err, c->err_n, "out of memory"); }

// The section holds `need` bytes of content (what its counts say), then zeros up to `bytes`.
static plan_status check_size(dctx *c, const uint8_t *d, uint32_t bytes, uint64_t need, const char *what) {
    uint64_t padded = (need + 7) / 8 * 8;
    if (padded != bytes)
        return dfail(c, "%s need %llu bytes, the section has %u", what, (unsigned long long)padded, bytes);
    for (uint64_t i = need; i < bytes; i++)
        if (d[i]) return dfail(c, "padding byte %llu is not zero", (unsigned long long)i);
    return PLAN_OK;
}

// The section's 8-byte head: a count and a u32 that must be zero (or a second count).
static plan_status check_head(dctx *c, const uint8_t *d, uint32_t bytes, bool second_is_count) {
    if (bytes < 8) return dfail(c, "%u bytes, shorter than its 8-byte head", bytes);
    if (!second_is_count && get_u32(d + 4)) return dfail(c, "reserved bytes 4..7 are not zero");
    return PLAN_OK;
}

// The string at offset off, which must be the next one in STRINGS (the strings are stored in
// the order META, TENSORS and the programs name them, each once), or none (PLAN_NONE).
static plan_status dstr(dctx *c, uint32_t off, const char **out, const char *what, uint32_t item) {
    *out = NULL;
    if (off == PLAN_NONE) return PLAN_OK;
    if (off >= c->strs_n)
        return dfail(c, "%s %u: string offset %u out of range (%u bytes of strings)", what, item, off, c->strs_n);
    if (off != c->str_at)
        return dfail(c, "%s %u: string offset %u, expected %llu (strings are stored in the order they are named)", what,
                     item, off, (unsigned long long)c->str_at);
    *out = c->strs + off;
    c->str_at += strlen(*out) + 1;
    return PLAN_OK;
}

// After the tensors' names: exactly one string per program, the programs' names in order.
static plan_status program_names(dctx *c, uint32_t n_programs) {
    bool ok = true;
    c->prog_names = alloc_n(c->p, n_programs, sizeof(uint32_t), &ok);
    if (!ok) return oom(c);
    uint64_t at = c->str_at;
    for (uint32_t k = 0; k < n_programs; k++) {
        if (at >= c->strs_n) return dfail(c, "the strings end before the name of program %u", k);
        c->prog_names[k] = (uint32_t)at;
        at += strlen(c->strs + at) + 1;
    }
    if (at != c->strs_n)
        return dfail(c, "%llu bytes of strings after the program names", (unsigned long long)(c->strs_n - at));
    return PLAN_OK;
}

// A name in n bytes: a NUL within them and zeros after it. Copies it to out (n bytes).
static bool dname(const uint8_t *d, size_t n, char *out) {
    const uint8_t *nul = memchr(d, 0, n);
    if (!nul) return false;
    for (const uint8_t *q = nul; q < d + n; q++)
        if (*q) return false;
    memcpy(out, d, n);
    return true;
}

static plan_status decode_strings(dctx *c, const uint8_t *d, uint32_t bytes) {
    plan_status st = check_head(c, d, bytes, false);
    uint32_t n = st ? 0 : get_u32(d);
    if (!st) st = check_size(c, d, bytes, 8 + (uint64_t)n, "the strings");
    if (st) return st;
    if (n && d[8 + n - 1]) return dfail(c, "the string data does not end with a NUL");
    char *s = n ? plan_alloc(c->p, n) : NULL;
    if (n && !s) return oom(c);
    if (n) memcpy(s, d + 8, n);
    c->strs = s;
    c->strs_n = n;
    return PLAN_OK;
}

// META's mesh: n_axes, mesh sizes and axis names (zero past n_axes).
static plan_status decode_mesh(dctx *c, const uint8_t *d, plan_meta *m) {
    m->n_axes = get_u32(d + 44);
    if (m->n_axes > PLAN_MAX_AXES) return dfail(c, "%u mesh axes, at most %d", m->n_axes, PLAN_MAX_AXES);
    static const char zero8[8];
    for (uint32_t i = 0; i < PLAN_MAX_AXES; i++) {
        m->mesh[i] = get_u32(d + 48 + 4 * i);
        const uint8_t *name = d + 80 + 8 * i;
        if (i >= m->n_axes && (m->mesh[i] || memcmp(name, zero8, 8)))
            return dfail(c, "mesh axis %u is past n_axes (%u) but not zero", i, m->n_axes);
        if (i < m->n_axes && !dname(name, 8, m->axis_names[i]))
            return dfail(c, "mesh axis %u: the name is not NUL-terminated and zero-padded", i);
    }
    return PLAN_OK;
}

static plan_status decode_meta(dctx *c, const uint8_t *d, uint32_t bytes) {
    plan_meta *m = &c->p->meta;
    plan_status st = check_size(c, d, bytes, META_BYTES, "META's fields");
    if (st) return st;
    if (!dname(d, sizeof(m->compiler), m->compiler))
        return dfail(c, "the compiler name is not NUL-terminated and zero-padded");
    st = dstr(c, get_u32(d + 32), &m->model_name, "field", 32);
    if (!st) st = dstr(c, get_u32(d + 36), &m->options, "field", 36);
    if (!st) st = decode_mesh(c, d, m);
    if (st) return st;
    m->world = get_u32(d + 40);
    m->micro_batches = get_u32(d + 144);
    uint32_t sched = get_u32(d + 148);
    if (sched > PLAN_SCHED_1F1B_INTERLEAVED) return dfail(c, "schedule %u unknown", sched);
    m->schedule = (plan_schedule)sched;
    m->zero_stage = get_u32(d + 152);
    m->loss = get_u32(d + 156);
    m->est_step_s = get_f64(d + 160);
    m->est_peak_bytes = get_f64(d + 168);
    st = dstr(c, get_u32(d + 176), &m->notes, "field", 176);
    if (!st && get_u32(d + 180)) st = dfail(c, "reserved bytes 180..183 are not zero");
    m->model_flops = get_f64(d + 184);
    m->device_peak_flops = get_f64(d + 192);
    return st;
}

static plan_status decode_tensor(dctx *c, const uint8_t *r, uint32_t i, plan_tensor *t) {
    plan_status st = dstr(c, get_u32(r), &t->name, "tensor", i);
    if (st) return st;
    t->dtype = r[4];
    t->kind = r[5];
    t->rank = r[6];
    t->source = r[7];
    t->copies = get_u32(r + 8);
    t->zigzag = get_u16(r + 12);
    t->zigzag_dim = r[14];
    if (r[15]) return dfail(c, "tensor %u: reserved byte 15 is not zero", i);
    if (!t->zigzag && t->zigzag_dim) return dfail(c, "tensor %u: zigzag dimension %u without zigzag chunks", i, t->zigzag_dim);
    if (t->rank > PLAN_MAX_RANK) return dfail(c, "tensor %u: rank %u, at most %d", i, t->rank, PLAN_MAX_RANK);
    for (int k = 0; k < PLAN_MAX_RANK; k++) {
        t->shape[k] = (int64_t)get_u64(r + 16 + 8 * k);
        if (k >= t->rank && t->shape[k])
            return dfail(c, "tensor %u: dimension %d is past its rank (%u) but not zero", i, k, t->rank);
    }
    // The source's numbers: those it does not take are zero (bits, so -0 is refused too).
    unsigned used = plan_source_args(t->kind, t->source);
    for (unsigned k = used; k < 2; k++)
        if (get_u64(r + 80 + 8 * k))
            return dfail(c, "tensor %u: %c (bytes %u..%u) is not zero, but its source takes %u number%s", i, k ? 'b' : 'a',
                         80 + 8 * k, 87 + 8 * k, used, used == 1 ? "" : "s");
    t->a = get_f64(r + 80);
    t->b = get_f64(r + 88);
    return PLAN_OK;
}

static plan_status decode_tensors(dctx *c, const uint8_t *d, uint32_t bytes) {
    plan_status st = check_head(c, d, bytes, false);
    uint32_t n = st ? 0 : get_u32(d);
    if (!st) st = check_size(c, d, bytes, 8 + (uint64_t)n * TENSOR_BYTES, "the tensors");
    if (st) return st;
    bool ok = true;
    c->p->tensors = alloc_n(c->p, n, sizeof(plan_tensor), &ok);
    if (!ok) return oom(c);
    c->p->n_tensors = n;
    for (uint32_t i = 0; i < n && !st; i++) st = decode_tensor(c, d + 8 + (size_t)i * TENSOR_BYTES, i, &c->p->tensors[i]);
    return st;
}

static plan_status decode_groups(dctx *c, const uint8_t *d, uint32_t bytes) {
    plan_status st = check_head(c, d, bytes, true);
    uint32_t n = st ? 0 : get_u32(d), m = st ? 0 : get_u32(d + 4);
    if (!st) st = check_size(c, d, bytes, 8 + (uint64_t)n * GROUP_BYTES + 4 * (uint64_t)m, "the groups");
    if (st) return st;
    bool ok = true;
    plan *p = c->p;
    p->groups = alloc_n(p, n, sizeof(plan_group), &ok);
    uint32_t *members = alloc_n(p, m, sizeof(uint32_t), &ok);
    if (!ok) return oom(c);
    p->n_groups = n;
    const uint8_t *list = d + 8 + (size_t)n * GROUP_BYTES;
    for (uint32_t j = 0; j < m; j++) members[j] = get_u32(list + 4 * (size_t)j);
    uint64_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        plan_group *g = &p->groups[i];
        g->axes = get_u32(d + 8 + (size_t)i * GROUP_BYTES);
        g->n_ranks = get_u32(d + 12 + (size_t)i * GROUP_BYTES);
        if (used + g->n_ranks > m) return dfail(c, "group %u: its members run past the %u listed", i, m);
        g->ranks = g->n_ranks ? members + used : NULL;
        used += g->n_ranks;
    }
    if (used != m) return dfail(c, "the groups have %llu members, the section lists %u", (unsigned long long)used, m);
    return PLAN_OK;
}

// Rank r's mesh coordinates: its digits in the mesh, the last axis fastest.
static void rank_coords(const plan_meta *m, uint32_t r, uint32_t coord[PLAN_MAX_AXES]) {
    memset(coord, 0, sizeof(uint32_t) * PLAN_MAX_AXES);
    for (int i = (int)m->n_axes - 1; i >= 0; i--) {
        if (!m->mesh[i]) continue;
        coord[i] = r % m->mesh[i];
        r /= m->mesh[i];
    }
}

static plan_status decode_ranks(dctx *c, const uint8_t *d, uint32_t bytes) {
    plan_status st = check_head(c, d, bytes, false);
    uint32_t n = st ? 0 : get_u32(d);
    if (!st && n != c->p->meta.world) return dfail(c, "%u ranks, but META says world %u", n, c->p->meta.world);
    if (!st) st = check_size(c, d, bytes, 8 + 4 * (uint64_t)n, "the ranks");
    if (st) return st;
    bool ok = true;
    c->p->ranks = alloc_n(c->p, n, sizeof(plan_rank), &ok);
    if (!ok) return oom(c);
    c->p->n_ranks = n;
    for (uint32_t r = 0; r < n; r++) {
        c->p->ranks[r].program = get_u32(d + 8 + 4 * (size_t)r);
        rank_coords(&c->p->meta, r, c->p->ranks[r].coord);
    }
    return PLAN_OK;
}

static plan_status decode_buffer(dctx *c, const uint8_t *r, uint32_t i, plan_buffer *b) {
    b->tensor = get_u32(r);
    b->dtype = r[4];
    b->flags = r[5];
    if (r[6] || r[7]) return dfail(c, "buffer %u: reserved bytes 6..7 are not zero", i);
    memcpy(b->shard.map, r + 8, PLAN_MAX_AXES);
    b->layer_base = get_u32(r + 16);
    if (get_u32(r + 20)) return dfail(c, "buffer %u: reserved bytes 20..23 are not zero", i);
    b->offset = get_u64(r + 24);
    b->bytes = get_u64(r + 32);
    b->mb_slots = get_u32(r + 40);
    b->layer_slots = get_u32(r + 44);
    b->mb_stride = get_u64(r + 48);
    b->layer_stride = get_u64(r + 56);
    return PLAN_OK;
}

static void decode_attrs(const uint8_t *r, plan_attrs *a) {
    for (int k = 0; k < 8; k++) a->f[k] = get_f64(r + 8 * k);
    for (int k = 0; k < 8; k++) a->i[k] = (int64_t)get_u64(r + 64 + 8 * k);
    for (int k = 0; k < PLAN_MAX_RANK; k++) a->perm[k] = (int32_t)get_u32(r + 128 + 4 * k);
    for (int k = 0; k < 6; k++) a->win[k] = (int32_t)get_u32(r + 160 + 4 * k);
}

// Instruction i; *at is where its arguments must start (instruction order), stepped past them.
static plan_status decode_insn(dctx *c, const uint8_t *r, uint32_t i, uint64_t *at, plan_insn *in) {
    *in = (plan_insn){.kind = r[0], .stream = r[1], .code = get_u16(r + 2), .nargs = get_u16(r + 4),
                      .mb_delta = (int16_t)get_u16(r + 6), .args = get_u32(r + 8), .a = (int32_t)get_u32(r + 12),
                      .b = (int32_t)get_u32(r + 16), .attrs = get_u32(r + 20), .t_s = get_f32(r + 24), .phase = r[28], .tag = r[29],
                      .layer_delta = (int16_t)get_u16(r + 30)};
    if (in->kind >= PLAN_I_KIND_COUNT) return dfail(c, "insn %u: kind %u unknown", i, in->kind);
    if (in->tag >= PLAN_MAX_TAGS) return dfail(c, "insn %u: tag %u, at most %u", i, in->tag, PLAN_MAX_TAGS - 1);
    if (in->args != *at)
        return dfail(c, "insn %u: arguments at %u, expected %llu (arguments are stored in instruction order)", i,
                     in->args, (unsigned long long)*at);
    plan_insn canon = plan_insn_canonical(*in, in->args);
    const char *field = canon.stream != in->stream ? "stream" : canon.code != in->code ? "code"
                      : canon.a != in->a           ? "a"
                      : canon.b != in->b           ? "b"
                      : canon.mb_delta != in->mb_delta ? "mb_delta"
                      : canon.layer_delta != in->layer_delta ? "layer_delta"
                      : canon.attrs != in->attrs   ? "attrs"
                      : memcmp(&canon.t_s, &in->t_s, sizeof(float)) ? "t_s"
                      : canon.phase != in->phase   ? "phase"
                      : canon.tag != in->tag       ? "tag" : NULL;
    if (field)
        return dfail(c, "insn %u (%s): field %s is unused by this kind and must be %s", i,
                     plan_insn_kind_name(in->kind), field, canon.attrs != in->attrs ? "PLAN_NONE" : "0");
    *at += in->nargs;
    return PLAN_OK;
}

// PROGRAM k's head: name, arena, streams (priorities past n_streams zero), events.
static plan_status decode_program_head(dctx *c, const uint8_t *d, uint32_t k, plan_program *pg) {
    if (get_u32(d) != k) return dfail(c, "the head says program %u", get_u32(d));
    if (get_u32(d + 4) != c->prog_names[k])
        return dfail(c, "name: string offset %u, expected %u (the program names follow the tensor names, in order)",
                     get_u32(d + 4), c->prog_names[k]);
    pg->name = c->strs + c->prog_names[k];
    pg->arena_bytes = get_u64(d + 8);
    pg->n_streams = get_u32(d + 16);
    pg->n_events = get_u32(d + 20);
    if (pg->n_streams > 8) return dfail(c, "%u streams, at most 8", pg->n_streams);
    for (uint32_t s = 0; s < 8; s++) {
        pg->priority[s] = (int32_t)get_u32(d + 24 + 4 * s);
        if (s >= pg->n_streams && pg->priority[s])
            return dfail(c, "the priority of stream %u is past n_streams (%u) but not zero", s, pg->n_streams);
    }
    return PLAN_OK;
}

static plan_status decode_program_items(dctx *c, const uint8_t *d, plan_program *pg) {
    const uint8_t *r = d + PROGRAM_HEAD_BYTES;
    plan_status st = PLAN_OK;
    for (uint32_t i = 0; i < pg->n_buffers && !st; i++, r += BUFFER_BYTES) st = decode_buffer(c, r, i, &pg->buffers[i]);
    for (uint32_t i = 0; i < pg->n_attrs && !st; i++, r += ATTRS_BYTES) decode_attrs(r, &pg->attrs[i]);
    uint64_t at = 0;
    for (uint32_t i = 0; i < pg->n_insns && !st; i++, r += INSN_BYTES) st = decode_insn(c, r, i, &at, &pg->insns[i]);
    if (st) return st;
    if (at != pg->n_args)
        return dfail(c, "the instructions take %llu arguments, the section has %u", (unsigned long long)at, pg->n_args);
    for (uint32_t i = 0; i < pg->n_args; i++) pg->args[i] = get_u32(r + 4 * (size_t)i);
    return PLAN_OK;
}

static plan_status decode_program(dctx *c, const uint8_t *d, uint32_t bytes, uint32_t k) {
    plan_program *pg = &c->p->programs[k];
    if (bytes < PROGRAM_HEAD_BYTES) return dfail(c, "%u bytes, shorter than its %u-byte head", bytes, PROGRAM_HEAD_BYTES);
    plan_status st = decode_program_head(c, d, k, pg);
    if (st) return st;
    uint32_t nb = get_u32(d + 56), na = get_u32(d + 60), ni = get_u32(d + 64), nargs = get_u32(d + 68);
    uint64_t need = PROGRAM_HEAD_BYTES + (uint64_t)nb * BUFFER_BYTES + (uint64_t)na * ATTRS_BYTES +
                    (uint64_t)ni * INSN_BYTES + 4 * (uint64_t)nargs;
    st = check_size(c, d, bytes, need, "its counts");
    if (st) return st;
    bool ok = true;
    pg->buffers = alloc_n(c->p, nb, sizeof(plan_buffer), &ok);
    pg->attrs = alloc_n(c->p, na, sizeof(plan_attrs), &ok);
    pg->insns = alloc_n(c->p, ni, sizeof(plan_insn), &ok);
    pg->args = alloc_n(c->p, nargs, sizeof(uint32_t), &ok);
    if (!ok) return oom(c);
    pg->n_buffers = nb;
    pg->n_attrs = na;
    pg->n_insns = ni;
    pg->n_args = nargs;
    return decode_program_items(c, d, pg);
}

/* Putting it together: sections come from a fetch function (memory, or reads from a file). */

typedef const uint8_t *(*fetch_fn)(void *ctx, const entry *tab, uint32_t i, char *err, size_t err_n);

// Section i's bytes, CRC checked; NULL with *st set on failure.
static const uint8_t *get_section(dctx *c, const entry *tab, uint32_t i, fetch_fn fetch, void *ctx,
                                  plan_status *st) {
    sec_label(c->label, sizeof(c->label), i);
    const uint8_t *d = fetch(ctx, tab, i, c->err, c->err_n);
    if (!d) {
        *st = PLAN_ERR_IO;
        return NULL;
    }
    uint32_t crc = plan_crc32c(0, d, tab[i].bytes);
    if (crc != tab[i].crc) {
        *st = dfail(c, "CRC mismatch (stored 0x%08x, computed 0x%08x)", tab[i].crc, crc);
        return NULL;
    }
    return d;
}

static plan_status decode_fixed(dctx *c, const entry *tab, fetch_fn fetch, void *ctx) {
    static const uint32_t order[FIXED_SECTIONS] = {1, 0, 2, 3, 4}; // STRINGS before META, which uses it
    plan_status st = PLAN_OK;
    for (int j = 0; j < FIXED_SECTIONS && !st; j++) {
        uint32_t i = order[j];
        const uint8_t *d = get_section(c, tab, i, fetch, ctx, &st);
        if (!d) break;
        switch (i) {
        case 0: st = decode_meta(c, d, tab[i].bytes); break;
        case 1: st = decode_strings(c, d, tab[i].bytes); break;
        case 2: st = decode_tensors(c, d, tab[i].bytes); break;
        case 3: st = decode_groups(c, d, tab[i].bytes); break;
        default: st = decode_ranks(c, d, tab[i].bytes); break;
        }
    }
    return st;
}

static plan_status decode_parts(const file_header *h, const entry *tab, fetch_fn fetch, void *ctx, int rank,
                                plan *out, char *err, size_t err_n) {
    dctx c = {.p = out, .err = err, .err_n = err_n};
    out->meta.model_hash = h->hash[0];
    out->meta.cluster_hash = h->hash[1];
    out->meta.options_hash = h->hash[2];
    uint32_t n = h->count - FIXED_SECTIONS;
    plan_status st = decode_fixed(&c, tab, fetch, ctx);
    if (!st) {
        sec_label(c.label, sizeof(c.label), 1);
        st = program_names(&c, n);
    }
    if (st) return st;
    bool ok = true;
    out->programs = alloc_n(out, n, sizeof(plan_program), &ok);
    if (!ok) return oom(&c);
    out->n_programs = n;
    for (uint32_t k = 0; k < n && !st; k++) {
        if (rank >= 0 && ((uint32_t)rank >= out->n_ranks || out->ranks[rank].program != k)) continue;
        const uint8_t *d = get_section(&c, tab, FIXED_SECTIONS + k, fetch, ctx, &st);
        if (d) st = decode_program(&c, d, tab[FIXED_SECTIONS + k].bytes, k);
    }
    return st ? st : plan_validate(out, err, err_n);
}

static const uint8_t *memory_fetch(void *ctx, const entry *tab, uint32_t i, char *err, size_t err_n) {
    return (const uint8_t *)ctx + tab[i].offset;
}

plan_status plan_decode(const uint8_t *data, size_t n, int rank, plan *out, char *err, size_t err_n) {
    memset(out, 0, sizeof(*out));
    file_header h;
    entry *tab = NULL;
    plan_status st = decode_header(data, n < PLAN_HEADER_BYTES ? n : PLAN_HEADER_BYTES, n, &h, err, err_n);
    if (!st) st = check_table_size(&h, err, err_n);
    if (!st) st = decode_table(data + PLAN_HEADER_BYTES, &h, &tab, err, err_n);
    if (!st) st = decode_parts(&h, tab, memory_fetch, (void *)data, rank, out, err, err_n);
    free(tab);
    if (st) plan_free(out);
    return st;
}

/* ---- files ---- */

static plan_status read_at(FILE *f, uint64_t off, void *buf, size_t n, char *err, size_t err_n) {
    if (n == 0) return PLAN_OK;
    if (off > INT64_MAX || fseeko(f, (off_t)off, SEEK_SET) != 0)
        return plan_errorf(PLAN_ERR_IO, err, err_n, "cannot seek to byte %llu: %s", (unsigned long long)off, strerror(errno));
    if (fread(buf, 1, n, f) != n)
        return plan_errorf(PLAN_ERR_IO, err, err_n, "cannot read %zu bytes at byte %llu: %s", n, (unsigned long long)off,
                    ferror(f) ? strerror(errno) : "unexpected end of file");
    return PLAN_OK;
}

// Reads sections on demand: META..RANKS in one read (they are contiguous), a program on its own.
typedef struct file_fetcher {
    FILE *f;
    uint8_t *fixed, *program;
} file_fetcher;

static const uint8_t *file_fetch(void *ctx, const entry *tab, uint32_t i, char *err, size_t err_n) {
    file_fetcher *ff = ctx;
    if (i < FIXED_SECTIONS && !ff->fixed) {
        uint64_t n = tab[FIXED_SECTIONS - 1].offset + tab[FIXED_SECTIONS - 1].bytes - tab[0].offset;
        ff->fixed = malloc(n ? (size_t)n : 1);
        if (!ff->fixed) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory"), NULL;
        if (read_at(ff->f, tab[0].offset, ff->fixed, (size_t)n, err, err_n)) return NULL;
    }
    if (i < FIXED_SECTIONS) return ff->fixed + (tab[i].offset - tab[0].offset);
    free(ff->program);
    ff->program = malloc(tab[i].bytes ? tab[i].bytes : 1);
    if (!ff->program) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory"), NULL;
    return read_at(ff->f, tab[i].offset, ff->program, tab[i].bytes, err, err_n) ? NULL : ff->program;
}

// One rank's part of an open file: header, table, META..RANKS and that rank's program.
static plan_status read_rank(FILE *f, uint64_t size, int rank, plan *out, char *err, size_t err_n) {
    uint8_t head[PLAN_HEADER_BYTES];
    size_t avail = size < PLAN_HEADER_BYTES ? (size_t)size : PLAN_HEADER_BYTES;
    file_header h;
    plan_status st = read_at(f, 0, head, avail, err, err_n);
    if (!st) st = decode_header(head, avail, size, &h, err, err_n);
    if (!st) st = check_table_size(&h, err, err_n);
    if (st) return st;
    uint8_t *t = malloc((size_t)h.count * TABLE_ENTRY_BYTES);
    if (!t) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    entry *tab = NULL;
    st = read_at(f, PLAN_HEADER_BYTES, t, (size_t)h.count * TABLE_ENTRY_BYTES, err, err_n);
    if (!st) st = decode_table(t, &h, &tab, err, err_n);
    free(t);
    file_fetcher ff = {.f = f};
    if (!st) st = decode_parts(&h, tab, file_fetch, &ff, rank, out, err, err_n);
    free(tab);
    free(ff.fixed);
    free(ff.program);
    return st;
}

static plan_status read_whole(FILE *f, uint64_t size, plan *out, char *err, size_t err_n) {
    if (size > SIZE_MAX) return plan_errorf(PLAN_ERR_IO, err, err_n, "the file is too large for this machine");
    uint8_t *data = malloc(size ? (size_t)size : 1);
    if (!data) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    plan_status st = read_at(f, 0, data, (size_t)size, err, err_n);
    if (!st) st = plan_decode(data, (size_t)size, -1, out, err, err_n);
    free(data);
    return st;
}

plan_status plan_read(const char *path, int rank, plan *out, char *err, size_t err_n) {
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f) return plan_errorf(PLAN_ERR_IO, err, err_n, "cannot open: %s", strerror(errno));
    struct stat sb;
    plan_status st = PLAN_OK;
    if (fstat(fileno(f), &sb) != 0) st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot read: not a regular file");
    else if (rank < 0) st = read_whole(f, (uint64_t)sb.st_size, out, err, err_n);
    else st = read_rank(f, (uint64_t)sb.st_size, rank, out, err, err_n);
    fclose(f);
    if (st) plan_free(out);
    return st;
}
