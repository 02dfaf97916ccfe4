/*
 * trace.c: the measured timeline of a run (planrun --trace FILE), in the tracks plandump --trace
 * draws for the simulated one, so that the two can be set side by side (tools/compare_trace.py).
 *
 * A track is one stream of one rank. The interpreter adds a slice per instruction it runs
 * (operator, copy, collective, send, receive, record, wait; loops are not instructions that
 * run), with the step, the micro-batch and the layer it ran for. Where backend calls block (the
 * cpu backends) a slice's start and end are the host clock read around the call; a run of sends
 * and receives issued as one group shares the group's times. Where they do not (cuda), the
 * walker asks the backend for a timing mark on the stream before and after each instruction
 * (rt_backend_stamp), and after the step the marks become times (rt_trace_resolve): the GPU's own
 * clock, from the rank's first mark of the step, placed at the host time the step began.
 *
 * Each track is appended to by one thread only (the walker of its stream, or its rank's walker),
 * so no track needs a lock; the count of slices against the cap is atomic. Past the cap (a long
 * run of a large plan) slices are dropped and counted; the file says how many.
 *
 * The file is Chrome trace JSON (Perfetto, chrome://tracing): a process per rank named as
 * plandump names it ("rank 0: stage0 (pp 0, dp 0, tp 0)"), a thread per stream ("stream 0
 * (compute)"), an "X" slice per instruction named by plan_insn_name with the phase as its
 * category and args insn, mb, layer, phase, step; each step's span on a track of its own (tid
 * 1000, "steps"); otherData holds the plan, the backend and the measured step times.
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct trace_track {
    rt_trace_slice *v;
    size_t n, cap;
    size_t resolved;                // slices whose times are seconds (the rest hold marks)
} trace_track;

struct rt_trace {
    int world;
    uint32_t n_streams;
    trace_track *tracks;            // world x n_streams
    uint64_t max_slices, n_slices, dropped; // n_slices and dropped: atomic
    double t0;                      // the host clock when the trace began
    double *step_start, *step_end;  // per step of the run (seconds since t0)
    uint64_t *step_no;
    size_t n_steps, cap_steps;
};

rt_trace *rt_trace_new(int world, uint32_t n_streams, uint64_t max_slices) {
    rt_trace *t = calloc(1, sizeof *t);
    if (!t || world <= 0 || !n_streams) return free(t), NULL;
    t->tracks = calloc((size_t)world * n_streams, sizeof *t->tracks);
    if (!t->tracks) return free(t), NULL;
    t->world = world, t->n_streams = n_streams, t->max_slices = max_slices, t->t0 = rt_clock_s();
    return t;
}

void rt_trace_free(rt_trace *t) {
    if (!t) return;
    for (size_t k = 0; k < (size_t)t->world * t->n_streams; k++) free(t->tracks[k].v);
    free(t->tracks), free(t->step_start), free(t->step_end), free(t->step_no), free(t);
}

double rt_trace_since(const rt_trace *t, double clock) { return clock - t->t0; }

static trace_track *track_of(rt_trace *t, int rank, int stream) {
    if (rank < 0 || rank >= t->world || stream < 0 || (uint32_t)stream >= t->n_streams) return NULL;
    return &t->tracks[(size_t)rank * t->n_streams + (uint32_t)stream];
}

void rt_trace_add(rt_trace *t, int rank, int stream, const rt_trace_slice *s) {
    trace_track *k = track_of(t, rank, stream);
    if (!k) return;
    if (__atomic_add_fetch(&t->n_slices, 1, __ATOMIC_RELAXED) > t->max_slices) {
        __atomic_add_fetch(&t->dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        rt_trace_slice *v = realloc(k->v, cap * sizeof *v);
        if (!v) {
            __atomic_add_fetch(&t->dropped, 1, __ATOMIC_RELAXED);
            return;
        }
        k->v = v, k->cap = cap;
    }
    k->v[k->n++] = *s;
}

int rt_trace_step(rt_trace *t, uint64_t step, double start, double end) {
    if (t->n_steps == t->cap_steps) {
        size_t cap = t->cap_steps ? 2 * t->cap_steps : 64;
        double *a = realloc(t->step_start, cap * sizeof *a);
        if (a) t->step_start = a;
        double *b = realloc(t->step_end, cap * sizeof *b);
        if (b) t->step_end = b;
        uint64_t *c = realloc(t->step_no, cap * sizeof *c);
        if (c) t->step_no = c;
        if (!a || !b || !c) return -1;
        t->cap_steps = cap;
    }
    t->step_start[t->n_steps] = start, t->step_end[t->n_steps] = end, t->step_no[t->n_steps++] = step;
    return 0;
}

int rt_trace_resolve(rt_trace *t, int rank, rt_backend *be, uint32_t n_marks, double base, char *err, size_t err_n) {
    double *sec = n_marks ? malloc(n_marks * sizeof *sec) : NULL;
    if (n_marks && !sec) return snprintf(err, err_n, "out of memory reading %u timing marks", n_marks), -1;
    int rc = n_marks ? rt_backend_stamp_read(be, rank, sec, n_marks, err, err_n) : 0;
    for (uint32_t s = 0; s < t->n_streams; s++) {
        trace_track *k = track_of(t, rank, (int)s);
        for (; k->resolved < k->n; k->resolved++) {
            rt_trace_slice *v = &k->v[k->resolved];
            uint32_t a = (uint32_t)v->start, b = (uint32_t)v->end;
            bool ok = !rc && a < n_marks && b < n_marks;
            v->start = ok ? base + sec[a] : base, v->end = ok ? base + sec[b] : base;
        }
    }
    free(sec);
    return rc;
}

void rt_trace_settle(rt_trace *t, int rank) {
    for (uint32_t s = 0; s < t->n_streams; s++) {
        trace_track *k = track_of(t, rank, (int)s);
        k->resolved = k->n;
    }
}

/* ---- the file ---- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

// The compute stream of a program: the first with an operator, as the simulator picks it.
static uint32_t main_stream(const plan_program *pg) {
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_COMPUTE) return pg->insns[i].stream;
    return 0;
}

static void write_rank_meta(FILE *f, const plan *p, uint32_t q, bool *first) {
    char label[160];
    const plan_program *pg = &p->programs[p->ranks[q].program];
    plan_rank_label(p, q, label, sizeof label);
    fprintf(f, "%s\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %u, \"args\": {\"name\": ", *first ? "" : ",", q);
    json_str(f, label);
    fprintf(f, "}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %u, \"args\": {\"sort_index\": %u}}", q, q);
    uint32_t ms = main_stream(pg);
    for (uint32_t s = 0; s < pg->n_streams; s++)
        fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %u, \"tid\": %u, \"args\": {\"name\": \"stream %u%s\"}}", q, s,
                s, s == ms ? " (compute)" : pg->priority[s] < 0 ? " (high priority)" : "");
    fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %u, \"tid\": %u, \"args\": {\"name\": \"steps\"}}", q,
            RT_TRACE_STEP_TID);
    *first = false;
}

static void write_slices(FILE *f, const plan *p, const rt_trace *t, uint32_t q) {
    const plan_program *pg = &p->programs[p->ranks[q].program];
    for (uint32_t s = 0; s < t->n_streams && s < pg->n_streams; s++) {
        const trace_track *k = &t->tracks[(size_t)q * t->n_streams + s];
        for (size_t j = 0; j < k->resolved; j++) {
            const rt_trace_slice *v = &k->v[j];
            const plan_insn *in = &pg->insns[v->insn];
            const char *ph = plan_phase_name(in->phase), *name = plan_insn_name(in);
            fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
                    "\"args\": {\"insn\": %u, \"mb\": %u, \"layer\": %u, \"phase\": \"%s\", \"step\": %llu}}",
                    name ? name : "?", ph ? ph : "?", q, s, v->start * 1e6, (v->end - v->start) * 1e6, v->insn, v->mb, v->layer,
                    ph ? ph : "?", (unsigned long long)v->step);
        }
    }
    for (size_t j = 0; j < t->n_steps; j++)
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"step %llu\", \"cat\": \"step\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
                "\"args\": {\"step\": %llu}}", (unsigned long long)t->step_no[j], q, RT_TRACE_STEP_TID, t->step_start[j] * 1e6,
                (t->step_end[j] - t->step_start[j]) * 1e6, (unsigned long long)t->step_no[j]);
}

int rt_trace_write(const rt_trace *t, const plan *p, const bool *local, const rt_trace_info *info, FILE *f) {
    fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": \"planrun --trace\", \"plan\": ", f);
    json_str(f, info->plan_path);
    fputs(", \"backend\": ", f);
    json_str(f, info->backend);
    fprintf(f, ", \"f64\": %s, \"dropped_slices\": %llu, \"step_s\": [", info->f64 ? "true" : "false",
            (unsigned long long)t->dropped);
    for (size_t j = 0; j < t->n_steps; j++) fprintf(f, "%s%.9g", j ? ", " : "", t->step_end[j] - t->step_start[j]);
    fputs("]},\n\"traceEvents\": [", f);
    bool first = true;
    for (uint32_t q = 0; q < (uint32_t)t->world && q < p->meta.world; q++) {
        if (local && !local[q]) continue;
        write_rank_meta(f, p, q, &first);
        write_slices(f, p, t, q);
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}

uint64_t rt_trace_dropped(const rt_trace *t) { return t ? t->dropped : 0; }
