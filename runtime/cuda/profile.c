/*
 * cuda/profile.c: per-operator times, measured on the GPU, written in the profile format the
 * cost model reads (models/clusters/README.md, "The profile"; compiler/cluster.c).
 *
 * With PLANRUN_CUDA_PROFILE=FILE in the environment, every operator the backend runs is
 * bracketed by two timing events on its stream; at the end of each step (after the GPU has
 * finished) the elapsed times are added to the samples of the operator's key, which is the cost
 * model's: operator name, dtype (of its first output, else its first input) and the per-device
 * shapes of its inputs. The first step is a warm-up (cuDNN's algorithm choice, the collectives'
 * layout exchange, the memory pool growing) and is not counted. When the backend is freed, FILE
 * gets one entry per key with the median time, "seconds", and the number of samples in "note".
 * Without the variable nothing here runs.
 *
 * Timing marks (planrun --trace; rt.h, rt_backend.stamp): cu_stamp records an event with timing
 * on a stream and numbers it; after the step (step_end has waited for the GPU), cu_stamp_read
 * turns marks 0 .. n-1 into seconds from mark 0 with cudaEventElapsedTime (resolution about half
 * a microsecond) and starts the next step's count. The events are kept and reused, so a steady
 * run creates none after its first step.
 *
 * The events serialize nothing, but a kernel's time includes whatever else its stream waited
 * for between the events (none: the events bracket only the operator's own launches); two
 * streams running at once slow each other, so measure with plans of one stream where that
 * matters.
 */
#include "internal.h"

#include <stdlib.h>

typedef struct prof_entry {
    char key[256];
    char op[32], dtype[8];
    int nin;
    int rank[16];
    int64_t shape[16][PLAN_MAX_RANK];
    float *ms;
    size_t n, cap;
} prof_entry;

typedef struct prof_pending {
    cudaEvent_t a, b;
    size_t entry;
} prof_pending;

struct cu_prof {
    char *path;
    uint64_t steps;
    prof_entry *e;
    size_t n_e, cap_e;
    prof_pending *p;
    size_t n_p, cap_p;
    size_t live;                    // pending slots whose events exist
};

int cu_prof_init(cu_state *cu, char *err, size_t err_n) {
    const char *path = getenv("PLANRUN_CUDA_PROFILE");
    if (!path || !*path) return 0;
    cu->prof = calloc(1, sizeof *cu->prof);
    if (!cu->prof || !(cu->prof->path = strdup(path))) return cu_say(err, err_n, "out of memory");
    return 0;
}

static const char *dtype_name(int dt) {
    static const char *const names[] = {"f32", "f16", "bf16", "i32"};
    return dt >= 0 && dt < 4 ? names[dt] : "f32";
}

// The entry of kernel k's key, made on first sight; (size_t)-1 when out of memory.
static size_t entry_of(struct cu_prof *pr, const rt_kernel *k, const char *name) {
    char key[256];
    int dt = k->nout ? k->out[0].dtype : k->nin ? k->in[0].dtype : 0;
    size_t n = (size_t)snprintf(key, sizeof key, "%s|%s|", name, dtype_name(dt));
    for (uint32_t i = 0; i < k->nin && i < 16 && n < sizeof key; i++) {
        if (i) n += (size_t)snprintf(key + n, sizeof key - n, ",");
        for (int d = 0; d < k->in[i].rank && n < sizeof key; d++)
            n += (size_t)snprintf(key + n, sizeof key - n, "%s%lld", d ? "x" : "", (long long)k->in[i].shape[d]);
    }
    for (size_t i = 0; i < pr->n_e; i++)
        if (!strcmp(pr->e[i].key, key)) return i;
    if (pr->n_e == pr->cap_e) {
        size_t cap = pr->cap_e ? 2 * pr->cap_e : 64;
        prof_entry *e = realloc(pr->e, cap * sizeof *e);
        if (!e) return (size_t)-1;
        pr->e = e, pr->cap_e = cap;
    }
    prof_entry *e = &pr->e[pr->n_e];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    snprintf(e->op, sizeof e->op, "%s", name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype_name(dt));
    e->nin = (int)(k->nin < 16 ? k->nin : 16);
    for (int i = 0; i < e->nin; i++) {
        e->rank[i] = k->in[i].rank;
        for (int d = 0; d < k->in[i].rank; d++) e->shape[i][d] = k->in[i].shape[d];
    }
    return pr->n_e++;
}

int cu_prof_begin(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    struct cu_prof *pr = cu->prof;
    if (pr->n_p == pr->cap_p) {
        size_t cap = pr->cap_p ? 2 * pr->cap_p : 256;
        prof_pending *p = realloc(pr->p, cap * sizeof *p);
        if (!p) return cu_say(err, err_n, "out of memory");
        pr->p = p, pr->cap_p = cap;
    }
    prof_pending *q = &pr->p[pr->n_p];
    if (pr->n_p == pr->live) {
        CUDA_CHECK(cudaEventCreate(&q->a));
        CUDA_CHECK(cudaEventCreate(&q->b));
        pr->live++;
    }
    q->entry = entry_of(pr, k, name);
    if (q->entry == (size_t)-1) return cu_say(err, err_n, "out of memory");
    CUDA_CHECK(cudaEventRecord(q->a, st));
    return 0;
}

int cu_prof_end(cu_state *cu, cudaStream_t st, char *err, size_t err_n) {
    struct cu_prof *pr = cu->prof;
    CUDA_CHECK(cudaEventRecord(pr->p[pr->n_p].b, st));
    pr->n_p++;
    return 0;
}

void cu_prof_step(cu_state *cu, bool ok) {
    struct cu_prof *pr = cu->prof;
    if (!pr) return;
    pr->steps++;
    for (size_t i = 0; ok && pr->steps > 1 && i < pr->n_p; i++) {
        float ms = 0;
        prof_entry *e = &pr->e[pr->p[i].entry];
        if (cudaEventElapsedTime(&ms, pr->p[i].a, pr->p[i].b) != cudaSuccess) continue;
        if (e->n == e->cap) {
            size_t cap = e->cap ? 2 * e->cap : 16;
            float *m = realloc(e->ms, cap * sizeof *m);
            if (!m) continue;
            e->ms = m, e->cap = cap;
        }
        e->ms[e->n++] = ms;
    }
    pr->n_p = 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void write_profile(cu_state *cu, struct cu_prof *pr) {
    FILE *f = fopen(pr->path, "w");
    if (!f) {
        fprintf(stderr, "planrun: PLANRUN_CUDA_PROFILE: cannot write %s\n", pr->path);
        return;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, cu->device) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "unknown");
    fprintf(f, "{\n  \"version\": 1,\n  \"device\": \"%s\",\n", prop.name);
    fprintf(f, "  \"description\": \"Measured by planrun --backend cuda (PLANRUN_CUDA_PROFILE), rank %d of %d: each operator's "
               "median time over %llu steps after a warm-up step, CUDA events around its launches.\",\n  \"entries\": [",
            cu->rank, cu->world, (unsigned long long)(pr->steps ? pr->steps - 1 : 0));
    bool first = true;
    for (size_t i = 0; i < pr->n_e; i++) {
        prof_entry *e = &pr->e[i];
        if (!e->n) continue;
        qsort(e->ms, e->n, sizeof *e->ms, cmp_float);
        double med = e->n % 2 ? e->ms[e->n / 2] : 0.5 * (e->ms[e->n / 2 - 1] + e->ms[e->n / 2]);
        fprintf(f, "%s\n    {\"op\": \"%s\", \"dtype\": \"%s\", \"shapes\": [", first ? "" : ",", e->op, e->dtype);
        for (int j = 0; j < e->nin; j++) {
            fprintf(f, "%s[", j ? ", " : "");
            for (int d = 0; d < e->rank[j]; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)e->shape[j][d]);
            fprintf(f, "]");
        }
        fprintf(f, "], \"seconds\": %.9g, \"note\": \"median of %zu\"}", med * 1e-3, e->n);
        first = false;
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f)) fprintf(stderr, "planrun: PLANRUN_CUDA_PROFILE: cannot write %s\n", pr->path);
}

void cu_prof_free(cu_state *cu) {
    struct cu_prof *pr = cu->prof;
    if (!pr) return;
    write_profile(cu, pr);
    for (size_t i = 0; i < pr->live; i++) cudaEventDestroy(pr->p[i].a), cudaEventDestroy(pr->p[i].b);
    for (size_t i = 0; i < pr->n_e; i++) free(pr->e[i].ms);
    free(pr->e), free(pr->p), free(pr->path), free(pr);
    cu->prof = NULL;
}

/* ---- timing marks (planrun --trace) ---- */

int cu_stamp(rt_backend *b, const rt_exec *x, uint32_t *mark, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (cu->n_stamps == cu->cap_stamps) {
        uint32_t cap = cu->cap_stamps ? 2 * cu->cap_stamps : 1024;
        cudaEvent_t *v = realloc(cu->stamps, cap * sizeof *v);
        if (!v) return cu_say(err, err_n, "out of memory for %u timing marks", cap);
        cu->stamps = v;
        for (uint32_t k = cu->cap_stamps; k < cap; k++) v[k] = NULL;
        cu->cap_stamps = cap;
    }
    cudaEvent_t *ev = &cu->stamps[cu->n_stamps];
    if (!*ev) CUDA_CHECK(cudaEventCreate(ev));
    CUDA_CHECK(cudaEventRecord(*ev, st));
    *mark = cu->n_stamps++;
    return 0;
}

int cu_stamp_read(rt_backend *b, int rank, double *seconds, uint32_t n, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    (void)rank; // one rank per process
    uint32_t have = cu->n_stamps;
    cu->n_stamps = 0;
    if (n > have) return cu_say(err, err_n, "%u timing marks asked for, %u recorded this step", n, have);
    for (uint32_t k = 0; k < n; k++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, cu->stamps[0], cu->stamps[k]));
        seconds[k] = 1e-3 * ms;
    }
    return 0;
}

void cu_stamps_free(cu_state *cu) {
    for (uint32_t k = 0; k < cu->cap_stamps; k++)
        if (cu->stamps[k]) cudaEventDestroy(cu->stamps[k]);
    free(cu->stamps);
    cu->stamps = NULL, cu->n_stamps = cu->cap_stamps = 0;
}
