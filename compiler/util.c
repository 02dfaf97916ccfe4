/*
 * util.c: the arena, the symbol table, diagnostics, a clock and number formatting that every pass
 * uses.
 *
 * The arena is a list of chunks; allocations bump a pointer and are never freed one by one.
 * A compilation owns one arena and frees it once at the end, which keeps the passes free of
 * ownership bookkeeping and makes leaks impossible by construction. Out of memory aborts with a
 * message: there is nothing useful a compiler can do without memory.
 */
#include "plancc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *pcc_progname = "plancc";
bool pcc_quiet = false;
bool pcc_trial = false;

_Noreturn void pcc_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "%s: internal error: %s:%d: assertion failed: %s\n", pcc_progname, file, line,
            expr);
    abort();
}

/* ---- arena ---- */

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} chunk;

struct pcc_arena {
    chunk *head;
    size_t held;
};

static chunk *chunk_new(size_t size) {
    chunk *c = malloc(sizeof(chunk) + size);
    if (!c) {
        fprintf(stderr, "%s: out of memory (asked for %zu bytes)\n", pcc_progname, size);
        exit(PCC_ERR_INTERNAL);
    }
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

pcc_arena *arena_init(void) {
    pcc_arena *a = calloc(1, sizeof(*a));
    if (!a) {
        fprintf(stderr, "%s: out of memory\n", pcc_progname);
        exit(PCC_ERR_INTERNAL);
    }
    return a;
}

void arena_free(pcc_arena *a) {
    if (!a) return;
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

void *arena_alloc(pcc_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 32768 ? n : 65536;
        c = chunk_new(size);
        a->held += size;
        // A big allocation gets its own chunk behind the current one, so the current one's
        // free space is not wasted.
        if (a->head && n > 32768) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void *arena_realloc(pcc_arena *a, void *p, size_t old_n, size_t new_n) {
    void *q = arena_alloc(a, new_n);
    if (p && old_n) memcpy(q, p, old_n < new_n ? old_n : new_n);
    return q;
}

void *vec_reserve(pcc_arena *a, void *v, size_t elem, int n, int *cap) {
    if (n < *cap) return v;
    int ncap = *cap ? 2 * *cap : 8;
    v = arena_realloc(a, v, elem * (size_t)*cap, elem * (size_t)ncap);
    *cap = ncap;
    return v;
}

char *arena_strdup(pcc_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(a, n);
    memcpy(d, s, n);
    return d;
}

char *arena_printf(pcc_arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    PCC_ASSERT(n >= 0);
    char *s = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

size_t arena_bytes(const pcc_arena *a) { return a ? a->held : 0; }

/* ---- symbol table: open addressing, FNV-1a ---- */

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void symtab_init(pcc_symtab *t, pcc_arena *a, int expect) {
    int cap = 16;
    while (cap < 2 * expect) cap *= 2;
    t->keys = arena_alloc(a, sizeof(*t->keys) * (size_t)cap);
    t->vals = arena_alloc(a, sizeof(*t->vals) * (size_t)cap);
    t->cap = cap;
    t->n = 0;
}

int symtab_get(const pcc_symtab *t, const char *key) {
    if (!t->cap) return -1;
    for (uint32_t i = str_hash(key) & (uint32_t)(t->cap - 1);; i = (i + 1) & (uint32_t)(t->cap - 1)) {
        if (!t->keys[i]) return -1;
        if (strcmp(t->keys[i], key) == 0) return t->vals[i];
    }
}

static void symtab_grow(pcc_symtab *t, pcc_arena *a) {
    pcc_symtab old = *t;
    symtab_init(t, a, old.cap);
    for (int i = 0; i < old.cap; i++)
        if (old.keys[i]) symtab_put(t, a, old.keys[i], old.vals[i]);
}

bool symtab_put(pcc_symtab *t, pcc_arena *a, const char *key, int val) {
    if (!t->cap || 2 * (t->n + 1) > t->cap) symtab_grow(t, a);
    for (uint32_t i = str_hash(key) & (uint32_t)(t->cap - 1);; i = (i + 1) & (uint32_t)(t->cap - 1)) {
        if (!t->keys[i]) {
            t->keys[i] = key;
            t->vals[i] = val;
            t->n++;
            return true;
        }
        if (strcmp(t->keys[i], key) == 0) return false;
    }
}

/* ---- diagnostics ---- */

// Writes s with control characters escaped, so that names taken from the input can never break
// a diagnostic into two lines or forge one.
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
}

pcc_status diag(const char *file, const char *where, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    if (pcc_trial) return PCC_ERR_INPUT; // a trial of the search: it only needs the answer
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: ", pcc_progname);
    put_escaped(stderr, file ? file : "<input>");
    fputc(':', stderr);
    put_escaped(stderr, where ? where : "");
    fputs(": ", stderr);
    put_escaped(stderr, msg);
    fputc('\n', stderr);
    return PCC_ERR_INPUT;
}

// The warnings so far, for the JSON summary (the first PCC_MAX_WARNINGS, each cut at 512 bytes).
static char warned[PCC_MAX_WARNINGS][512];
static int n_warned;

int warnings(const char **out, int max) {
    int n = n_warned < max ? n_warned : max;
    for (int i = 0; i < n; i++) out[i] = warned[i];
    return n;
}

void warn(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n_warned < PCC_MAX_WARNINGS) {
        size_t len = strlen(msg) < sizeof warned[0] ? strlen(msg) : sizeof warned[0] - 1;
        memcpy(warned[n_warned], msg, len);
        warned[n_warned++][len] = 0;
    }
    if (pcc_quiet) return;
    fprintf(stderr, "%s: warning: ", pcc_progname);
    put_escaped(stderr, msg);
    fputc('\n', stderr);
}

pcc_status file_read_all(pcc_arena *a, const char *path, char **out, size_t *len, size_t max_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return diag(path, "", "cannot open: %s", strerror(errno));
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    pcc_status st = PCC_OK;
    for (;;) {
        if (!buf) {
            st = diag(path, "", "out of memory reading the file");
            break;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = diag(path, "", "read error: %s", strerror(errno));
            break;
        }
        if (n > max_bytes) {
            st = diag(path, "", "file is larger than %zu bytes", max_bytes);
            break;
        }
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (st == PCC_OK) {
        *out = arena_alloc(a, n + 1);
        memcpy(*out, buf, n);
        (*out)[n] = 0;
        *len = n;
    }
    free(buf);
    return st;
}

/* ---- formatting ---- */

static char *fmt_scaled(char *buf, size_t n, double x, double base, const char *const *units,
                        int nunits, const char *suffix) {
    int u = 0;
    double ax = x < 0 ? -x : x;
    while (u + 1 < nunits && ax >= base) {
        ax /= base;
        x /= base;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f %s%s", x, units[u], suffix);
    else
        snprintf(buf, n, "%.2f %s%s", x, units[u], suffix);
    return buf;
}

char *arena_append(pcc_arena *a, char *s, size_t *n, size_t *cap, const char *text) {
    size_t len = strlen(text);
    if (*n + len + 1 > *cap) {
        size_t nc = (*cap + len + 1) * 2;
        s = arena_realloc(a, s, *cap, nc);
        *cap = nc;
    }
    memcpy(s + *n, text, len + 1);
    *n += len;
    return s;
}

double clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double clock_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *fmt_count(char *buf, size_t n, double x) {
    static const char *const u[] = {"", "K", "M", "B", "T"};
    return fmt_scaled(buf, n, x, 1000, u, 5, "");
}

char *fmt_bytes(char *buf, size_t n, double x) {
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    return fmt_scaled(buf, n, x, 1024, u, 6, "");
}

char *fmt_flops(char *buf, size_t n, double x) {
    static const char *const u[] = {"", "K", "M", "G", "T", "P", "E"};
    return fmt_scaled(buf, n, x, 1000, u, 7, "FLOP");
}
