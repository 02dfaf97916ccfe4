/*
 * plandump.c: shows, checks and assembles plan files.
 *
 *   plandump [--rank R] [--json | --text | --check-only] PLAN
 *   plandump --assemble TEXT -o PLAN [--force]
 *
 * It reads a plan (all of it, or with --rank only the sections that rank reads: the header, the
 * table, META..RANKS and its own program), runs plan_check on it, and prints a summary a person
 * reads (the default, with the compiler's notes and how many params and inputs take each
 * initializer and data source), the same summary as JSON with the tensors (their sources
 * included) and each program's buffers and shards added (schemas/plan.schema.json), or the
 * full text form that --assemble turns back into the same bytes. Assembling parses the text,
 * checks it and writes the plan (through a temporary file and a rename); --force writes a plan
 * that fails the check (for tests of the readers), as long as the format can hold it.
 *
 * The summary's figures per program: the ranks that run it, its arena (the exact peak, as the
 * plan says), its buffers, streams and events, its instructions by kind (in the program, and
 * executed per step with loops multiplied out), and its communication per step in bytes: for a
 * collective the full tensor each member ends with (all_reduce, all_gather, broadcast), starts
 * with (reduce_scatter) or sends (all_to_all, send_recv), as the cost model counts them; for
 * send and recv the buffer.
 *
 * Exit codes: 0 success, 1 internal error, 2 usage error or a file that cannot be opened,
 * read or written, 4 not a valid plan file (magic, version, CRC, truncation, a malformed
 * section or text), 5 the plan fails plan_check, 6 a stale plan (--model/--cluster). The output is printed before the exit code 5,
 * so a broken plan can still be looked at. Diagnostics go to stderr as "plandump: FILE: message".
 */
#include "plan.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef PLANDUMP_VERSION
#define PLANDUMP_VERSION "0.1.0"
#endif

enum { EXIT_OK = 0, EXIT_INTERNAL = 1, EXIT_USAGE = 2, EXIT_FORMAT = 4, EXIT_INVALID = 5, EXIT_STALE = 6 };

static void usage(FILE *f) {
    fprintf(f,
            "usage: plandump [--rank R] [--json | --text | --check-only] PLAN\n"
            "       plandump --assemble TEXT -o PLAN [--force]\n"
            "       plandump --help | --version\n"
            "\n"
            "plandump shows a plan file that plancc wrote, checks it (plan_check: indices, arena,\n"
            "data flow, matching sends and receives, collective order), and assembles plans from\n"
            "their text form.\n"
            "\n"
            "  (default)          a summary: mesh, micro-batches and schedule, the loss tensor,\n"
            "                     the params' initializers and the inputs' data sources, the\n"
            "                     compiler's notes, and per program the ranks that run it,\n"
            "                     its arena, instructions by kind and communication per step\n"
            "  --json             the summary as JSON, with the tensors (and their sources) and\n"
            "                     each program's buffers and shards (schemas/plan.schema.json)\n"
            "  --text             the whole plan in its text form (runtime/PLAN_FORMAT.md), which\n"
            "                     --assemble turns back into the same bytes\n"
            "  --check-only       print nothing; the exit code says whether the plan is valid\n"
            "  --rank R           read only what rank R reads (its own program section)\n"
            "  --model FILE       refuse the plan (exit 6) unless it was compiled from FILE ...\n"
            "  --cluster FILE     ... and this cluster file (the hashes in its header)\n"
            "  --assemble TEXT    parse the text form TEXT, check it and write the plan to -o PLAN\n"
            "  -o, --output PLAN  where --assemble writes\n"
            "  --force            with --assemble: write the plan even if it fails the check\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version\n"
            "\n"
            "Diagnostics: \"plandump: FILE: message\" on stderr.\n"
            "Exit codes: 0 success, 1 internal error, 2 usage error or a file that cannot be opened,\n"
            "read or written, 4 not a valid plan file (bad magic, version, CRC, truncated, malformed\n"
            "section or text), 5 the plan fails plan_check (the output is printed first), 6 a stale\n"
            "plan (--model or --cluster differ from what it was compiled from).\n");
}

typedef enum out_mode { OUT_SUMMARY, OUT_JSON, OUT_TEXT, OUT_NONE } out_mode;

typedef struct options {
    const char *plan, *assemble, *output;
    const char *model, *cluster;    // verify the plan's hashes against these
    out_mode mode;
    int rank;       // -1: all
    bool force;
} options;

enum { OPT_RANK = 256, OPT_JSON, OPT_TEXT, OPT_CHECK_ONLY, OPT_ASSEMBLE, OPT_FORCE, OPT_MODEL, OPT_CLUSTER };

static int set_mode(options *o, out_mode m, const char *flag) {
    if (o->mode != OUT_SUMMARY && o->mode != m) {
        fprintf(stderr, "plandump: %s: only one of --json, --text and --check-only (see plandump --help)\n", flag);
        return EXIT_USAGE;
    }
    o->mode = m;
    return EXIT_OK;
}

static int rank_option(const char *arg, int *out) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v < 0 || v > INT32_MAX) {
        fprintf(stderr, "plandump: --rank wants an integer in [0, %d], got \"%s\"\n", INT32_MAX, arg);
        return EXIT_USAGE;
    }
    *out = (int)v;
    return EXIT_OK;
}

// The combinations the options allow, once they are all read.
static int check_options(int argc, char **argv, options *o) {
    if (o->assemble) {
        if (optind != argc || !o->output || o->rank >= 0 || o->mode != OUT_SUMMARY || o->model || o->cluster) {
            fprintf(stderr, "plandump: --assemble TEXT takes -o PLAN (and --force) and nothing else (see plandump --help)\n");
            return EXIT_USAGE;
        }
        return EXIT_OK;
    }
    if (o->output || o->force) {
        fprintf(stderr, "plandump: %s goes with --assemble (see plandump --help)\n", o->output ? "-o" : "--force");
        return EXIT_USAGE;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, optind == argc ? "plandump: no plan given (see plandump --help)\n"
                                       : "plandump: more than one plan given (see plandump --help)\n");
        return EXIT_USAGE;
    }
    o->plan = argv[optind];
    return EXIT_OK;
}

static int parse_options(int argc, char **argv, options *o, bool *done) {
    static const struct option longopts[] = {
        {"rank", required_argument, NULL, OPT_RANK},       {"json", no_argument, NULL, OPT_JSON},
        {"text", no_argument, NULL, OPT_TEXT},             {"check-only", no_argument, NULL, OPT_CHECK_ONLY},
        {"assemble", required_argument, NULL, OPT_ASSEMBLE}, {"output", required_argument, NULL, 'o'},
        {"force", no_argument, NULL, OPT_FORCE},           {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},               {"model", required_argument, NULL, OPT_MODEL},
        {"cluster", required_argument, NULL, OPT_CLUSTER}, {NULL, 0, NULL, 0},
    };
    *done = false;
    o->rank = -1;
    opterr = 0;
    int c, st = EXIT_OK;
    while (!st && (c = getopt_long(argc, argv, ":o:hV", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_RANK: st = rank_option(optarg, &o->rank); break;
        case OPT_JSON: st = set_mode(o, OUT_JSON, "--json"); break;
        case OPT_TEXT: st = set_mode(o, OUT_TEXT, "--text"); break;
        case OPT_CHECK_ONLY: st = set_mode(o, OUT_NONE, "--check-only"); break;
        case OPT_ASSEMBLE: o->assemble = optarg; break;
        case 'o': o->output = optarg; break;
        case OPT_FORCE: o->force = true; break;
        case OPT_MODEL: o->model = optarg; break;
        case OPT_CLUSTER: o->cluster = optarg; break;
        case 'h': usage(stdout); *done = true; return EXIT_OK;
        case 'V': printf("plandump %s (plan format %u)\n", PLANDUMP_VERSION, PLAN_VERSION); *done = true; return EXIT_OK;
        case ':': fprintf(stderr, "plandump: option %s needs a value\n", argv[optind - 1]); return EXIT_USAGE;
        default: fprintf(stderr, "plandump: unknown option %s (see plandump --help)\n", argv[optind - 1]); return EXIT_USAGE;
        }
    }
    return st ? st : check_options(argc, argv, o);
}

/* ---- the summary's figures ---- */

#define N_COMM 8 // the six collectives, then send and recv

typedef struct prog_stats {
    uint64_t insns[PLAN_I_KIND_COUNT], executed[PLAN_I_KIND_COUNT];
    uint64_t comm[N_COMM];      // bytes per step
} prog_stats;

static const char *comm_name(int i) { return i < 6 ? plan_coll_name((uint32_t)i) : i == 6 ? "send" : "recv"; }

static uint64_t sat_mul(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// The bytes a communication instruction moves, as the cost model counts them.
static uint64_t comm_bytes(const plan_program *pg, const plan_insn *in) {
    if (!in->nargs) return 0;
    uint64_t first = pg->buffers[pg->args[in->args]].bytes;
    uint64_t last = pg->buffers[pg->args[in->args + in->nargs - 1]].bytes;
    if (in->kind != PLAN_I_COLL) return first;
    const char *n = plan_coll_name(in->code);
    bool ends_with = strcmp(n, "all_reduce") == 0 || strcmp(n, "all_gather") == 0 || strcmp(n, "broadcast") == 0;
    return ends_with ? last : first;
}

// Counts by kind, in the program and per step (each instruction times the loops around it).
static void stats_of(const plan_program *pg, prog_stats *s) {
    memset(s, 0, sizeof(*s));
    struct loop_level {
        uint32_t end;
        uint64_t mult;
    } stack[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= stack[depth - 1].end) depth--;
        uint64_t mult = depth ? stack[depth - 1].mult : 1;
        const plan_insn *in = &pg->insns[i];
        s->insns[in->kind]++;
        s->executed[in->kind] = sat_add(s->executed[in->kind], mult);
        int c = in->kind == PLAN_I_COLL ? in->code : in->kind == PLAN_I_SEND ? 6 : in->kind == PLAN_I_RECV ? 7 : -1;
        if (c >= 0) s->comm[c] = sat_add(s->comm[c], sat_mul(mult, comm_bytes(pg, in)));
        if (in->kind == PLAN_I_LOOP && depth < PLAN_MAX_LOOP_DEPTH)
            stack[depth++] = (struct loop_level){i + 1 + (uint32_t)in->b, sat_mul(mult, (uint64_t)in->a)};
    }
}

static char *fmt_bytes(char *buf, size_t n, uint64_t bytes) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = (double)bytes;
    int u = 0;
    while (u < 6 && x >= 1024) {
        x /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, n, "%.2f %s", x, units[u]);
    return buf;
}

// The ranks that run program k, as runs: "0-3,8-11" (json: "0,1,2,3,...").
static void print_rank_runs(FILE *f, const plan *p, uint32_t k, bool json) {
    bool first = true;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        if (p->ranks[r].program != k) continue;
        uint32_t e = r;
        while (e + 1 < p->n_ranks && p->ranks[e + 1].program == k) e++;
        if (json)
            for (uint32_t q = r; q <= e; q++) fprintf(f, "%s%u", first && q == r ? "" : ", ", q);
        else fprintf(f, e == r ? "%s%u" : "%s%u-%u", first ? "" : ",", r, e);
        first = false;
        r = e;
    }
    if (first && !json) fputs("none", f);
}

static void print_program_summary(FILE *f, const plan *p, uint32_t k) {
    const plan_program *pg = &p->programs[k];
    prog_stats s;
    stats_of(pg, &s);
    char b[32];
    fprintf(f, "program %u \"%s\": ranks ", k, pg->name);
    print_rank_runs(f, p, k, false);
    fprintf(f, "\n  arena           %s (%llu B)\n", fmt_bytes(b, sizeof(b), pg->arena_bytes), (unsigned long long)pg->arena_bytes);
    fprintf(f, "  buffers         %u, streams %u, events %u\n", pg->n_buffers, pg->n_streams, pg->n_events);
    uint64_t total = 0, per_step = 0;
    for (int i = 0; i < PLAN_I_KIND_COUNT; i++) total += s.insns[i], per_step = sat_add(per_step, s.executed[i]);
    fprintf(f, "  instructions    %llu, %llu per step:", (unsigned long long)total, (unsigned long long)per_step);
    const char *sep = " ";
    for (int i = 0; i < PLAN_I_KIND_COUNT; i++)
        if (s.insns[i]) {
            fprintf(f, "%s%s %llu (%llu)", sep, plan_insn_kind_name((uint32_t)i), (unsigned long long)s.insns[i],
                    (unsigned long long)s.executed[i]);
            sep = ", ";
        }
    fputs(total ? "\n  communication   " : " none\n  communication   ", f);
    sep = "";
    for (int i = 0; i < N_COMM; i++)
        if (s.comm[i]) {
            fprintf(f, "%s%s %s", sep, comm_name(i), fmt_bytes(b, sizeof(b), s.comm[i]));
            sep = ", ";
        }
    fputs(*sep ? " per step\n" : "none\n", f);
}

// The compiler's notes, one line each under the heading (control characters shown as ?).
static void print_notes(FILE *f, const char *notes) {
    fputs("  notes           ", f);
    for (const char *c = notes; *c; c++) {
        if (*c == '\n') fputs(c[1] ? "\n                  " : "", f);
        else fputc((unsigned char)*c < 0x20 ? '?' : *c, f);
    }
    fputc('\n', f);
}

// "  params          3: init normal 2, zeros 1": the tensors of one kind (input or param) and
// how many take each source; nothing when the plan has none of that kind.
static void print_sources(FILE *f, const plan *p, uint32_t kind) {
    uint32_t n = 0, count[8] = {0};
    for (uint32_t i = 0; i < p->n_tensors; i++)
        if (p->tensors[i].kind == kind) n++, count[p->tensors[i].source < 8 ? p->tensors[i].source : 7]++;
    if (!n) return;
    bool input = kind == PLAN_T_INPUT;
    fprintf(f, "  %-16s%u:", input ? "inputs" : "params", n);
    const char *sep = input ? " data " : " init ";
    for (uint32_t s = 0; s < 8; s++) {
        const char *name = input ? plan_data_name(s) : plan_init_name(s);
        if (!count[s]) continue;
        fprintf(f, "%s%s %u", sep, name ? name : "?", count[s]);
        sep = ", ";
    }
    fputc('\n', f);
}

static void print_summary(FILE *f, const char *file, const plan *p, int rank, const char *check) {
    const plan_meta *m = &p->meta;
    char b[32];
    fprintf(f, "plan %s: %s, model %s%s%s\n", file, m->compiler[0] ? m->compiler : "(no compiler named)",
            m->model_name ? "\"" : "", m->model_name ? m->model_name : "(none)", m->model_name ? "\"" : "");
    if (m->options) fprintf(f, "  options         \"%s\"\n", m->options);
    fputs("  mesh            ", f);
    for (uint32_t i = 0; i < m->n_axes; i++) fprintf(f, "%s%s %u", i ? " x " : "", m->axis_names[i], m->mesh[i]);
    fprintf(f, "%s = %u rank%s\n", m->n_axes ? "" : "(no axes)", m->world, m->world == 1 ? "" : "s");
    fprintf(f, "  micro-batches   %u, schedule %s, ZeRO stage %u\n", m->micro_batches, plan_schedule_name(m->schedule),
            m->zero_stage);
    fprintf(f, "  estimate        %.6g s per step, peak %s\n", m->est_step_s,
            m->est_peak_bytes >= 0 && m->est_peak_bytes < 1.8e19 ? fmt_bytes(b, sizeof(b), (uint64_t)m->est_peak_bytes) : "?");
    if (m->loss != PLAN_NONE)
        fprintf(f, "  loss            tensor %u \"%s\" (mean over micro-batches)\n", m->loss,
                p->tensors[m->loss].name ? p->tensors[m->loss].name : "");
    fprintf(f, "  items           %u tensor%s, %u group%s, %u program%s\n", p->n_tensors, p->n_tensors == 1 ? "" : "s",
            p->n_groups, p->n_groups == 1 ? "" : "s", p->n_programs, p->n_programs == 1 ? "" : "s");
    print_sources(f, p, PLAN_T_PARAM);
    print_sources(f, p, PLAN_T_INPUT);
    fprintf(f, "  check           %s\n", check ? "FAILED (see the diagnostic)" : "ok");
    if (m->notes) print_notes(f, m->notes);
    if (rank >= 0) fprintf(f, "rank %d runs program %u (only its section was read)\n", rank, p->ranks[rank].program);
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].name) print_program_summary(f, p, k);
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c < 0x20 || *c >= 0x7f) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

// An integral x in full, else the shortest %.Ng that reads back to x; null for a NaN or an
// infinity (JSON has neither).
static void json_num(FILE *f, double x) {
    if (!isfinite(x)) {
        fputs("null", f);
        return;
    }
    if (x == floor(x) && fabs(x) < 9007199254740992.0) {
        fprintf(f, "%.0f", x);
        return;
    }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    fputs(buf, f);
}

static void json_shard(FILE *f, const plan *p, plan_shard s) {
    bool first = true;
    fputc('{', f);
    for (uint32_t a = 0; a < p->meta.n_axes; a++) {
        if (s.map[a] == PLAN_SHARD_R) continue;
        fprintf(f, "%s\"%s\": ", first ? "" : ", ", p->meta.axis_names[a]);
        if (s.map[a] == PLAN_SHARD_V) fputs("\"v\"", f);
        else fprintf(f, "\"d%u\"", s.map[a] - PLAN_SHARD_D(0));
        first = false;
    }
    fputc('}', f);
}

static void json_buffer(FILE *f, const plan *p, const plan_buffer *b, uint32_t i) {
    fprintf(f, "       {\"index\": %u, \"tensor\": ", i);
    if (b->tensor == PLAN_NONE) fputs("null", f);
    else fprintf(f, "%u", b->tensor);
    fprintf(f, ", \"dtype\": \"%s\", \"offset\": %llu, \"bytes\": %llu, \"mb_slots\": %u, \"mb_stride\": %llu, "
            "\"layer_slots\": %u, \"layer_stride\": %llu, \"layer_base\": %u, \"persist\": %s, \"shard\": ",
            plan_dtype_name(b->dtype), (unsigned long long)b->offset, (unsigned long long)b->bytes, b->mb_slots,
            (unsigned long long)b->mb_stride, b->layer_slots, (unsigned long long)b->layer_stride, b->layer_base,
            (b->flags & PLAN_BUF_PERSIST) ? "true" : "false");
    json_shard(f, p, b->shard);
    fputc('}', f);
}

// A tensor's source as the model file writes it: an input's "data": {"kind": ..., "high": H},
// another tensor's "init": {"kind": ..., "mean"/"std" or "low"/"high"}; nothing when it has none.
static void json_source(FILE *f, const plan_tensor *t) {
    if (!t->source) return;
    bool input = t->kind == PLAN_T_INPUT;
    const char *name = input ? plan_data_name(t->source) : plan_init_name(t->source);
    fprintf(f, ", \"%s\": {\"kind\": \"%s\"", input ? "data" : "init", name ? name : "?");
    static const char *const keys[2][2] = {{"mean", "std"}, {"low", "high"}};
    unsigned used = plan_source_args(t->kind, t->source);
    for (unsigned k = 0; k < used; k++) {
        fprintf(f, ", \"%s\": ", input ? "high" : keys[t->source == PLAN_INIT_UNIFORM][k]);
        json_num(f, k ? t->b : t->a);
    }
    fputc('}', f);
}

static void json_tensors(FILE *f, const plan *p) {
    fputs("  \"tensors\": [", f);
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *t = &p->tensors[i];
        fprintf(f, "%s\n    {\"index\": %u, \"name\": ", i ? "," : "", i);
        json_str(f, t->name);
        fprintf(f, ", \"dtype\": \"%s\", \"kind\": \"%s\", \"shape\": [", plan_dtype_name(t->dtype),
                plan_tensor_kind_name(t->kind));
        for (int d = 0; d < t->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        fprintf(f, "], \"copies\": %u", t->copies);
        json_source(f, t);
        fputc('}', f);
    }
    fputs(p->n_tensors ? "\n  ],\n" : "],\n", f);
}

static void json_program(FILE *f, const plan *p, uint32_t k) {
    const plan_program *pg = &p->programs[k];
    prog_stats s;
    stats_of(pg, &s);
    fprintf(f, "    {\"index\": %u, \"name\": ", k);
    json_str(f, pg->name);
    fputs(", \"ranks\": [", f);
    print_rank_runs(f, p, k, true);
    fprintf(f, "], \"arena_bytes\": %llu, \"streams\": %u, \"events\": %u,\n     \"buffers\": [",
            (unsigned long long)pg->arena_bytes, pg->n_streams, pg->n_events);
    for (uint32_t b = 0; b < pg->n_buffers; b++) {
        fputs(b ? ",\n" : "\n", f);
        json_buffer(f, p, &pg->buffers[b], b);
    }
    fputs(pg->n_buffers ? "\n     ],\n" : "],\n", f);
    fputs("     \"instructions\": {", f);
    for (int i = 0; i < PLAN_I_KIND_COUNT; i++)
        fprintf(f, "%s\"%s\": {\"count\": %llu, \"per_step\": %llu}", i ? ", " : "", plan_insn_kind_name((uint32_t)i),
                (unsigned long long)s.insns[i], (unsigned long long)s.executed[i]);
    fputs("},\n     \"comm_bytes_per_step\": {", f);
    for (int i = 0; i < N_COMM; i++) fprintf(f, "%s\"%s\": %llu", i ? ", " : "", comm_name(i), (unsigned long long)s.comm[i]);
    fputs("}}", f);
}

static void print_json(FILE *f, const char *file, const plan *p, int rank, const char *check) {
    const plan_meta *m = &p->meta;
    fputs("{\n  \"file\": ", f);
    json_str(f, file);
    fprintf(f, ",\n  \"format_version\": %u,\n  \"compiler\": ", PLAN_VERSION);
    json_str(f, m->compiler);
    fputs(",\n  \"model\": ", f);
    json_str(f, m->model_name);
    fputs(",\n  \"options\": ", f);
    json_str(f, m->options);
    fprintf(f, ",\n  \"hashes\": {\"model\": \"0x%016llx\", \"cluster\": \"0x%016llx\", \"options\": \"0x%016llx\"},\n",
            (unsigned long long)m->model_hash, (unsigned long long)m->cluster_hash, (unsigned long long)m->options_hash);
    fputs("  \"mesh\": [", f);
    for (uint32_t i = 0; i < m->n_axes; i++) fprintf(f, "%s{\"axis\": \"%s\", \"size\": %u}", i ? ", " : "", m->axis_names[i], m->mesh[i]);
    fprintf(f, "],\n  \"world\": %u,\n  \"micro_batches\": %u,\n  \"schedule\": \"%s\",\n  \"zero_stage\": %u,\n", m->world,
            m->micro_batches, plan_schedule_name(m->schedule), m->zero_stage);
    fputs("  \"estimate\": {\"step_s\": ", f);
    json_num(f, m->est_step_s);
    fputs(", \"peak_bytes\": ", f);
    json_num(f, m->est_peak_bytes);
    fputs("},\n  \"loss\": ", f);
    if (m->loss == PLAN_NONE) fputs("null", f);
    else {
        fprintf(f, "{\"tensor\": %u, \"name\": ", m->loss);
        json_str(f, p->tensors[m->loss].name);
        fputc('}', f);
    }
    fputs(",\n  \"notes\": ", f);
    json_str(f, m->notes);
    fprintf(f, ",\n  \"n_tensors\": %u,\n  \"n_groups\": %u,\n  \"n_programs\": %u,\n", p->n_tensors, p->n_groups, p->n_programs);
    json_tensors(f, p);
    if (rank >= 0) fprintf(f, "  \"rank\": %d,\n", rank);
    fprintf(f, "  \"check\": {\"ok\": %s", check ? "false, \"message\": " : "true");
    if (check) json_str(f, check);
    fputs("},\n  \"programs\": [\n", f);
    bool first = true;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].name) {
            fputs(first ? "" : ",\n", f);
            json_program(f, p, k);
            first = false;
        }
    fputs("\n  ]\n}\n", f);
}

/* ---- the two jobs ---- */

// The exit code for a status; err is its message (the library reports running out of memory
// as PLAN_ERR_IO, which is an internal error here, not a file's fault).
static int exit_for(plan_status st, const char *err) {
    if (st == PLAN_ERR_IO && strcmp(err, "out of memory") == 0) return EXIT_INTERNAL;
    return st == PLAN_OK ? EXIT_OK : st == PLAN_ERR_IO ? EXIT_USAGE : st == PLAN_ERR_FORMAT ? EXIT_FORMAT : EXIT_INVALID;
}

static int flush_stdout(void) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "plandump: cannot write to stdout: %s\n", strerror(errno));
        return EXIT_INTERNAL;
    }
    return EXIT_OK;
}

static int dump(const options *o) {
    plan p;
    char err[1024];
    plan_status st = plan_read(o->plan, o->rank, &p, err, sizeof(err));
    if (st) {
        fprintf(stderr, "plandump: %s: %s\n", o->plan, err);
        return exit_for(st, err);
    }
    if (o->rank >= 0 && (uint32_t)o->rank >= p.meta.world) {
        fprintf(stderr, "plandump: %s: --rank %d is out of range: the plan has %u ranks\n", o->plan, o->rank, p.meta.world);
        plan_free(&p);
        return EXIT_USAGE;
    }
    if (o->model || o->cluster) {
        st = plan_verify_inputs(&p, o->model, o->cluster, err, sizeof(err));
        if (st) {
            fprintf(stderr, "plandump: %s: %s\n", o->plan, err);
            plan_free(&p);
            return st == PLAN_ERR_STALE ? EXIT_STALE : EXIT_USAGE;
        }
    }
    char check[1024];
    plan_status cst = plan_check(&p, check, sizeof(check));
    if (o->mode == OUT_SUMMARY) print_summary(stdout, o->plan, &p, o->rank, cst ? check : NULL);
    else if (o->mode == OUT_JSON) print_json(stdout, o->plan, &p, o->rank, cst ? check : NULL);
    else if (o->mode == OUT_TEXT) plan_print(stdout, &p, o->rank);
    plan_free(&p);
    int rc = flush_stdout();
    if (cst) fprintf(stderr, "plandump: %s: %s\n", o->plan, check);
    return rc ? rc : exit_for(cst, check);
}

// The whole of a file, NUL-terminated; NULL with a diagnostic if it cannot be read.
static char *read_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "plandump: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *more = realloc(buf, cap * 2);
        if (!more) free(buf);
        buf = more;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    if (bad) fprintf(stderr, "plandump: %s: cannot read: %s\n", path, buf ? strerror(errno) : "out of memory");
    fclose(f);
    if (bad) return free(buf), NULL;
    buf[len] = 0;
    *n = len;
    return buf;
}

static int assemble(const options *o) {
    size_t n = 0;
    char *text = read_text(o->assemble, &n);
    if (!text) return EXIT_USAGE;
    plan p;
    char err[1024];
    plan_status st = plan_parse(text, n, o->assemble, &p, err, sizeof(err));
    free(text);
    if (st) {
        fprintf(stderr, "plandump: %s\n", err);
        return exit_for(st, err);
    }
    int rc = EXIT_OK;
    st = plan_check(&p, err, sizeof(err));
    if (st) {
        fprintf(stderr, "plandump: %s: %s%s\n", o->assemble, o->force ? "warning: " : "", err);
        rc = EXIT_INVALID;
    }
    if (!st || o->force) {
        st = plan_write(&p, o->output, err, sizeof(err));
        if (st == PLAN_ERR_FORMAT) fprintf(stderr, "plandump: %s: cannot encode: %s\n", o->assemble, err);
        else if (st) fprintf(stderr, "plandump: %s: %s\n", o->output, err);
        rc = st == PLAN_ERR_FORMAT ? EXIT_INVALID : exit_for(st, err);
    }
    plan_free(&p);
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    bool done;
    int rc = parse_options(argc, argv, &o, &done);
    if (rc || done) return rc;
    return o.assemble ? assemble(&o) : dump(&o);
}
