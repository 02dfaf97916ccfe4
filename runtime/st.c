/*
 * st.c: parameters and optimizer state in safetensors files (Hugging Face's format: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
 * padded with spaces to a multiple of 8, then the raw little-endian data).
 *
 * The run holds each tensor in pieces (rt_shard_box) on the ranks whose programs keep a
 * persistent buffer of it; gathering copies every piece into the whole tensor, and loading
 * copies the whole tensor's piece back into every such buffer. Replicated pieces are equal
 * after a synchronous step (every replica runs the same optimizer on the same all-reduced
 * gradient), and gathering keeps that common value bit for bit; where replicas differ (the
 * dense replicas of a background plan, --sync background, between rounds) the element
 * gathered is their mean, the model ShadowSync's rounds converge to. Tensors of a repeated block are saved per copy
 * as NAME.K. Only f32 params and state are saved; __metadata__.step holds the steps taken, so a
 * run that loads the file goes on with the next step's data and adamw's bias correction, and
 * __metadata__["crc32c:NAME"] each tensor's CRC-32C (of its bytes as stored). --load refuses a
 * file that neither planrun (--save) nor plancc-import (--weights: step 0) wrote, whose step is
 * missing or damaged, or any of whose tensors' bytes do not match their checksum, before it
 * changes anything; --compare checks the checksums a file has. Files are written through runtime/plan/file.c's plan_out (a temporary
 * file, fsync, a rename; a device written in place) and read with a size limit (what the plan's
 * tensors take in F64, plus a header), so a directory or /dev/zero is refused with a message.
 * A background round still in flight on a GPU (it outlives its step) is waited for before any
 * piece is read or written (rt_run_drain).
 */
#include "rt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DTYPE_F32 = "F32", *const DTYPE_F64 = "F64";

void rt_named_free(rt_named *t, int n) {
    for (int i = 0; t && i < n; i++) free(t[i].name), free(t[i].data);
    free(t);
}

static bool saved_kind(const plan_tensor *t, bool state) {
    return t->dtype == 0 && (t->kind == 1 || (state && t->kind == 4));
}

// Calls fn for every persistent buffer slot of tensor ti, copy c, on every rank, with the
// slot's data in the run's host staging buffer: downloaded before fn (gather), or uploaded
// after it (load).
typedef void (*piece_fn)(void *ctx, const rt_view *v);
static int for_each_piece(const rt_run *r, uint32_t ti, uint32_t c, bool load, piece_fn fn, void *ctx, char *err, size_t err_n) {
    if (rt_run_drain(r, err, err_n)) return -1; // a background round still writing the params
    for (int q = 0; q < r->world; q++) {
        const rt_rank *rk = &r->ranks[q];
        for (uint32_t bi = 0; rk->local && bi < rk->pg->n_buffers; bi++) {
            const plan_buffer *b = &rk->pg->buffers[bi];
            if (b->tensor != ti || !(b->flags & PLAN_BUF_PERSIST)) continue;
            if (c < b->layer_base || c >= b->layer_base + b->layer_slots) continue;
            uint32_t l = c - b->layer_base;
            rt_view v;
            rt_buffer_view(r, rk, bi, 0, l, &v);
            v.data = r->stage;
            if (rk->scale == 2 && v.dtype == 0) v.dtype = RT_DTYPE_F64;
            if (!load && rt_buffer_read(r, rk, bi, 0, l, r->stage, err, err_n)) return -1;
            fn(ctx, &v);
            if (load && rt_buffer_write(r, rk, bi, 0, l, r->stage, err, err_n)) return -1;
        }
    }
    return 0;
}

// pt: the plan's tensor, whose zigzag order (a constant table along the sequence under
// --cp-form zigzag) maps each stored element to the logical one the whole tensor holds.
typedef struct { rt_named *t; const plan_tensor *pt; bool load, f32; uint32_t *seen; uint8_t *mixed; } piece_ctx;

// Element gi of the whole tensor gets one more replica's value x: the first is kept; while every
// replica agrees it stays (bit for bit); from the first that differs, data holds the running sum
// (gather_mean divides it by the count).
static void gather_one(piece_ctx *p, int64_t gi, double x) {
    double *d = &p->t->data[gi];
    uint32_t c = p->seen[gi]++;
    if (!c) *d = x;
    else if (p->mixed[gi]) *d += x;
    else if (x != *d || x != x) *d = *d * c + x, p->mixed[gi] = 1;
}

// Copies between a piece and the whole tensor (gather: into the whole; load: into the piece).
static void copy_piece(void *arg, const rt_view *v) {
    piece_ctx *p = arg;
    const plan_tensor *pt = p->pt;
    if (v->dtype == RT_DTYPE_F64) {
        double *piece = v->data;
        if (p->load) RT_FOR_EACH_ELEMENT(v, gi, li, piece[li] = p->t->data[rt_logical_index(pt, v, gi)]);
        else RT_FOR_EACH_ELEMENT(v, gi, li, gather_one(p, rt_logical_index(pt, v, gi), piece[li]));
    } else {
        float *piece = v->data;
        p->f32 = true;
        if (p->load) RT_FOR_EACH_ELEMENT(v, gi, li, piece[li] = (float)p->t->data[rt_logical_index(pt, v, gi)]);
        else RT_FOR_EACH_ELEMENT(v, gi, li, gather_one(p, rt_logical_index(pt, v, gi), piece[li]));
    }
}

static char *tensor_name(const plan_tensor *t, uint32_t c) {
    const char *base = t->name ? t->name : "?";
    size_t n = strlen(base) + 16;
    char *s = malloc(n);
    if (s) {
        if (t->copies > 1) snprintf(s, n, "%s.%u", base, c);
        else snprintf(s, n, "%s", base);
    }
    return s;
}

int rt_gather(const rt_run *r, bool state, rt_named **out, int *n, char *err, size_t err_n) {
    const plan *p = r->p;
    int count = 0, k = 0;
    for (uint32_t t = 0; t < p->n_tensors; t++)
        if (saved_kind(&p->tensors[t], state)) count += (int)p->tensors[t].copies;
    rt_named *v = calloc((size_t)count + 1, sizeof *v);
    if (!v) goto oom;
    for (uint32_t ti = 0; ti < p->n_tensors; ti++) {
        const plan_tensor *t = &p->tensors[ti];
        if (!saved_kind(t, state)) continue;
        for (uint32_t c = 0; c < t->copies; c++, k++) {
            rt_named *x = &v[k];
            x->rank = t->rank;
            x->n = 1;
            for (int d = 0; d < t->rank; d++) x->shape[d] = t->shape[d], x->n *= t->shape[d];
            x->name = tensor_name(t, c);
            x->data = calloc((size_t)x->n, sizeof *x->data);
            uint32_t *seen = calloc((size_t)x->n, sizeof *seen);
            uint8_t *mixed = calloc((size_t)x->n, 1);
            if (!x->name || !x->data || !seen || !mixed) { free(seen), free(mixed); rt_named_free(v, k + 1); goto oom; }
            piece_ctx ctx = {.t = x, .pt = t, .seen = seen, .mixed = mixed};
            if (for_each_piece(r, ti, c, false, copy_piece, &ctx, err, err_n)) {
                free(seen), free(mixed);
                rt_named_free(v, k + 1);
                return -1;
            }
            int64_t missing = 0;
            for (int64_t i = 0; i < x->n; i++) {
                missing += !seen[i];
                if (mixed[i]) x->data[i] /= seen[i]; // the replicas' mean, in the pieces' precision
                if (mixed[i] && ctx.f32) x->data[i] = (float)x->data[i];
            }
            free(seen), free(mixed);
            if (missing) {
                snprintf(err, err_n, "tensor \"%s\": %lld of its %lld elements are held by no rank", x->name,
                         (long long)missing, (long long)x->n);
                rt_named_free(v, k + 1);
                return -1;
            }
        }
    }
    *out = v, *n = count;
    return 0;
oom:
    snprintf(err, err_n, "out of memory gathering the parameters");
    return -1;
}

// The bytes tensor t is stored as (F32, rounded, or F64, little-endian: x86-64's order), a
// block at a time: fn(ctx, bytes, n) for each; false when fn fails.
static bool each_block(const rt_named *t, bool f64, bool (*fn)(void *, const void *, size_t), void *ctx) {
    if (f64) return fn(ctx, t->data, (size_t)t->n * 8);
    float buf[1024];
    for (int64_t i = 0; i < t->n; i += 1024) {
        size_t k = t->n - i < 1024 ? (size_t)(t->n - i) : 1024;
        for (size_t j = 0; j < k; j++) buf[j] = (float)t->data[i + (int64_t)j];
        if (!fn(ctx, buf, 4 * k)) return false;
    }
    return true;
}

static bool crc_block(void *ctx, const void *data, size_t n) {
    *(uint32_t *)ctx = plan_crc32c(*(uint32_t *)ctx, data, n);
    return true;
}

static bool write_block(void *ctx, const void *data, size_t n) { return fwrite(data, 1, n, ctx) == n; }

// The CRC-32C of tensor t's stored bytes.
static uint32_t tensor_crc(const rt_named *t, bool f64) {
    uint32_t crc = 0;
    each_block(t, f64, crc_block, &crc);
    return crc;
}

// __metadata__ key of tensor NAME's checksum: "crc32c:NAME".
static void crc_key(const char *name, char *key, size_t n) { snprintf(key, n, "crc32c:%s", name); }

static char *header_json(const rt_named *v, int n, const plan *p, uint64_t done, bool f64) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "producer", "planrun");
    if (p->meta.model_name) cJSON_AddStringToObject(meta, "model", p->meta.model_name);
    char steps[32];
    snprintf(steps, sizeof steps, "%llu", (unsigned long long)done);
    cJSON_AddStringToObject(meta, "step", steps);
    for (int i = 0; i < n; i++) { // each tensor's stored bytes, checked on --load (a damaged file is refused)
        char key[600], crc[16];
        crc_key(v[i].name, key, sizeof key);
        snprintf(crc, sizeof crc, "%08x", tensor_crc(&v[i], f64));
        cJSON_AddStringToObject(meta, key, crc);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(h, v[i].name);
        cJSON_AddStringToObject(t, "dtype", f64 ? DTYPE_F64 : DTYPE_F32);
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < v[i].rank; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)v[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += (uint64_t)v[i].n * (f64 ? 8 : 4);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    return s;
}

// The file through plan_out (runtime/plan/file.c): a temporary file, fsync and a rename (a
// device or FIFO written in place), removed if a signal ends the process mid-way.
static int write_file(const char *path, const rt_named *v, int n, const plan *p, uint64_t done, bool f64, char *err, size_t err_n) {
    char *json = header_json(v, n, p, done, f64);
    if (!json) { snprintf(err, err_n, "out of memory writing %s", path); return -1; }
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    plan_out o;
    char why[1024];
    int rc = -1;
    if (!plan_out_open(&o, path, why, sizeof why)) {
        uint8_t hl[8];
        for (int i = 0; i < 8; i++) hl[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        bool ok = fwrite(hl, 1, 8, o.f) == 8 && fwrite(json, 1, len, o.f) == len;
        for (size_t i = len; i < padded && ok; i++) ok = fputc(' ', o.f) != EOF;
        for (int i = 0; i < n && ok; i++) ok = each_block(&v[i], f64, write_block, o.f);
        if (!ok) snprintf(why, sizeof why, "%s: cannot write the file", path), plan_out_abort(&o);
        else if (!plan_out_commit(&o, why, sizeof why)) rc = 0;
    }
    if (rc) snprintf(err, err_n, "%s", why);
    free(json);
    return rc;
}

int rt_save(const rt_run *r, const char *path, char *err, size_t err_n) {
    rt_named *v;
    int n;
    if (rt_gather(r, true, &v, &n, err, err_n)) return -1;
    int rc = write_file(path, v, n, r->p, r->steps, r->o.f64, err, err_n);
    rt_named_free(v, n);
    return rc;
}

/* ---- reading ---- */

typedef struct st_file {
    uint8_t *bytes;
    size_t n;
    cJSON *header;
    cJSON *meta;                // __metadata__, or NULL
    size_t data_at;
} st_file;

// The file's whole bytes (at most max: a FIFO or /dev/zero stops there; a directory is refused)
// and its JSON header.
static int st_open(st_file *s, const char *path, size_t max, char *err, size_t err_n) {
    memset(s, 0, sizeof *s);
    if (plan_file_read(path, max, &s->bytes, &s->n, err, err_n)) return -1;
    uint64_t hl = 0;
    for (int i = 0; i < 8 && s->n >= 8; i++) hl |= (uint64_t)s->bytes[i] << (8 * i);
    if (s->n < 8 || hl > s->n - 8) {
        free(s->bytes);
        snprintf(err, err_n, "%s: not a safetensors file (header length %llu, file %zu bytes)", path, (unsigned long long)hl, s->n);
        return -1;
    }
    s->header = cJSON_ParseWithLength((const char *)s->bytes + 8, (size_t)hl);
    s->data_at = 8 + (size_t)hl;
    if (!cJSON_IsObject(s->header)) {
        cJSON_Delete(s->header), free(s->bytes);
        snprintf(err, err_n, "%s: the safetensors header is not a JSON object", path);
        return -1;
    }
    s->meta = cJSON_GetObjectItemCaseSensitive(s->header, "__metadata__");
    return 0;
}

// The most bytes a file of tensors v can take: their data in F64, and a header of generous size.
static size_t st_max_bytes(const rt_named *v, int n) {
    uint64_t b = 1u << 24;
    for (int i = 0; i < n; i++) b += 8 * (uint64_t)v[i].n + 1024 + 2 * strlen(v[i].name);
    return b > SIZE_MAX ? SIZE_MAX : (size_t)b;
}

static void st_close(st_file *s) {
    cJSON_Delete(s->header);
    free(s->bytes);
}

// Reads tensor want->name into out (want->n doubles) if the file holds it as F32 or F64 with
// want's shape and its bytes match the CRC-32C that __metadata__ gives it (need_crc: the
// checksum must be there); -1 with a message otherwise.
static int st_tensor(const st_file *s, const char *path, const rt_named *want, double *out, bool need_crc, char *err,
                     size_t err_n) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(s->header, want->name);
    if (!t) { snprintf(err, err_n, "%s: no tensor \"%s\"", path, want->name); return -1; }
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(t, "shape"),
          *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    bool f64 = cJSON_IsString(dt) && !strcmp(dt->valuestring, DTYPE_F64);
    if (!cJSON_IsString(dt) || (strcmp(dt->valuestring, DTYPE_F32) && !f64) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2) {
        snprintf(err, err_n, "%s: /%s: wants dtype F32 or F64, a shape and two data_offsets", path, want->name);
        return -1;
    }
    size_t es = f64 ? 8 : 4;
    bool same = cJSON_GetArraySize(sh) == want->rank;
    for (int d = 0; d < want->rank && same; d++) same = cJSON_GetArrayItem(sh, d)->valuedouble == (double)want->shape[d];
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (!same || e - b != (double)want->n * (double)es || b < 0 || (double)s->data_at + e > (double)s->n) {
        snprintf(err, err_n, "%s: /%s: its shape or byte range does not fit the plan's tensor (%lld elements)", path,
                 want->name, (long long)want->n);
        return -1;
    }
    const uint8_t *at = s->bytes + s->data_at + (size_t)b;
    char key[600];
    crc_key(want->name, key, sizeof key);
    cJSON *crc = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, key) : NULL;
    if (need_crc && !cJSON_IsString(crc)) {
        snprintf(err, err_n, "%s: /__metadata__/%s: missing: planrun's checkpoints carry each tensor's CRC-32C", path, key);
        return -1;
    }
    if (crc) {
        char *end;
        unsigned long want_crc = cJSON_IsString(crc) ? strtoul(crc->valuestring, &end, 16) : 0;
        uint32_t got = plan_crc32c(0, at, (size_t)(e - b));
        if (!cJSON_IsString(crc) || *end || !*crc->valuestring || want_crc != got) {
            snprintf(err, err_n, "%s: /%s: its bytes are damaged: CRC-32C %08x, but /__metadata__/%s says %s", path, want->name,
                     got, key, cJSON_IsString(crc) ? crc->valuestring : "(not a string)");
            return -1;
        }
    }
    for (int64_t i = 0; i < want->n; i++) {
        if (f64) {
            double x;
            memcpy(&x, at + 8 * i, 8);
            out[i] = x;
        } else {
            float x;
            memcpy(&x, at + 4 * i, 4);
            out[i] = x;
        }
    }
    return 0;
}

// A checkpoint's __metadata__ (what --load resumes from): an object, written by planrun, with
// the steps taken. *steps gets them; -1 with a message naming the JSON Pointer otherwise (a
// damaged header used to load as step 0).
static int st_steps(const st_file *s, const char *path, uint64_t *steps, char *err, size_t err_n) {
    if (!cJSON_IsObject(s->meta)) {
        snprintf(err, err_n, "%s: /__metadata__: %s: not a checkpoint planrun wrote (--save)", path,
                 s->meta ? "not an object" : "missing");
        return -1;
    }
    cJSON *prod = cJSON_GetObjectItemCaseSensitive(s->meta, "producer"), *step = cJSON_GetObjectItemCaseSensitive(s->meta, "step");
    if (!cJSON_IsString(prod) || (strcmp(prod->valuestring, "planrun") && strcmp(prod->valuestring, "plancc-import"))) {
        snprintf(err, err_n, "%s: /__metadata__/producer: not \"planrun\" or \"plancc-import\": not a checkpoint planrun "
                 "wrote (--save) or initial weights plancc-import wrote (--weights)", path);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long done = cJSON_IsString(step) ? strtoull(step->valuestring, &end, 10) : 0;
    if (!cJSON_IsString(step) || !*step->valuestring || *end || errno || step->valuestring[0] == '-') {
        snprintf(err, err_n, "%s: /__metadata__/step: %s%s%s is not a step count", path, cJSON_IsString(step) ? "\"" : "",
                 cJSON_IsString(step) ? step->valuestring : step ? "not a string" : "missing", cJSON_IsString(step) ? "\"" : "");
        return -1;
    }
    *steps = done;
    return 0;
}

int rt_load(rt_run *r, const char *path, char *err, size_t err_n) {
    rt_named *v;
    int n;
    if (rt_gather(r, true, &v, &n, err, err_n)) return -1;
    st_file s;
    if (st_open(&s, path, st_max_bytes(v, n), err, err_n)) { rt_named_free(v, n); return -1; }
    uint64_t done = 0;
    int rc = st_steps(&s, path, &done, err, err_n), k = 0;
    // Every tensor is read and checked before any is loaded: a damaged file changes nothing.
    for (int i = 0; i < n && !rc; i++) rc = st_tensor(&s, path, &v[i], v[i].data, true, err, err_n);
    for (uint32_t ti = 0; ti < r->p->n_tensors && !rc; ti++) {
        const plan_tensor *t = &r->p->tensors[ti];
        if (!saved_kind(t, true)) continue;
        for (uint32_t c = 0; c < t->copies && !rc; c++, k++) {
            piece_ctx ctx = {.t = &v[k], .pt = t, .load = true};
            rc = for_each_piece(r, ti, c, true, copy_piece, &ctx, err, err_n);
        }
    }
    // The steps already taken: the data and adamw's bias correction go on from there.
    if (!rc) r->steps = done;
    st_close(&s);
    rt_named_free(v, n);
    return rc;
}

int rt_compare(const rt_run *r, const char *path, double rtol, double atol, rt_diff *worst, char *err, size_t err_n) {
    rt_named *v;
    int n;
    if (rt_gather(r, false, &v, &n, err, err_n)) return -1;
    st_file s;
    if (st_open(&s, path, st_max_bytes(v, n), err, err_n)) { rt_named_free(v, n); return -1; }
    int rc = 0;
    memset(worst, 0, sizeof *worst);
    for (int k = 0; k < n && !rc; k++) {
        double *ref = malloc((size_t)v[k].n * sizeof *ref + 1);
        if (!ref) { rc = -1, snprintf(err, err_n, "out of memory comparing with %s", path); break; }
        if ((rc = st_tensor(&s, path, &v[k], ref, false, err, err_n))) { free(ref); break; }
        for (int64_t i = 0; i < v[k].n; i++) {
            double d = fabs(v[k].data[i] - ref[i]);
            if (d > worst->abs) {
                worst->abs = d;
                snprintf(worst->tensor, sizeof worst->tensor, "%s", v[k].name);
            }
            if (!(d <= atol + rtol * fabs(ref[i]))) {
                snprintf(err, err_n, "tensor \"%s\" differs: element %lld is %.17g, the reference %.17g (difference %.3g > %.3g + %.3g x |reference|)",
                         v[k].name, (long long)i, v[k].data[i], ref[i], d, atol, rtol);
                rc = 1;
                break;
            }
        }
        free(ref);
    }
    st_close(&s);
    rt_named_free(v, n);
    return rc;
}
