/*
 * plan.c: the plan file in bytes: hashes, the encoder, the decoder, reading and writing files,
 * and the memory a decoded plan owns.
 *
 * What it guarantees. plan_encode writes every field little-endian, field by field, in a fixed
 * order (never a struct copy), so the bytes do not depend on the compiler, the host's endianness
 * or uninitialized padding: the same plan gives the same bytes. It writes the canonical form:
 * fields that an item does not use (an instruction kind's unused fields, mesh axes past n_axes,
 * dimensions past a tensor's rank, the numbers a tensor's source does not take, stream
 * priorities past n_streams, the bytes after a name's NUL) are written as zero (attrs as
 * PLAN_NONE; a shard's entries past n_axes must already be zero: plan_validate refuses others),
 * and the argument lists are laid out in instruction order. plan_decode accepts the canonical
 * form only, so any file it accepts encodes back to the same bytes; everything else in the file
 * is checked before it is trusted: the magic, the version, the header and table CRCs, each
 * section's CRC, the layout of the table (sections contiguous, 8-byte aligned, in the order
 * META, STRINGS, TENSORS, GROUPS, RANKS, PROGRAM 0..n-1), every count against its section's
 * size, every reserved or padding byte (zero), every string offset, and finally plan_validate
 * (plan_check.c) for every index and enum value. A fault is PLAN_ERR_FORMAT with a message that
 * names the section and the item.
 *
 * Layout of each section (offsets inside the section; all sections are padded with zeros to a
 * multiple of 8 bytes, and the table's byte count includes the padding). runtime/PLAN_FORMAT.md
 * has the same tables with the meaning of every field.
 *
 *   META (200 bytes)     0 u8[32] compiler, NUL-padded; 32 u32 model name (string offset, or
 *                        PLAN_NONE); 36 u32 options (string offset or PLAN_NONE); 40 u32 world;
 *                        44 u32 n_axes; 48 u32 mesh[8]; 80 u8[8][8] axis names, NUL-padded;
 *                        144 u32 micro_batches; 148 u32 schedule; 152 u32 zero_stage; 156 u32 loss
 *                        (tensor index or PLAN_NONE); 160 f64 est_step_s; 168 f64 est_peak_bytes;
 *                        176 u32 notes (string offset or PLAN_NONE); 180 u32 0; 184 f64
 *                        model_flops; 192 f64 device_peak_flops
 *   STRINGS              0 u32 n (bytes of string data); 4 u32 0; 8 u8[n]: NUL-terminated
 *                        strings back to back (n = 0, or the last byte is NUL). A string is
 *                        referenced by the offset of its first byte in that data.
 *   TENSORS              0 u32 count; 4 u32 0; then count records of 96 bytes: 0 u32 name;
 *                        4 u8 dtype; 5 u8 kind; 6 u8 rank; 7 u8 source; 8 u32 copies; 12 u32 0;
 *                        16 i64 shape[8]; 80 f64 a; 88 f64 b (0 where the source does not use
 *                        them: plan_source_args)
 *   GROUPS               0 u32 count; 4 u32 m (member ranks of all explicit groups); then count
 *                        records of 8 bytes: u32 axes, u32 n_ranks; then u32 ranks[m], each
 *                        explicit group's members in group order
 *   RANKS                0 u32 count (= world); 4 u32 0; then u32 program[count] (coordinates
 *                        are not stored: they are the rank's mesh digits)
 *   PROGRAM k (72-byte head, then arrays)
 *                        0 u32 k; 4 u32 name; 8 u64 arena_bytes; 16 u32 n_streams;
 *                        20 u32 n_events; 24 i32 priority[8]; 56 u32 n_buffers; 60 u32 n_attrs;
 *                        64 u32 n_insns; 68 u32 n_args; 72 buffers (64 bytes each), then attrs
 *                        (184 bytes each), then insns (32 bytes each), then u32 args[n_args]
 *     buffer:  0 u32 tensor; 4 u8 dtype; 5 u8 flags (1: persist); 6 u8[2] 0; 8 u8 shard.map[8];
 *              16 u32 layer_base; 20 u32 0; 24 u64 offset; 32 u64 bytes; 40 u32 mb_slots;
 *              44 u32 layer_slots; 48 u64 mb_stride; 56 u64 layer_stride
 *     attrs:   0 f64 f[8]; 64 i64 i[8]; 128 i32 perm[8]; 160 i32 win[6]
 *     insn:    0 u8 kind; 1 u8 stream; 2 u16 code; 4 u16 nargs; 6 i16 mb_delta; 8 u32 args;
 *              12 i32 a; 16 i32 b; 20 u32 attrs; 24 f32 t_s; 28 u8 phase; 29 u8 tag
 *              (send/recv, < PLAN_MAX_TAGS); 30 u8[2] 0
 *
 * Doubles (floats) are stored as the u64 (u32) of their IEEE-754 bits. Memory: everything a decoded plan
 * points to is allocated with plan_alloc and released by plan_free.
 */
#include "plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    TABLE_ENTRY_BYTES = 24,
    FIXED_SECTIONS = 5,     // META, STRINGS, TENSORS, GROUPS, RANKS
    META_BYTES = 200,
    TENSOR_BYTES = 96,
    GROUP_BYTES = 8,
    PROGRAM_HEAD_BYTES = 72,
    BUFFER_BYTES = 64,
    ATTRS_BYTES = 184,
    INSN_BYTES = 32,
};

plan_status plan_errorf(plan_status st, char *err, size_t err_n, const char *fmt, ...) {
    if (err && err_n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_n, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- hashes ---- */

// The reflected Castagnoli polynomial 0x82f63b78, one entry per byte value.
static const uint32_t crc32c_table[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c, 0x26a1e7e8, 0xd4ca64eb,
    0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b, 0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24,
    0x105ec76f, 0xe235446c, 0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc, 0xbc267848, 0x4e4dfb4b,
    0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a, 0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35,
    0xaa64d611, 0x580f5512, 0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad, 0x1642ae59, 0xe4292d5a,
    0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a, 0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595,
    0x417b1dbc, 0xb3109ebf, 0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f, 0xed03a29b, 0x1f682198,
    0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927, 0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38,
    0xdbfc821c, 0x2997011f, 0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e, 0x4767748a, 0xb50cf789,
    0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859, 0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46,
    0x7198540d, 0x83f3d70e, 0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de, 0xdde0eb2a, 0x2f8b6829,
    0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c, 0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93,
    0x082f63b7, 0xfa44e0b4, 0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b, 0xb4091bff, 0x466298fc,
    0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c, 0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033,
    0xa24bb5a6, 0x502036a5, 0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975, 0x0e330a81, 0xfc588982,
    0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d, 0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622,
    0x38cc2a06, 0xcaa7a905, 0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8, 0xe52cc12c, 0x1747422f,
    0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff, 0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0,
    0xd3d3e1ab, 0x21b862a8, 0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78, 0x7fab5e8c, 0x8dc0dd8f,
    0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee, 0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1,
    0x69e9f0d5, 0x9b8273d6, 0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69, 0xd5cf889d, 0x27a40b9e,
    0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e, 0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t plan_crc32c(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

#define FNV_BASIS 0xcbf29ce484222325ull

static uint64_t fnv_continue(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t plan_fnv1a64(const void *data, size_t n) { return fnv_continue(FNV_BASIS, data, n); }

/* ---- memory a plan owns: a list of blocks, each aligned for any type ---- */

typedef union plan_block {
    union plan_block *next;
    max_align_t align;
} plan_block;

void *plan_alloc(plan *p, size_t n) {
    if (!p || n > SIZE_MAX - sizeof(plan_block)) return NULL;
    plan_block *b = calloc(1, sizeof(plan_block) + n);
    if (!b) return NULL;
    b->next = p->owner;
    p->owner = b;
    return b + 1;
}

void plan_free(plan *p) {
    if (!p) return;
    plan_block *b = p->owner;
    while (b) {
        plan_block *next = b->next;
        free(b);
        b = next;
    }
    memset(p, 0, sizeof(*p));
}

// count zeroed items of `size` bytes that p owns; NULL for count 0. Clears *ok when out of memory.
static void *alloc_n(plan *p, uint64_t count, size_t size, bool *ok) {
    if (count == 0) return NULL;
    void *v = count <= SIZE_MAX / size ? plan_alloc(p, (size_t)count * size) : NULL;
    if (!v) *ok = false;
    return v;
}

/* ---- which fields each instruction kind uses (the others are canonical: 0, attrs PLAN_NONE) ---- */

enum { U_STREAM = 1, U_CODE = 2, U_A = 4, U_B = 8, U_DELTA = 16, U_ATTRS = 32, U_TIME = 64, U_TAG = 128 }; // U_TIME: t_s and phase
static const uint8_t insn_uses[PLAN_I_KIND_COUNT] = {
    [PLAN_I_COMPUTE] = U_STREAM | U_CODE | U_DELTA | U_ATTRS | U_TIME,
    [PLAN_I_COLL] = U_STREAM | U_CODE | U_A | U_DELTA | U_ATTRS | U_TIME, // attrs: a chunk (version 4)
    [PLAN_I_SEND] = U_STREAM | U_A | U_B | U_DELTA | U_TIME | U_TAG,
    [PLAN_I_RECV] = U_STREAM | U_A | U_B | U_DELTA | U_TIME | U_TAG,
    [PLAN_I_COPY] = U_STREAM | U_DELTA | U_TIME,
    [PLAN_I_RECORD] = U_STREAM | U_A,
    [PLAN_I_WAIT] = U_STREAM | U_A,
    [PLAN_I_LOOP] = U_CODE | U_A | U_B,
};

// in with the fields its kind does not use set to their canonical values and its arguments at
// args_at. in.kind must be < PLAN_I_KIND_COUNT.
static plan_insn insn_canonical(plan_insn in, uint32_t args_at) {
    unsigned u = insn_uses[in.kind];
    if (!(u & U_STREAM)) in.stream = 0;
    if (!(u & U_CODE)) in.code = 0;
    if (!(u & U_A)) in.a = 0;
    if (!(u & U_B)) in.b = 0;
    if (!(u & U_DELTA)) in.mb_delta = 0;
    if (!(u & U_ATTRS)) in.attrs = PLAN_NONE;
    if (!(u & U_TIME)) in.t_s = 0, in.phase = 0;
    if (!(u & U_TAG)) in.tag = 0;
    in.args = args_at;
    return in;
}

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
        w_u32(w, 0);
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
    w_zero(w, 2);
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
        enc_insn(w, insn_canonical(pg->insns[i], at));
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
    if (get_u32(r + 12)) return dfail(c, "tensor %u: reserved bytes 12..15 are not zero", i);
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
                      .b = (int32_t)get_u32(r + 16), .attrs = get_u32(r + 20), .t_s = get_f32(r + 24), .phase = r[28], .tag = r[29]};
    if (in->kind >= PLAN_I_KIND_COUNT) return dfail(c, "insn %u: kind %u unknown", i, in->kind);
    if (r[30] || r[31]) return dfail(c, "insn %u: reserved bytes 30..31 are not zero", i);
    if (in->tag >= PLAN_MAX_TAGS) return dfail(c, "insn %u: tag %u, at most %u", i, in->tag, PLAN_MAX_TAGS - 1);
    if (in->args != *at)
        return dfail(c, "insn %u: arguments at %u, expected %llu (arguments are stored in instruction order)", i,
                     in->args, (unsigned long long)*at);
    plan_insn canon = insn_canonical(*in, in->args);
    const char *field = canon.stream != in->stream ? "stream" : canon.code != in->code ? "code"
                      : canon.a != in->a           ? "a"
                      : canon.b != in->b           ? "b"
                      : canon.mb_delta != in->mb_delta ? "mb_delta"
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

plan_status plan_file_hash(const char *path, uint64_t *h, char *err, size_t err_n) {
    FILE *f = fopen(path, "rb");
    if (!f) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot open: %s", path, strerror(errno));
    uint64_t x = FNV_BASIS;
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        x = fnv_continue(x, buf, n);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot read", path);
    *h = x;
    return PLAN_OK;
}

plan_status plan_verify_inputs(const plan *p, const char *model_path, const char *cluster_path, char *err, size_t err_n) {
    const char *opts = p->meta.options ? p->meta.options : "";
    if (plan_fnv1a64(opts, strlen(opts)) != p->meta.options_hash)
        return plan_errorf(PLAN_ERR_STALE, err, err_n, "stale: the options hash 0x%016llx is not that of the plan's options (0x%016llx)",
                    (unsigned long long)p->meta.options_hash, (unsigned long long)plan_fnv1a64(opts, strlen(opts)));
    const char *paths[2] = {model_path, cluster_path}, *what[2] = {"model", "cluster"};
    uint64_t want[2] = {p->meta.model_hash, p->meta.cluster_hash};
    for (int i = 0; i < 2; i++) {
        if (!paths[i]) continue;
        uint64_t h;
        plan_status st = plan_file_hash(paths[i], &h, err, err_n);
        if (st) return st;
        if (h != want[i])
            return plan_errorf(PLAN_ERR_STALE, err, err_n, "stale: the plan was compiled from another %s (hash 0x%016llx; %s hashes to 0x%016llx): compile it again",
                        what[i], (unsigned long long)want[i], paths[i], (unsigned long long)h);
    }
    return PLAN_OK;
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

static plan_status write_all(int fd, const uint8_t *data, size_t n, char *err, size_t err_n) {
    while (n) {
        ssize_t k = write(fd, data, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return plan_errorf(PLAN_ERR_IO, err, err_n, "cannot write: %s", strerror(errno));
        data += k;
        n -= (size_t)k;
    }
    if (fsync(fd) != 0) return plan_errorf(PLAN_ERR_IO, err, err_n, "cannot write: %s", strerror(errno));
    return PLAN_OK;
}

// data to path through a temporary file in the same folder and a rename, so that a reader
// sees the old file or the whole new one, never a part.
static plan_status write_file(const char *path, const uint8_t *data, size_t n, char *err, size_t err_n) {
    size_t len = strlen(path);
    char *tmp = malloc(len + sizeof(".tmp.XXXXXX"));
    if (!tmp) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp.XXXXXX", sizeof(".tmp.XXXXXX"));
    int fd = mkstemp(tmp);
    if (fd < 0) {
        plan_status st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot create a temporary file next to it: %s", strerror(errno));
        free(tmp);
        return st;
    }
    plan_status st = write_all(fd, data, n, err, err_n);
    if (!st && fchmod(fd, 0644) != 0) st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot set its mode: %s", strerror(errno));
    if (close(fd) != 0 && !st) st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot write: %s", strerror(errno));
    if (!st && rename(tmp, path) != 0) st = plan_errorf(PLAN_ERR_IO, err, err_n, "cannot rename %s to it: %s", tmp, strerror(errno));
    if (st) unlink(tmp);
    free(tmp);
    return st;
}

plan_status plan_write(const plan *p, const char *path, char *err, size_t err_n) {
    uint8_t *data;
    size_t n;
    plan_status st = plan_encode(p, &data, &n, err, err_n);
    if (st) return st;
    st = write_file(path, data, n, err, err_n);
    free(data);
    return st;
}

uint64_t plan_group_size(const plan *p, uint32_t g) {
    if (g == PLAN_NONE) return 1;
    const plan_group *gr = &p->groups[g];
    if (!gr->axes) return gr->n_ranks;
    uint64_t n = 1;
    for (uint32_t i = 0; i < p->meta.n_axes; i++)
        if (gr->axes >> i & 1u) n *= p->meta.mesh[i];
    return n;
}
