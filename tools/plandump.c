/*
 * plandump.c: shows, checks and assembles plan files.
 *
 *   plandump [--rank R] [--json | --text | --check-only] PLAN
 *   plandump [--sim] [--trace OUT.json] [--svg OUT.svg] [--ranks A-B] PLAN
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
 * --sim, --trace and --svg simulate one step of the plan (runtime/sim.h: every rank's program on
 * the cost model's instruction times that the plan carries) and print its summary (step time
 * against the plan's estimate, TFLOP/s per GPU and MFU, bubble, exposed communication, memory),
 * write the timeline as Chrome trace JSON (a process per rank, a thread per stream, "X" slices
 * named by operator or collective with micro-batch and layer, memory as "C" counters, each
 * message a flow arrow from send to recv; Perfetto and chrome://tracing open it), or draw it as
 * an SVG picture: the pipeline view (one row per rank, the compute stream's forward and backward
 * passes coloured by phase and numbered by micro-batch, idle time shaded) over the per-rank,
 * per-stream timeline with each rank's live bytes. Without --ranks they show every rank of a
 * small plan and one rank per class of ranks that run alike (sim.h) of a large one.
 *
 * --sim --json prints the simulation's figures as one JSON object (schemas/sim.schema.json).
 * While it reads, checks and simulates, a line on stderr every few seconds says what it is doing
 * (runtime/cli.h; -q silences it).
 *
 * Exit codes, the table all three tools share (runtime/cli.h): 0 success, 1 internal error, 2
 * usage error, 4 not a plan file (unreadable, magic, version, CRC, truncation, a malformed
 * section or text), 5 the plan fails plan_check, 6 a stale plan (--model/--cluster), 8 an output
 * file (--trace, --svg, -o) that cannot be written. The output is printed before the exit code
 * 5, so a broken plan can still be looked at. Diagnostics go to stderr as "plandump: FILE: message".
 */
#include "plan/plan.h"
#include "sim.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef PLANDUMP_VERSION
#define PLANDUMP_VERSION "0.1.0"
#endif

enum { EXIT_OK = CLI_EXIT_OK, EXIT_INTERNAL = CLI_EXIT_INTERNAL, EXIT_USAGE = CLI_EXIT_INPUT, EXIT_FORMAT = CLI_EXIT_NOT_PLAN,
       EXIT_INVALID = CLI_EXIT_CHECK, EXIT_STALE = CLI_EXIT_STALE, EXIT_OUTPUT = CLI_EXIT_FILE, EXIT_LIMIT = CLI_EXIT_LIMIT };

static void usage(FILE *f) {
    fprintf(f,
            "usage: plandump [--rank R] [--json | --text | --check-only] PLAN\n"
            "       plandump [--sim [--json]] [--trace OUT.json] [--svg OUT.svg] [--ranks A-B] PLAN\n"
            "       plandump --sim --background BG.plan [--piece-ms X] PLAN\n"
            "       plandump --assemble TEXT -o PLAN [--force]\n"
            "\n"
            "Shows a plan file (plan_check runs on it first): a summary (the default), the summary as\n"
            "JSON (schemas/plan.schema.json), the text form, or nothing; simulates one step on the cost\n"
            "model; assembles the text form back into a plan.\n"
            "\n"
            "  --rank R           read only the sections rank R reads\n"
            "  --json             the summary as JSON; with --sim, the simulation's figures as JSON\n"
            "                     (schemas/sim.schema.json)\n"
            "  --text             the text form (--assemble turns it back into the same bytes)\n"
            "  --check-only       print nothing; the exit code says whether the plan passes plan_check\n"
            "  --model F --cluster F  refuse the plan (exit 6) unless it was compiled from these files\n"
            "  --sim              simulate one step: step time against the plan's estimate, TFLOP/s\n"
            "                     per GPU and MFU, bubble, exposed communication, memory\n"
            "  --trace OUT.json   the simulated timeline as Chrome trace JSON (Perfetto)\n"
            "  --svg OUT.svg      ... as a picture: the pipeline view over the per-stream timeline\n"
            "  --ranks A-B        the ranks --trace and --svg show (default: all of a small plan)\n"
            "  --background BG.plan  with --sim: pack a one-rank plan into every rank's idle time\n"
            "  --piece-ms X       ... in pieces of at most X ms (default 0.5)\n"
            "  --assemble TEXT -o PLAN  parse, check and write a plan; --force writes one that fails\n"
            "                     plan_check (for tests of the readers)\n"
            "  -q, --quiet        no progress lines on stderr\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version and the plan format version\n"
            "\n"
            "Diagnostics: \"plandump: FILE: message\" on stderr. The summary is printed before exit 5.\n");
    cli_print_exit_codes(f);
}

typedef enum out_mode { OUT_SUMMARY, OUT_JSON, OUT_TEXT, OUT_NONE, OUT_SIM } out_mode;

typedef struct options {
    const char *plan, *assemble, *output;
    const char *model, *cluster;    // verify the plan's hashes against these
    const char *trace, *svg;        // write the simulated timeline here
    const char *background;         // --sim: the plan to multiplex into the idle time
    double piece_ms;                // its longest piece
    out_mode mode;
    int rank;       // -1: all
    bool force;
    bool sim_json;  // --sim --json
    bool quiet;     // -q: no progress lines
    bool ranks;     // --ranks given: ranks_lo..ranks_hi
    uint32_t ranks_lo, ranks_hi;
} options;

enum { OPT_RANK = 256, OPT_JSON, OPT_TEXT, OPT_CHECK_ONLY, OPT_ASSEMBLE, OPT_FORCE, OPT_MODEL, OPT_CLUSTER, OPT_SIM, OPT_TRACE,
       OPT_SVG, OPT_RANKS, OPT_BACKGROUND, OPT_PIECE_MS };

static int set_mode(options *o, out_mode m, const char *flag) {
    if ((o->mode == OUT_SIM && m == OUT_JSON) || (o->mode == OUT_JSON && m == OUT_SIM)) { // --sim --json
        o->mode = OUT_SIM, o->sim_json = true;
        return EXIT_OK;
    }
    if (o->mode != OUT_SUMMARY && o->mode != m) {
        fprintf(stderr, "plandump: %s: only one of --json, --text, --check-only and --sim (see plandump --help)\n", flag);
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

// "A-B" or "A": ranks A to B.
static int ranks_option(const char *arg, options *o) {
    char *end;
    errno = 0;
    unsigned long a = strtoul(arg, &end, 10), b = a;
    if (end != arg && *end == '-' && end[1] >= '0' && end[1] <= '9') b = strtoul(end + 1, &end, 10);
    if (end == arg || *end || errno || a > b || b > UINT32_MAX || arg[0] == '-') {
        fprintf(stderr, "plandump: --ranks wants A-B (A <= B) or A, got \"%s\"\n", arg);
        return EXIT_USAGE;
    }
    o->ranks = true;
    o->ranks_lo = (uint32_t)a, o->ranks_hi = (uint32_t)b;
    return EXIT_OK;
}

static int piece_option(const char *arg, double *out) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end || errno || !(v > 0) || v > 1e6) {
        fprintf(stderr, "plandump: --piece-ms wants a positive number of milliseconds, got \"%s\"\n", arg);
        return EXIT_USAGE;
    }
    *out = v;
    return EXIT_OK;
}

// The combinations the options allow, once they are all read.
static int check_options(int argc, char **argv, options *o) {
    bool sim = o->mode == OUT_SIM || o->trace || o->svg;
    if (o->ranks && !o->trace && !o->svg) {
        fprintf(stderr, "plandump: --ranks goes with --trace or --svg (see plandump --help)\n");
        return EXIT_USAGE;
    }
    if (sim && (o->rank >= 0 || o->assemble || (o->mode != OUT_SUMMARY && o->mode != OUT_SIM))) {
        fprintf(stderr, "plandump: --sim, --trace and --svg simulate the whole plan: not with --rank, --assemble, --json, "
                        "--text or --check-only (see plandump --help)\n");
        return EXIT_USAGE;
    }
    if ((o->background || o->piece_ms > 0) && o->mode != OUT_SIM) {
        fprintf(stderr, "plandump: %s goes with --sim (see plandump --help)\n", o->background ? "--background" : "--piece-ms");
        return EXIT_USAGE;
    }
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
        {"cluster", required_argument, NULL, OPT_CLUSTER}, {"sim", no_argument, NULL, OPT_SIM},
        {"trace", required_argument, NULL, OPT_TRACE},     {"svg", required_argument, NULL, OPT_SVG},
        {"ranks", required_argument, NULL, OPT_RANKS},     {"background", required_argument, NULL, OPT_BACKGROUND},
        {"piece-ms", required_argument, NULL, OPT_PIECE_MS}, {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    *done = false;
    o->rank = -1;
    opterr = 0;
    int c, st = EXIT_OK;
    if (cli_check_options("plandump", argc, argv, ":o:hVq", longopts)) return EXIT_USAGE;
    while (!st && (c = getopt_long(argc, argv, ":o:hVq", longopts, NULL)) != -1) {
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
        case OPT_SIM: st = set_mode(o, OUT_SIM, "--sim"); break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_SVG: o->svg = optarg; break;
        case OPT_RANKS: st = ranks_option(optarg, o); break;
        case OPT_BACKGROUND: o->background = optarg; break;
        case OPT_PIECE_MS: st = piece_option(optarg, &o->piece_ms); break;
        case 'q': o->quiet = true; break;
        case 'h': usage(stdout); *done = true; return EXIT_OK;
        case 'V': printf("plandump %s (plan format %u)\n", PLANDUMP_VERSION, PLAN_VERSION); *done = true; return EXIT_OK;
        case ':': fprintf(stderr, "plandump: option %s needs a value\n", argv[optind - 1]); return EXIT_USAGE;
        default: fprintf(stderr, "plandump: unknown option %s (see plandump --help)\n", argv[optind - 1]); return EXIT_USAGE;
        }
    }
    return st ? st : check_options(argc, argv, o);
}

/* ---- the summary's figures ---- */

enum { COMM_SEND = PLAN_COLL_COUNT, COMM_RECV, N_COMM }; // the collectives (runtime/colls.def), then send and recv

typedef struct prog_stats {
    uint64_t insns[PLAN_I_KIND_COUNT], executed[PLAN_I_KIND_COUNT];
    uint64_t comm[N_COMM];      // bytes per step
} prog_stats;

static const char *comm_name(int i) { return i < COMM_SEND ? plan_coll_name((uint32_t)i) : i == COMM_SEND ? "send" : "recv"; }

static uint64_t sat_mul(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// The bytes a communication instruction moves, as the cost model counts them: a collective's
// out (the whole tensor each member ends with) where its pieces are WHOLE or GATHER, else its in
// (runtime/colls.def).
static uint64_t comm_bytes(const plan_program *pg, const plan_insn *in) {
    if (!in->nargs) return 0;
    if (in->kind != PLAN_I_COLL) return pg->buffers[pg->args[in->args]].bytes;
    plan_pieces pieces = plan_coll_lookup(in->code)->pieces;
    bool ends_with = pieces == PLAN_PIECES_WHOLE || pieces == PLAN_PIECES_GATHER;
    uint32_t np = in->nargs / 2u;
    uint64_t sum = 0; // a bucket moves all its pairs
    for (uint32_t j = 0; j < np; j++) sum = sat_add(sum, pg->buffers[pg->args[in->args + (ends_with ? np : 0) + j]].bytes);
    return sum;
}

// Counts by kind, in the program and per step (each instruction times the loops around it).
static void stats_of(const plan_program *pg, prog_stats *s) {
    memset(s, 0, sizeof(*s));
    struct loop_level {
        uint32_t end;
        uint64_t mult;
        int64_t layers; // the innermost layer loop's count (0: none)
    } stack[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= stack[depth - 1].end) depth--;
        uint64_t mult = depth ? stack[depth - 1].mult : 1;
        int64_t layers = depth ? stack[depth - 1].layers : 0;
        const plan_insn *in = &pg->insns[i];
        if (layers > 0 && in->layer_delta) // the iterations that skip it (plan_insn_skipped)
            mult = mult / (uint64_t)layers * (uint64_t)(layers - (in->layer_delta < 0 ? -in->layer_delta : in->layer_delta));
        s->insns[in->kind]++;
        s->executed[in->kind] = sat_add(s->executed[in->kind], mult);
        int c = in->kind == PLAN_I_COLL ? in->code : in->kind == PLAN_I_SEND ? COMM_SEND : in->kind == PLAN_I_RECV ? COMM_RECV : -1;
        if (c >= 0) s->comm[c] = sat_add(s->comm[c], sat_mul(mult, comm_bytes(pg, in)));
        if (in->kind == PLAN_I_LOOP && depth < PLAN_MAX_LOOP_DEPTH) {
            bool layer = in->code == PLAN_LOOP_LAYER || in->code == PLAN_LOOP_REVERSE_LAYER;
            stack[depth++] = (struct loop_level){i + 1 + (uint32_t)in->b, sat_mul(mult, (uint64_t)plan_loop_trips(in)),
                                                 layer ? in->a : plan_loop_is_background(in->code) ? 0 : layers};
        }
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
    uint32_t n = 0, count[16] = {0}; // a valid plan's sources are below 16; others count as 15
    for (uint32_t i = 0; i < p->n_tensors; i++)
        if (p->tensors[i].kind == kind) n++, count[p->tensors[i].source < 16 ? p->tensors[i].source : 15]++;
    if (!n) return;
    bool input = kind == PLAN_T_INPUT;
    fprintf(f, "  %-16s%u:", input ? "inputs" : "params", n);
    const char *sep = input ? " data " : " init ";
    for (uint32_t s = 0; s < 16; s++) {
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
    static const char *const keys[2][2] = {{"mean", "std"}, {"low", "high"}}, *const teacher[2] = {"scale", "bias"};
    unsigned used = plan_source_args(t->kind, t->source);
    for (unsigned k = 0; k < used; k++) {
        fprintf(f, ", \"%s\": ", input ? (t->source == PLAN_DATA_TEACHER ? teacher[k] : "high")
                                         : keys[t->source == PLAN_INIT_UNIFORM][k]);
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
        if (t->zigzag) fprintf(f, ", \"zigzag\": {\"dim\": %u, \"chunks\": %u}", t->zigzag_dim, t->zigzag);
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
    fputs(", \"model_flops\": ", f);
    json_num(f, m->model_flops);
    fputs(", \"device_peak_flops\": ", f);
    json_num(f, m->device_peak_flops);
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

/* ---- the simulated timeline: Chrome trace JSON and SVG ---- */

// The rank at offset b along mesh axis a from rank q, or PLAN_NONE.
static uint32_t rank_peer(const plan *p, uint32_t q, int32_t a, int32_t b) {
    if (a < 0 || (uint32_t)a >= p->meta.n_axes) return PLAN_NONE;
    uint64_t stride = 1;
    for (uint32_t x = (uint32_t)a + 1; x < p->meta.n_axes; x++) stride *= p->meta.mesh[x];
    int64_t c = (int64_t)p->ranks[q].coord[a] + b;
    if (c < 0 || c >= p->meta.mesh[a]) return PLAN_NONE;
    return (uint32_t)((int64_t)q + b * (int64_t)stride);
}

// The ranks --trace and --svg show: --ranks, else every rank up to `all_up_to`, else the first
// rank of each class. NULL with *n 0 when --ranks is past the plan (a diagnostic printed).
static uint32_t *shown_ranks(const options *o, const plan *p, const sim_result *r, uint32_t all_up_to, uint32_t *n) {
    uint32_t W = p->meta.world, lo = 0, hi = W - 1;
    *n = 0;
    if (o->ranks) {
        if (o->ranks_lo >= W) {
            fprintf(stderr, "plandump: %s: --ranks %u-%u is out of range: the plan has %u ranks\n", o->plan, o->ranks_lo,
                    o->ranks_hi, W);
            return NULL;
        }
        lo = o->ranks_lo, hi = o->ranks_hi < W ? o->ranks_hi : W - 1;
    }
    bool per_class = !o->ranks && W > all_up_to;
    uint32_t *v = malloc(sizeof(uint32_t) * ((per_class ? r->n_classes : hi - lo + 1) + 1));
    if (!v) return NULL;
    if (per_class)
        for (uint32_t k = 0; k < r->n_classes; k++) v[(*n)++] = r->classes[k].rank;
    else
        for (uint32_t q = lo; q <= hi; q++) v[(*n)++] = q;
    return v;
}

static void trace_meta(FILE *f, const plan *p, const sim_result *r, uint32_t q, bool *first) {
    char label[160];
    const sim_class *c = &r->classes[r->rank_class[q]];
    const plan_program *pg = &p->programs[c->program];
    plan_rank_label(p, q, label, sizeof(label));
    fprintf(f, "%s\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %u, \"args\": {\"name\": ", *first ? "" : ",", q);
    json_str(f, label);
    fprintf(f, "}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %u, \"args\": {\"sort_index\": %u}}", q, q);
    for (uint32_t s = 0; s < pg->n_streams; s++)
        fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %u, \"tid\": %u, \"args\": {\"name\": \"stream %u%s\"}}", q,
                s, s, s == c->main_stream ? " (compute)" : pg->priority[s] < 0 ? " (high priority)" : "");
    *first = false;
}

// One interval as an "X" slice, and its message's end of a flow arrow when both ranks are shown.
static void trace_slice(FILE *f, const plan *p, uint32_t q, uint32_t s, const plan_program *pg, const sim_interval *v,
                        const bool *shown) {
    const plan_insn *in = &pg->insns[v->insn];
    const char *ph = plan_phase_name(in->phase);
    fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"insn\": %u, \"mb\": %u, \"layer\": %u, \"phase\": \"%s\"",
            plan_insn_name(in), ph ? ph : "?", q, s, v->start * 1e6, (v->end - v->start) * 1e6, v->insn, v->mb, v->layer, ph ? ph : "?");
    if (in->kind == PLAN_I_COLL) fprintf(f, ", \"group\": %d", in->a);
    uint32_t peer = in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV ? rank_peer(p, q, in->a, in->b) : PLAN_NONE;
    if (peer != PLAN_NONE) fprintf(f, ", \"peer\": %u", peer);
    fputs("}}", f);
    if (peer == PLAN_NONE || !v->msg || !shown[peer]) return;
    uint32_t sender = in->kind == PLAN_I_SEND ? q : peer;
    unsigned long long id = (unsigned long long)v->msg * p->meta.world + sender;
    fprintf(f, ",\n{\"ph\": \"%s\", \"name\": \"message\", \"cat\": \"p2p\", \"id\": %llu, \"pid\": %u, \"tid\": %u, \"ts\": %.3f%s}",
            in->kind == PLAN_I_SEND ? "s" : "f", id, q, s, v->start * 1e6, in->kind == PLAN_I_SEND ? "" : ", \"bp\": \"e\"");
}

// The live-bytes counter of rank q: its value at each start on the compute stream where it changes.
static void trace_memory(FILE *f, const plan *p, const sim_result *r, uint32_t q) {
    const sim_class *c = &r->classes[r->rank_class[q]];
    const uint64_t *live = r->live_bytes[c->program];
    uint64_t last = UINT64_MAX;
    uint32_t s = c->main_stream;
    for (uint32_t i = 0; live && i < c->n_iv[s]; i++) {
        uint64_t x = live[c->iv[s][i].insn];
        if (x == last) continue;
        fprintf(f, ",\n{\"ph\": \"C\", \"name\": \"live bytes\", \"pid\": %u, \"ts\": %.3f, \"args\": {\"live\": %llu}}", q,
                c->iv[s][i].start * 1e6, (unsigned long long)x);
        last = x;
    }
}

static void write_trace(FILE *f, const options *o, const plan *p, const sim_result *r, const uint32_t *ranks, uint32_t n,
                        const bool *shown) {
    fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"plan\": ", f);
    json_str(f, o->plan);
    fputs(", \"simulated_step_s\": ", f);
    json_num(f, r->step_s);
    fputs(", \"estimated_step_s\": ", f);
    json_num(f, p->meta.est_step_s);
    fputs(", \"mfu\": ", f);
    json_num(f, r->mfu);
    fputs(", \"bubble\": ", f);
    json_num(f, r->bubble);
    fputs("},\n\"traceEvents\": [", f);
    bool first = true;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t q = ranks[i];
        const sim_class *c = &r->classes[r->rank_class[q]];
        const plan_program *pg = &p->programs[c->program];
        trace_meta(f, p, r, q, &first);
        for (uint32_t s = 0; s < pg->n_streams; s++)
            for (uint32_t j = 0; j < c->n_iv[s]; j++) trace_slice(f, p, q, s, pg, &c->iv[s][j], shown);
        trace_memory(f, p, r, q);
    }
    fputs("\n]}\n", f);
}

/* The picture. Rows on one time axis, drawn by pixel column: each column of a row takes the
 * colour that covers most of it (none if less than half is covered), and runs of columns of one
 * colour are one rectangle, so a row costs at most its width in elements however many
 * instructions it holds. Labels (micro-batch numbers) go on runs of one phase and micro-batch
 * that are wide enough to hold them. */

enum { SVG_W = 1500, SVG_LEFT = 240, SVG_RIGHT = 20, SVG_ROW = 20, SVG_PLOT = SVG_W - SVG_LEFT - SVG_RIGHT };
enum { K_FWD0, K_FWD1, K_BWD0, K_BWD1, K_RC, K_OPT, K_NONE, K_COLL, K_MSG, K_COPY, K_COUNT };
static const char *const palette[K_COUNT] = {"#4e79a7", "#86acd6", "#3a8a3a", "#7cc470", "#e8b93a",
                                             "#b07aa1", "#9a9a9a", "#e15759", "#f28e2b", "#bab0ac"};
static const char *const C_IDLE = "#fbe3e3";

typedef struct painter {
    FILE *f;
    double t0_px, px_per_s;     // x of time 0, pixels per second
    double y, h;                // the row
    float (*cov)[K_COUNT];      // per pixel column, per colour: the part of the column covered
    char label[16];             // the open label run, from x0 to x1 (pixels), of one phase
    double x0, x1;
    int key;
} painter;

// Colour k covers the span [a, b] seconds of the row.
static void paint(painter *pt, double a, double b, int k) {
    double x0 = a * pt->px_per_s, x1 = b * pt->px_per_s;
    if (x1 <= x0) x1 = x0 + 1e-3;
    for (int c = (int)x0 < 0 ? 0 : (int)x0; c < SVG_PLOT && c < x1; c++) {
        double lo = x0 > c ? x0 : c, hi = x1 < c + 1 ? x1 : c + 1;
        if (hi > lo) pt->cov[c][k] += (float)(hi - lo);
    }
}

static void label_flush(painter *pt) {
    double w = pt->x1 - pt->x0;
    if (pt->label[0] && w >= 6.5 * (double)strlen(pt->label) + 3)
        fprintf(pt->f, "<text x=\"%.1f\" y=\"%.1f\" class=\"in\">%s</text>\n", pt->t0_px + pt->x0 + w / 2, pt->y + pt->h / 2 + 4,
                pt->label);
    pt->label[0] = 0;
}

// A label over [a, b] seconds: joined to the open run when it is the same text of the same key
// (phase) and close enough.
static void label(painter *pt, double a, double b, const char *text, int key) {
    double x0 = a * pt->px_per_s, x1 = b * pt->px_per_s;
    if (pt->label[0] && strcmp(pt->label, text) == 0 && key == pt->key && x0 - pt->x1 < 1.5) {
        pt->x1 = x1;
        return;
    }
    label_flush(pt);
    snprintf(pt->label, sizeof(pt->label), "%s", text);
    pt->x0 = x0, pt->x1 = x1, pt->key = key;
}

// Draws the row's columns as runs of one colour and clears it.
static void row_flush(painter *pt) {
    int run_k = -1, run_at = 0;
    for (int c = 0; c <= SVG_PLOT; c++) {
        int best = -1;
        float most = 0, total = 0;
        for (int k = 0; c < SVG_PLOT && k < K_COUNT; k++) {
            total += pt->cov[c][k];
            if (pt->cov[c][k] > most) most = pt->cov[c][k], best = k;
        }
        if (total < 0.5f) best = -1;
        if (best == run_k && c < SVG_PLOT) continue;
        if (run_k >= 0)
            fprintf(pt->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"/>\n", pt->t0_px + run_at, pt->y,
                    c - run_at, pt->h, palette[run_k]);
        run_k = best, run_at = c;
    }
    memset(pt->cov, 0, sizeof(float) * K_COUNT * SVG_PLOT);
}

static int phase_colour(uint8_t phase, uint32_t mb) {
    switch (phase) {
    case PLAN_PHASE_FWD: return K_FWD0 + (int)(mb & 1);
    case PLAN_PHASE_BWD: return K_BWD0 + (int)(mb & 1);
    case PLAN_PHASE_RECOMPUTE: return K_RC;
    case PLAN_PHASE_OPT: return K_OPT;
    default: return K_NONE;
    }
}

static int kind_colour(const plan_insn *in, uint32_t mb) {
    switch (in->kind) {
    case PLAN_I_COLL: return K_COLL;
    case PLAN_I_SEND: case PLAN_I_RECV: return K_MSG;
    case PLAN_I_COPY: return K_COPY;
    default: return phase_colour(in->phase, mb);
    }
}

static void svg_text(FILE *f, double x, double y, const char *cls, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"%s\">", x, y, cls);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if ((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f) fputc(*s, f);
    }
    fputs("</text>\n", f);
}

// A tick every 1, 2 or 5 x 10^k seconds, labelled, with grid lines from y0 to y1.
static void svg_axis(FILE *f, const painter *pt, double step, double y0, double y1) {
    double raw = step / 8, unit = pow(10, floor(log10(raw > 0 ? raw : 1e-9))), tick = unit;
    if (raw / unit > 5) tick = 10 * unit;
    else if (raw / unit > 2) tick = 5 * unit;
    else if (raw / unit > 1) tick = 2 * unit;
    for (int i = 0; i * tick <= step * 1.0001 && i < 100; i++) {
        double x = pt->t0_px + i * tick * pt->px_per_s, t = i * tick;
        char b[32];
        if (step >= 1) snprintf(b, sizeof(b), "%.4g s", t);
        else if (step >= 1e-3) snprintf(b, sizeof(b), "%.4g ms", t * 1e3);
        else snprintf(b, sizeof(b), "%.4g us", t * 1e6);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x, y0, x, y1);
        svg_text(f, x, y0 - 4, "tick", b);
    }
}

// The pipeline view's row of rank q: the compute stream's intervals by phase and micro-batch.
static void svg_pipeline_row(painter *pt, const plan *p, const sim_result *r, uint32_t q) {
    const sim_class *c = &r->classes[r->rank_class[q]];
    const plan_program *pg = &p->programs[c->program];
    uint32_t s = c->main_stream;
    fprintf(pt->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", pt->t0_px, pt->y,
            r->step_s * pt->px_per_s, pt->h, C_IDLE);
    for (uint32_t i = 0; i < c->n_iv[s]; i++) {
        const sim_interval *v = &c->iv[s][i];
        paint(pt, v->start, v->end, phase_colour(pg->insns[v->insn].phase, v->mb));
    }
    row_flush(pt);
    for (uint32_t i = 0; i < c->n_iv[s]; i++) { // the labels over the rectangles
        const sim_interval *v = &c->iv[s][i];
        uint8_t ph = pg->insns[v->insn].phase;
        char text[16] = "";
        if (ph == PLAN_PHASE_FWD || ph == PLAN_PHASE_BWD || ph == PLAN_PHASE_RECOMPUTE) snprintf(text, sizeof(text), "%u", v->mb);
        label(pt, v->start, v->end, text, ph);
    }
    label_flush(pt);
}

// Rank q's streams, one row each, by kind; then its live bytes as a line under them.
static double svg_rank_rows(painter *pt, const plan *p, const sim_result *r, uint32_t q) {
    const sim_class *c = &r->classes[r->rank_class[q]];
    const plan_program *pg = &p->programs[c->program];
    for (uint32_t s = 0; s < pg->n_streams; s++) {
        char b[32];
        snprintf(b, sizeof(b), "stream %u", s);
        svg_text(pt->f, SVG_LEFT - 8, pt->y + pt->h / 2 + 4, "lab", b);
        for (uint32_t i = 0; i < c->n_iv[s]; i++) {
            const sim_interval *v = &c->iv[s][i];
            paint(pt, v->start, v->end, kind_colour(&pg->insns[v->insn], v->mb));
        }
        row_flush(pt);
        pt->y += pt->h + 2;
    }
    const uint64_t *live = r->live_bytes[c->program];
    double H = 28, base = pt->y + H, top = (double)pg->arena_bytes;
    uint32_t s = c->main_stream;
    if (!live || !c->n_iv[s] || top <= 0) return pt->y;
    svg_text(pt->f, SVG_LEFT - 8, pt->y + H / 2 + 4, "lab", "live bytes");
    // A step line: each value holds until the next; at most one step per pixel (the column's last).
    fprintf(pt->f, "<polyline class=\"mem\" points=\"%.1f,%.1f", pt->t0_px, base);
    double lasty = base;
    for (uint32_t i = 0; i < c->n_iv[s]; i++) {
        double x = pt->t0_px + c->iv[s][i].start * pt->px_per_s, y = base - H * (double)live[c->iv[s][i].insn] / top;
        bool last_in_column = i + 1 == c->n_iv[s] || (int)(pt->t0_px + c->iv[s][i + 1].start * pt->px_per_s) != (int)x;
        if (!last_in_column || y == lasty) continue;
        fprintf(pt->f, " %.1f,%.1f %.1f,%.1f", x, lasty, x, y);
        lasty = y;
    }
    fprintf(pt->f, " %.1f,%.1f\"/>\n", pt->t0_px + r->step_s * pt->px_per_s, lasty);
    return pt->y + H + 6;
}

static void svg_legend(FILE *f, double y) {
    static const struct { int k; const char *name; } items[] = {
        {K_FWD0, "forward (micro-batch n)"}, {K_BWD0, "backward"}, {K_RC, "recomputed forward"}, {K_OPT, "optimizer"},
        {K_COLL, "collective"}, {K_MSG, "send/recv"}, {K_COPY, "copy"}, {-1, "idle (compute stream)"},
    };
    double x = SVG_LEFT;
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\" stroke=\"#666\" stroke-width=\"0.5\"/>", x, y,
                items[i].k < 0 ? C_IDLE : palette[items[i].k]);
        svg_text(f, x + 18, y + 10, "leg", items[i].name);
        x += 30 + 6.5 * (double)strlen(items[i].name);
    }
}

static void write_svg(FILE *f, const options *o, const plan *p, const sim_result *r, const uint32_t *ranks, uint32_t n) {
    const plan_meta *m = &p->meta;
    uint32_t detail = n < 16 ? n : 16; // ranks with their streams drawn
    double height = 120 + n * (SVG_ROW + 4) + 60;
    for (uint32_t i = 0; i < detail; i++)
        height += 30 + p->programs[r->classes[r->rank_class[ranks[i]]].program].n_streams * (SVG_ROW + 2) + 34;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
            "viewBox=\"0 0 %d %.0f\">\n<style>text{font-family:sans-serif;font-size:12px;fill:#222}.t{font-size:15px;font-weight:bold}"
            ".lab{text-anchor:end}.tick{font-size:10px;text-anchor:middle;fill:#555}.in{font-size:10px;text-anchor:middle;fill:#fff}"
            ".h{font-size:13px;font-weight:bold}.grid{stroke:#ddd;stroke-width:0.5}.mem{fill:none;stroke:#8c564b;stroke-width:1}"
            "</style>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", SVG_W, height, SVG_W, height);
    char b[512], s1[32];
    snprintf(b, sizeof(b), "%s: model %s, %u ranks, %u micro-batches, schedule %s", o->plan, m->model_name ? m->model_name : "-",
             m->world, m->micro_batches, plan_schedule_name(m->schedule));
    svg_text(f, 10, 20, "t", b);
    snprintf(s1, sizeof(s1), "%.4g ms", r->step_s * 1e3);
    snprintf(b, sizeof(b), "simulated step %s (estimate %.4g ms); bubble %.1f%%; exposed communication %.4g ms per rank; MFU %.1f%%", s1,
             m->est_step_s * 1e3, 100 * r->bubble, r->exposed_comm_s * 1e3, 100 * r->mfu);
    svg_text(f, 10, 40, "", b);
    svg_legend(f, 52);
    painter pt = {.f = f, .t0_px = SVG_LEFT, .px_per_s = r->step_s > 0 ? SVG_PLOT / r->step_s : 0, .h = SVG_ROW};
    pt.cov = calloc(SVG_PLOT, sizeof(*pt.cov));
    if (!pt.cov) return;
    double y = 100;
    svg_text(f, 10, y - 6, "h", "pipeline view: the compute stream of each rank");
    svg_axis(f, &pt, r->step_s, y + 10, y + 14 + n * (SVG_ROW + 4));
    y += 14;
    for (uint32_t i = 0; i < n; i++, y += SVG_ROW + 4) {
        plan_rank_label(p, ranks[i], b, sizeof(b));
        svg_text(f, SVG_LEFT - 8, y + SVG_ROW / 2 + 4, "lab", b);
        pt.y = y;
        svg_pipeline_row(&pt, p, r, ranks[i]);
    }
    y += 40;
    svg_text(f, 10, y - 6, "h", detail < n ? "per rank and stream (the first 16 ranks shown above)" : "per rank and stream");
    for (uint32_t i = 0; i < detail; i++) {
        plan_rank_label(p, ranks[i], b, sizeof(b));
        svg_text(f, 10, y + 14, "", b);
        pt.y = y + 22;
        y = svg_rank_rows(&pt, p, r, ranks[i]) + 8;
    }
    fputs("</svg>\n", f);
    free(pt.cov);
}

// Writes one output file with `what`; EXIT_OUTPUT with a diagnostic when it cannot.
static int write_file_with(const char *path, void (*what)(FILE *, const void *), const void *ctx) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "plandump: %s: cannot open for writing: %s\n", path, strerror(errno));
        return EXIT_OUTPUT;
    }
    what(f, ctx);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "plandump: %s: cannot write: %s\n", path, strerror(errno));
        return EXIT_OUTPUT;
    }
    return EXIT_OK;
}

typedef struct show_ctx {
    const options *o;
    const plan *p;
    const sim_result *r;
    const uint32_t *ranks;
    uint32_t n;
    const bool *shown;
} show_ctx;

static void trace_to(FILE *f, const void *ctx) {
    const show_ctx *x = ctx;
    write_trace(f, x->o, x->p, x->r, x->ranks, x->n, x->shown);
}

static void svg_to(FILE *f, const void *ctx) {
    const show_ctx *x = ctx;
    write_svg(f, x->o, x->p, x->r, x->ranks, x->n);
}

// One output of the simulation (trace or svg) for the ranks it shows.
static int show_one(const options *o, const plan *p, const sim_result *r, bool svg) {
    uint32_t n;
    uint32_t *ranks = shown_ranks(o, p, r, svg ? 16 : 64, &n);
    bool *shown = calloc((size_t)p->meta.world + 1, sizeof(bool));
    if (!ranks || !shown) {
        free(ranks), free(shown);
        if (!n && o->ranks && o->ranks_lo >= p->meta.world) return EXIT_USAGE;
        fprintf(stderr, "plandump: out of memory\n");
        return EXIT_INTERNAL;
    }
    for (uint32_t i = 0; i < n; i++) shown[ranks[i]] = true;
    show_ctx ctx = {o, p, r, ranks, n, shown};
    int rc = write_file_with(svg ? o->svg : o->trace, svg ? svg_to : trace_to, &ctx);
    free(ranks), free(shown);
    return rc;
}

static int exit_for(plan_status st, const char *err);

// --background: packs that plan into the idle time of p's simulation r and prints the figures.
static int show_mux(const options *o, const plan *p, const sim_result *r) {
    plan bg;
    char err[2048];
    plan_status st = plan_read(o->background, -1, &bg, err, sizeof(err));
    if (st) {
        fprintf(stderr, "plandump: %s: %s\n", o->background, err);
        return exit_for(st, err);
    }
    sim_mux_opts mo = {.piece_s = (o->piece_ms > 0 ? o->piece_ms : 0.5) * 1e-3, .interference = 0.1};
    sim_mux_result m;
    st = sim_mux(p, r, &bg, &mo, &m, err, sizeof(err));
    plan_free(&bg);
    if (st) {
        fprintf(stderr, "plandump: %s: %s\n", o->background, err);
        return exit_for(st, err);
    }
    printf("multiplexed with %s (one GPU's plan, packed into every rank's idle time)\n", o->background);
    sim_mux_print(stdout, &m, "  ");
    return EXIT_OK;
}

// --sim --json: the simulation's figures (schemas/sim.schema.json).
static void print_sim_json(FILE *f, const char *file, const plan *p, const sim_result *r) {
    const plan_meta *m = &p->meta;
    fprintf(f, "{\"plan\": ");
    json_str(f, file);
    fprintf(f, ", \"model\": ");
    json_str(f, m->model_name);
    fprintf(f, ", \"world\": %u, \"micro_batches\": %u, \"schedule\": \"%s\", \"mesh\": {", m->world, m->micro_batches,
            plan_schedule_name(m->schedule));
    for (uint32_t i = 0; i < m->n_axes; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_str(f, m->axis_names[i]);
        fprintf(f, ": %u", m->mesh[i]);
    }
    fprintf(f, "},\n \"step_s\": %.9g, \"estimate_s\": %.9g, \"ratio_to_estimate\": %.9g, \"model_flops\": %.9g, "
               "\"tflops_per_gpu\": %.9g, \"mfu\": %.9g,\n", r->step_s, m->est_step_s,
            m->est_step_s > 0 ? r->step_s / m->est_step_s : 0, m->model_flops, r->tflops_per_gpu, r->mfu);
    fprintf(f, " \"bubble\": {\"mean\": %.9g, \"max\": %.9g, \"max_rank\": %u},\n", r->bubble, r->bubble_max, r->bubble_max_rank);
    fprintf(f, " \"compute_s\": {\"mean\": %.9g, \"max\": %.9g, \"max_rank\": %u},\n", r->compute_s, r->compute_max_s,
            r->compute_max_rank);
    fprintf(f, " \"communication_s\": {\"mean\": %.9g, \"exposed_mean\": %.9g, \"exposed_max\": %.9g, \"exposed_max_rank\": %u},\n",
            r->comm_s, r->exposed_comm_s, r->exposed_comm_max_s, r->exposed_max_rank);
    fprintf(f, " \"memory\": {\"peak_bytes\": %llu, \"peak_program\": %u, \"live_peak_bytes\": %llu},\n",
            (unsigned long long)r->peak_bytes, r->peak_program, (unsigned long long)r->live_peak_bytes);
    fprintf(f, " \"simulation\": {\"classes\": %u, \"instructions\": %llu, \"seconds\": %.6f}}\n", r->n_classes,
            (unsigned long long)r->executed, r->seconds);
}

// --sim, --trace, --svg: simulates p and shows the result.
static int show_sim(const options *o, const plan *p) {
    bool all = o->background != NULL; // multiplexing needs every class's intervals
    sim_opts so = {.intervals = o->trace || o->svg || all, .rank_lo = o->ranks && !all ? o->ranks_lo : 0,
                   .rank_hi = o->ranks && !all ? o->ranks_hi : UINT32_MAX};
    sim_result r;
    char err[2048];
    char what[256];
    snprintf(what, sizeof what, "simulating %s (%u ranks)", o->plan, p->meta.world);
    cli_progress_work(what, NULL, 0);
    plan_status st = sim_run(p, &so, &r, err, sizeof(err));
    cli_progress_work(NULL, NULL, 0);
    if (st) {
        fprintf(stderr, "plandump: %s: %s\n", o->plan, err);
        return exit_for(st, err);
    }
    const plan_meta *m = &p->meta;
    if (o->mode == OUT_SIM && o->sim_json) {
        print_sim_json(stdout, o->plan, p, &r);
    } else if (o->mode == OUT_SIM) {
        printf("plan %s: model %s, ", o->plan, m->model_name ? m->model_name : "(none)");
        for (uint32_t i = 0; i < m->n_axes; i++) printf("%s%s %u", i ? " x " : "", m->axis_names[i], m->mesh[i]);
        printf("%s = %u rank%s, %u micro-batch%s, schedule %s\n", m->n_axes ? "" : "(no axes)", m->world, m->world == 1 ? "" : "s",
               m->micro_batches, m->micro_batches == 1 ? "" : "es", plan_schedule_name(m->schedule));
        sim_print(stdout, p, &r, "  ");
    }
    int rc = o->background ? show_mux(o, p, &r) : EXIT_OK;
    if (!rc && o->trace) rc = show_one(o, p, &r, false);
    if (!rc && o->svg) rc = show_one(o, p, &r, true);
    sim_free(&r);
    return rc;
}

/* ---- the two jobs ---- */

// The exit code for a status; err is its message (the library reports running out of memory
// as PLAN_ERR_IO, which is an internal error here, not a file's fault).
static int exit_for(plan_status st, const char *err) {
    if (st == PLAN_ERR_IO && strcmp(err, "out of memory") == 0) return EXIT_INTERNAL;
    return st == PLAN_OK ? EXIT_OK : st == PLAN_ERR_IO ? EXIT_FORMAT : st == PLAN_ERR_FORMAT ? EXIT_FORMAT : st == PLAN_ERR_LIMIT ? EXIT_LIMIT : EXIT_INVALID;
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
    char err[1024], what[256];
    snprintf(what, sizeof what, "reading %s", o->plan);
    cli_progress_work(what, NULL, 0);
    plan_status st = plan_read(o->plan, o->rank, &p, err, sizeof(err));
    cli_progress_work(NULL, NULL, 0);
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
    snprintf(what, sizeof what, "checking %s (%u ranks)", o->plan, p.meta.world);
    cli_progress_work(what, NULL, 0);
    plan_status cst = plan_check(&p, check, sizeof(check));
    cli_progress_work(NULL, NULL, 0);
    bool sim = o->mode == OUT_SIM || o->trace || o->svg;
    if (o->mode == OUT_SUMMARY && !sim) print_summary(stdout, o->plan, &p, o->rank, cst ? check : NULL);
    else if (o->mode == OUT_JSON) print_json(stdout, o->plan, &p, o->rank, cst ? check : NULL);
    else if (o->mode == OUT_TEXT) plan_print(stdout, &p, o->rank);
    int src = sim && !cst ? show_sim(o, &p) : EXIT_OK;
    plan_free(&p);
    int rc = flush_stdout();
    if (cst) fprintf(stderr, "plandump: %s: %s\n", o->plan, check);
    return rc ? rc : cst ? exit_for(cst, check) : src;
}

// The whole of a file, NUL-terminated, at most PLAN_TEXT_MAX_BYTES (file.c); NULL with a
// diagnostic if it cannot be read.
static char *read_text(const char *path, size_t *n) {
    uint8_t *buf;
    char err[1024];
    if (plan_file_read(path, PLAN_TEXT_MAX_BYTES, &buf, n, err, sizeof err)) {
        fprintf(stderr, "plandump: %s\n", err);
        return NULL;
    }
    return (char *)buf;
}

static int assemble(const options *o) {
    size_t n = 0;
    char *text = read_text(o->assemble, &n);
    if (!text) return EXIT_FORMAT;
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
        rc = st == PLAN_ERR_LIMIT ? EXIT_LIMIT : EXIT_INVALID;
    }
    if (!st || o->force) {
        st = plan_write(&p, o->output, err, sizeof(err));
        if (st == PLAN_ERR_FORMAT) fprintf(stderr, "plandump: %s: cannot encode: %s\n", o->assemble, err);
        else if (st) fprintf(stderr, "plandump: %s: %s\n", o->output, err);
        rc = st == PLAN_ERR_FORMAT ? EXIT_INVALID : st == PLAN_ERR_IO && strcmp(err, "out of memory") ? EXIT_OUTPUT : exit_for(st, err);
    }
    plan_free(&p);
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    bool done;
    int rc = parse_options(argc, argv, &o, &done);
    if (rc || done) return rc;
    cli_progress_start("plandump", o.quiet);
    rc = o.assemble ? assemble(&o) : dump(&o);
    cli_progress_stop();
    return rc;
}
