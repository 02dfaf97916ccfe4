/*
 * data.c: what the runtime writes into parameters and inputs: initializers, synthetic data and
 * token files (nanoGPT's train.bin: little-endian uint16 tokens).
 *
 * Every value is a pure function of a key built from the run's seed, the tensor's name and the
 * element's GLOBAL index (rt.h, rand.c), so a piece of a tensor is the same numbers whichever
 * rank holds it and however the plan splits it: the one-device plan and a 64-way plan of the
 * same model start from the same weights and see the same samples. Keys use the name, not the
 * tensor's index, because plans of one model built with other options number their tensors
 * differently.
 *
 * Tokens and targets are windows of a corpus: row r (every dimension but the last) of
 * micro-batch m of step s starts at rt_sample_offset(seed, s, m, r, n - len - 1), where len is
 * the last dimension; targets are the same window shifted by one. Without --data, the corpus is
 * a virtual one of 2^40 tokens drawn uniformly from [0, high).
 *
 * An input in zigzag order (plan_tensor.zigzag: context parallelism's causal load balance) holds
 * at each stored index the element of its logical index (plan_zigzag_pos along that dimension):
 * every rule above is applied to the logical index, so a rank's piece is its logical chunks.
 *
 * Teacher labels (click-through data with a known generating model): row r of a teacher input
 * is 0 or 1 ~ Bernoulli(sigmoid(bias + scale * z_r)), z_r = (sum of w[input, column] * x over
 * the row's normal floats + sum of e[input, id] over the row's randint ids) / sqrt(terms), over
 * every other input of the plan with a normal or randint source and as many rows. The weights
 * are N(0, 1), keyed by the seed and the input's name, so z is about N(0, 1); the features are
 * recomputed by their own keyed rule (never read from a buffer), so any piece of the labels on
 * any rank agrees with the features of the same rows. rt_teacher_stats sums what was drawn: its
 * mean Bernoulli entropy is the best loss any model can reach on these labels.
 */
#include "rt.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DOMAIN_INIT 0x696e6974ull   // "init"
#define DOMAIN_DATA 0x64617461ull   // "data"
#define DOMAIN_SAMPLE 0x73616d70ull // "samp"
#define DOMAIN_CORPUS 0x636f7270ull // "corp"
#define DOMAIN_TEACHER 0x74636872ull // "tchr"
#define SYNTHETIC_CORPUS (1ull << 40)

static uint64_t name_hash(const char *name) {
    return name ? plan_fnv1a64(name, strlen(name)) : 0;
}

uint64_t rt_sample_offset(uint64_t seed, uint64_t step, uint32_t mb, uint64_t row, uint64_t range) {
    uint64_t k = rt_key(rt_key(rt_key(rt_key(seed, DOMAIN_SAMPLE), step), mb), row);
    return range ? rt_mix(k) % range : 0;
}

int rt_corpus_open(rt_corpus *c, const char *path, char *err, size_t err_n) {
    memset(c, 0, sizeof *c);
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, err_n, "%s: cannot open the token file", path); return -1; }
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 4 || st.st_size % 2) {
        close(fd);
        snprintf(err, err_n, "%s: a token file holds uint16 tokens (an even number of bytes, at least 2 tokens); this one has %lld bytes",
                 path, (long long)st.st_size);
        return -1;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { snprintf(err, err_n, "%s: cannot map the token file", path); return -1; }
    c->map = m, c->map_bytes = (size_t)st.st_size;
    c->tok = m;
    c->n = (uint64_t)st.st_size / 2;
    for (uint64_t i = 0; i < c->n; i++)
        if (c->tok[i] > c->max_token) c->max_token = c->tok[i];
    return 0;
}

int rt_corpus_check(const rt_corpus *c, const plan *p, const char *path, char *err, size_t err_n) {
    for (uint32_t i = 0; c->tok && i < p->n_tensors; i++) {
        const plan_tensor *t = &p->tensors[i];
        if (t->kind != 0 || (t->source != PLAN_DATA_TOKENS && t->source != PLAN_DATA_TARGETS)) continue;
        int64_t len = t->rank ? t->shape[t->rank - 1] : 1;
        if ((uint64_t)len + 2 > c->n) {
            snprintf(err, err_n, "%s: %llu tokens, fewer than input \"%s\"'s rows of %lld plus 2", path,
                     (unsigned long long)c->n, t->name ? t->name : "?", (long long)len);
            return -1;
        }
        if ((double)c->max_token >= t->a) {
            snprintf(err, err_n, "%s: holds token %u, outside the vocabulary of input \"%s\" (%.0f tokens)", path,
                     c->max_token, t->name ? t->name : "?", t->a);
            return -1;
        }
    }
    return 0;
}

void rt_corpus_free(rt_corpus *c) {
    if (c && c->map) munmap(c->map, c->map_bytes);
    if (c) memset(c, 0, sizeof *c);
}

// Stores x as element li of a float view: f32 (rounded) or f64.
static inline void put(const rt_view *v, int64_t li, double x) {
    if (v->dtype == RT_DTYPE_F64) ((double *)v->data)[li] = x;
    else ((float *)v->data)[li] = (float)x;
}

// A parameter in zigzag order (a constant table along the sequence) draws each element by its
// logical index, as an input does (rt_logical_index).
void rt_init_param(const plan_tensor *t, uint64_t seed, uint32_t copy, const rt_view *v) {
    uint64_t base = rt_key(rt_key(rt_key(seed, DOMAIN_INIT), name_hash(t->name)), copy);
    switch (t->source) {
    case PLAN_INIT_ONES: RT_FOR_EACH_ELEMENT(v, gi, li, put(v, li, 1)); break;
    case PLAN_INIT_NORMAL:
        RT_FOR_EACH_ELEMENT(v, gi, li, put(v, li, t->a + t->b * rt_normal(rt_key(base, (uint64_t)rt_logical_index(t, v, gi)))));
        break;
    case PLAN_INIT_UNIFORM:
        RT_FOR_EACH_ELEMENT(v, gi, li,
                            put(v, li, t->a + (t->b - t->a) * rt_uniform(rt_key(base, (uint64_t)rt_logical_index(t, v, gi)))));
        break;
    default: RT_FOR_EACH_ELEMENT(v, gi, li, put(v, li, 0)); break; // zeros
    }
}

// The token at corpus position pos.
static uint32_t corpus_token(const rt_corpus *c, uint64_t seed, uint64_t pos, int64_t high) {
    if (c && c->tok) return c->tok[pos];
    return (uint32_t)(rt_uniform(rt_key(rt_key(seed, DOMAIN_CORPUS), pos)) * (double)high);
}

int64_t rt_logical_index(const plan_tensor *t, const rt_view *v, int64_t gi) {
    if (!t->zigzag || t->zigzag_dim >= v->rank) return gi;
    int64_t inner = 1, n = v->full[t->zigzag_dim];
    for (int d = t->zigzag_dim + 1; d < v->rank; d++) inner *= v->full[d];
    int64_t pos = gi / inner % n;
    return gi + (plan_zigzag_pos(pos, n, t->zigzag) - pos) * inner;
}

static int fill_tokens(const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb, const rt_corpus *c,
                       const rt_view *v, char *err, size_t err_n) {
    int64_t high = (int64_t)t->a, len = v->rank ? v->full[v->rank - 1] : 1;
    uint64_t n = c && c->tok ? c->n : SYNTHETIC_CORPUS;
    if (c && c->tok && (uint64_t)len + 2 > n) {
        snprintf(err, err_n, "input \"%s\": the token file has %llu tokens, fewer than a row of %lld plus 2",
                 t->name, (unsigned long long)n, (long long)len);
        return -1;
    }
    if (c && c->tok && c->max_token >= high) {
        snprintf(err, err_n, "input \"%s\": the token file holds token %u, outside the model's vocabulary of %lld",
                 t->name, c->max_token, (long long)high);
        return -1;
    }
    int shift = t->source == PLAN_DATA_TARGETS;
    int32_t *x = v->data;
    RT_FOR_EACH_ELEMENT(v, gs, li, {
        int64_t gi = rt_logical_index(t, v, gs);
        uint64_t row = (uint64_t)(gi / len), j = (uint64_t)(gi % len);
        uint64_t off = rt_sample_offset(seed, step, mb, row, n - (uint64_t)len - 1);
        x[li] = (int32_t)corpus_token(c, seed, off + j + (uint64_t)shift, high);
    });
    return 0;
}

static uint64_t data_base(const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb) {
    return rt_key(rt_key(rt_key(rt_key(seed, DOMAIN_DATA), name_hash(t->name)), step), mb);
}

static int64_t row_length(const plan_tensor *t) {
    int64_t n = 1;
    for (int d = 1; d < t->rank; d++) n *= t->shape[d];
    return n;
}

// Whether input f is one of label t's features: a normal or randint input with t's rows.
static bool teacher_feature(const plan_tensor *t, const plan_tensor *f) {
    return f != t && f->kind == PLAN_T_INPUT && (f->source == PLAN_DATA_NORMAL || f->source == PLAN_DATA_RANDINT) &&
           f->rank >= 1 && f->shape[0] == t->shape[0];
}

// z of row `row` (the essay above): the same number on every rank that holds a piece of the row.
static double teacher_z(const plan *p, const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb, uint64_t row) {
    double z = 0;
    int64_t terms = 0;
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *f = &p->tensors[i];
        if (!teacher_feature(t, f)) continue;
        uint64_t base = data_base(f, seed, step, mb), wkey = rt_key(rt_key(seed, DOMAIN_TEACHER), name_hash(f->name));
        int64_t len = row_length(f);
        for (int64_t j = 0; j < len; j++) {
            double u = f->source == PLAN_DATA_NORMAL ? rt_normal(rt_key(base, row * (uint64_t)len + (uint64_t)j))
                                                     : rt_uniform(rt_key(base, row * (uint64_t)len + (uint64_t)j));
            if (f->source == PLAN_DATA_NORMAL) z += rt_normal(rt_key(wkey, (uint64_t)j)) * u;
            else z += rt_normal(rt_key(wkey, (uint64_t)(int32_t)(u * f->a))); // the id's weight
        }
        terms += len;
    }
    return terms ? z / sqrt((double)terms) : 0;
}

static struct {
    pthread_mutex_t lock;
    rt_teacher_stats s;
} teacher_sum = {.lock = PTHREAD_MUTEX_INITIALIZER};

void rt_teacher_stats_get(rt_teacher_stats *s) {
    pthread_mutex_lock(&teacher_sum.lock);
    *s = teacher_sum.s;
    pthread_mutex_unlock(&teacher_sum.lock);
}

static void fill_teacher(const plan *p, const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb,
                         const rt_view *v) {
    uint64_t base = data_base(t, seed, step, mb);
    int64_t len = row_length(t), last_row = -1;
    double prob = 0, h = 0;
    rt_teacher_stats s = {0};
    RT_FOR_EACH_ELEMENT(v, gs, li, {
        int64_t gi = rt_logical_index(t, v, gs), row = gi / len;
        if (row != last_row) {
            prob = 1 / (1 + exp(-(t->b + t->a * teacher_z(p, t, seed, step, mb, (uint64_t)row))));
            h = (prob > 0 ? -prob * log(prob) : 0) + (prob < 1 ? -(1 - prob) * log1p(-prob) : 0);
            last_row = row;
        }
        double y = rt_uniform(rt_key(base, (uint64_t)gi)) < prob ? 1 : 0;
        put(v, li, y);
        s.labels++, s.sum_label += y, s.sum_prob += prob, s.sum_entropy += h;
    });
    pthread_mutex_lock(&teacher_sum.lock);
    teacher_sum.s.labels += s.labels, teacher_sum.s.sum_label += s.sum_label;
    teacher_sum.s.sum_prob += s.sum_prob, teacher_sum.s.sum_entropy += s.sum_entropy;
    pthread_mutex_unlock(&teacher_sum.lock);
}

int rt_fill_input(const plan *p, const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb, const rt_corpus *c,
                  const rt_view *v, char *err, size_t err_n) {
    uint64_t base = data_base(t, seed, step, mb);
    int32_t *i32 = v->data;
    int64_t last = v->rank ? v->full[v->rank - 1] : 1;
    switch (t->source) {
    case PLAN_DATA_NORMAL:
        RT_FOR_EACH_ELEMENT(v, gi, li, put(v, li, rt_normal(rt_key(base, (uint64_t)rt_logical_index(t, v, gi)))));
        return 0;
    case PLAN_DATA_BINARY:
        RT_FOR_EACH_ELEMENT(v, gi, li, put(v, li, rt_uniform(rt_key(base, (uint64_t)rt_logical_index(t, v, gi))) < 0.5 ? 0 : 1));
        return 0;
    case PLAN_DATA_RANDINT:
        RT_FOR_EACH_ELEMENT(v, gi, li, i32[li] = (int32_t)(rt_uniform(rt_key(base, (uint64_t)rt_logical_index(t, v, gi))) * t->a));
        return 0;
    case PLAN_DATA_ARANGE: RT_FOR_EACH_ELEMENT(v, gi, li, i32[li] = (int32_t)(rt_logical_index(t, v, gi) % last)); return 0;
    case PLAN_DATA_TOKENS: case PLAN_DATA_TARGETS: return fill_tokens(t, seed, step, mb, c, v, err, err_n);
    case PLAN_DATA_TEACHER: fill_teacher(p, t, seed, step, mb, v); return 0;
    default:
        snprintf(err, err_n, "input \"%s\" has no data source", t->name ? t->name : "?");
        return -1;
    }
}
