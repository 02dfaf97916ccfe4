/*
 * main.c: the plancc driver. It reads like the pipeline: parse options, load the model, verify,
 * differentiate, verify, load the cluster (--cluster, with --nodes/--devices), report. Later phases (transform, schedule, preserve, memory plan, emit)
 * join this row as they land.
 *
 * Exit codes (documented in --help and README.md): 0 success, 1 internal error, 2 invalid input
 * or usage, 3 infeasible.
 */
#include "plancc.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: plancc --check MODEL [--cluster FILE [--nodes N] [--devices N]] [--json] [-v] [-q]\n"
            "       plancc --help | --version\n"
            "\n"
            "plancc compiles a DNN training job (a model graph in JSON and a cluster in JSON) into a\n"
            "parallel execution plan. This build provides the front end:\n"
            "\n"
            "  --check MODEL      load and check MODEL completely, derive its backward pass and\n"
            "                     optimizer step, and print per-operator parameters, FLOPs and kept\n"
            "                     activations, with totals per step and the memory of one device\n"
            "  --cluster FILE     also load and check the cluster FILE, and add a section: its devices,\n"
            "                     whether one step's memory fits one device, and the compute lower\n"
            "                     bound of one step at the device's peak FLOP/s for the model's dtype\n"
            "  --nodes N          the cluster has N nodes (default: as FILE says)\n"
            "  --devices N        the cluster has N devices in all: a whole number of nodes, or fewer\n"
            "                     than one node; on a cpu cluster, any N (one node of N ranks)\n"
            "  -d, --dump LETTERS with --cluster: print phase 1's candidates (t) and phase 2's\n"
            "                     choice per operator with the ILP's figures (s), all devices as one group\n"
            "  --time-limit S     the scheduler's ILP stops after S seconds with its best (default 60)\n"
            "  --mip-gap G        ... or once within relative gap G of the bound (default 1e-4)\n"
            "  --dump-ilp FILE    write the scheduler's ILP as CPLEX LP text\n"
            "  --json             print the --check report as JSON\n"
            "  --micro-batches N  gradient accumulation over N micro-batches (default 1)\n"
            "  -v, --verbose      more detail (IR sizes)\n"
            "  -q, --quiet        no warnings\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version\n"
            "\n"
            "Model and cluster formats: schemas/README.md, schemas/model.schema.json and\n"
            "schemas/cluster.schema.json.\n"
            "Diagnostics: \"plancc: FILE:JSON-POINTER: message\" on stderr.\n"
            "Exit codes: 0 success, 1 internal error, 2 invalid input or usage, 3 infeasible.\n");
}

typedef struct options {
    const char *model;
    const char *cluster; // NULL: no cluster section
    bool check, json, quiet;
    int verbose;
    int micro_batches;
    int nodes, devices;  // 0: as the cluster file says
    const char *dumps;   // -d letters: t (phase 1 candidates), s (phase 2 schedule)
    pcc_ilp_opts ilp;
} options;

enum { OPT_CLUSTER = 256, OPT_NODES, OPT_DEVICES, OPT_TIME_LIMIT, OPT_MIP_GAP, OPT_DUMP_ILP };

static pcc_status num_option(const char *name, const char *arg, double lo, double hi, double *out) {
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg || !(v >= lo && v <= hi)) {
        fprintf(stderr, "plancc: %s wants a number in [%g, %g], got \"%s\"\n", name, lo, hi, arg);
        return PCC_ERR_INPUT;
    }
    *out = v;
    return PCC_OK;
}

// An integer option's value in [lo, hi]; a usage error otherwise.
static pcc_status int_option(const char *name, const char *arg, long lo, long hi, int *out) {
    char *end;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "plancc: %s wants an integer in [%ld, %ld], got \"%s\"\n", name, lo, hi, arg);
        return PCC_ERR_INPUT;
    }
    *out = (int)v;
    return PCC_OK;
}

static pcc_status parse_options(int argc, char **argv, options *o, bool *done) {
    static const struct option longopts[] = {
        {"check", no_argument, NULL, 'c'},   {"json", no_argument, NULL, 'j'},
        {"verbose", no_argument, NULL, 'v'}, {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},    {"version", no_argument, NULL, 'V'},
        {"micro-batches", required_argument, NULL, 'm'}, {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"nodes", required_argument, NULL, OPT_NODES},   {"devices", required_argument, NULL, OPT_DEVICES},
        {"time-limit", required_argument, NULL, OPT_TIME_LIMIT}, {"mip-gap", required_argument, NULL, OPT_MIP_GAP},
        {"dump-ilp", required_argument, NULL, OPT_DUMP_ILP}, {"dump", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    *done = false;
    o->micro_batches = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":cjvqhVd:", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->check = true; break;
        case 'j': o->json = true; break;
        case 'v': o->verbose++; break;
        case 'q': o->quiet = true; break;
        case 'h': usage(stdout); *done = true; return PCC_OK;
        case 'V': printf("plancc %s\n", PCC_VERSION); *done = true; return PCC_OK;
        case 'm': if (int_option("--micro-batches", optarg, 1, 65536, &o->micro_batches)) return PCC_ERR_INPUT; break;
        case OPT_CLUSTER: o->cluster = optarg; break;
        case OPT_NODES: if (int_option("--nodes", optarg, 1, 1 << 20, &o->nodes)) return PCC_ERR_INPUT; break;
        case OPT_DEVICES: if (int_option("--devices", optarg, 1, 1 << 24, &o->devices)) return PCC_ERR_INPUT; break;
        case OPT_TIME_LIMIT: if (num_option("--time-limit", optarg, 0.001, 1e6, &o->ilp.time_limit_s)) return PCC_ERR_INPUT; break;
        case OPT_MIP_GAP: if (num_option("--mip-gap", optarg, 0, 0.999, &o->ilp.mip_gap)) return PCC_ERR_INPUT; break;
        case OPT_DUMP_ILP: o->ilp.dump_lp = optarg; break;
        case 'd':
            if (strspn(optarg, "ts") != strlen(optarg) || !*optarg) {
                fprintf(stderr, "plancc: -d wants letters of \"ts\" (t: phase 1 candidates, s: phase 2 schedule), got \"%s\"\n", optarg);
                return PCC_ERR_INPUT;
            }
            o->dumps = optarg;
            break;
        case ':': fprintf(stderr, "plancc: option %s needs a value\n", argv[optind - 1]); return PCC_ERR_INPUT;
        default: fprintf(stderr, "plancc: unknown option %s (see plancc --help)\n", argv[optind - 1]); return PCC_ERR_INPUT;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, optind == argc ? "plancc: no model given (see plancc --help)\n"
                                       : "plancc: more than one model given (see plancc --help)\n");
        return PCC_ERR_INPUT;
    }
    if ((o->dumps || o->ilp.dump_lp) && !o->cluster) {
        fprintf(stderr, "plancc: %s needs --cluster FILE (the phases cost their choices on a cluster)\n", o->dumps ? "-d" : "--dump-ilp");
        return PCC_ERR_INPUT;
    }
    if ((o->nodes || o->devices) && !o->cluster) {
        fprintf(stderr, "plancc: %s needs --cluster FILE (see plancc --help)\n", o->nodes ? "--nodes" : "--devices");
        return PCC_ERR_INPUT;
    }
    o->model = argv[optind];
    if (!o->check) {
        fprintf(stderr, "plancc: this build only checks models: use plancc --check %s (the three-phase compiler is not built yet)\n", o->model);
        return PCC_ERR_INPUT;
    }
    return PCC_OK;
}

// Phases 1 and 2 on all the cluster's devices as one group, for the -d dumps. (The driver's
// full pipeline, with the mesh, phase 3 and the plan, takes their place as those land.)
static pcc_status run_phases(const pcc_graph *g, const pcc_cluster *c, const options *o) {
    pcc_transform *t = transform(g, c->n_devices);
    if (o->dumps && strchr(o->dumps, 't')) transform_dump(stdout, g, t);
    if (!(o->dumps && strchr(o->dumps, 's')) && !o->ilp.dump_lp) return PCC_OK;
    pcc_sched_opts so = {.group = {c->n_devices, 1}, .memory_bytes = c->memory_bytes, .ilp = o->ilp};
    pcc_sched *s;
    pcc_status st = sched_intra(g, c, t, &so, &s);
    if (!st && o->dumps && strchr(o->dumps, 's')) sched_dump(stdout, g, s);
    return st;
}

int main(int argc, char **argv) {
    options o = {.ilp = {.time_limit_s = 60, .mip_gap = 1e-4, .progress = true}};
    bool done;
    pcc_status st = parse_options(argc, argv, &o, &done);
    if (st || done) return st;
    pcc_quiet = o.quiet;

    pcc_arena *arena = arena_init();
    pcc_graph *g = NULL;
    st = model_load(arena, o.model, &g);
    if (!st) st = graph_check(g);
    if (!st) {
        g->micro_batches = o.micro_batches;
        st = autodiff(g);
    }
    if (!st) st = graph_check(g);
    pcc_cluster *cluster = NULL;
    if (!st && o.cluster) st = cluster_load(arena, o.cluster, o.nodes, o.devices, &cluster);
    if (!st) {
        pcc_report_opts ro = {.json = o.json, .verbose = o.verbose};
        report_print_cluster(stdout, g, cluster, &ro);
    }
    if (!st && cluster && (o.dumps || o.ilp.dump_lp)) st = run_phases(g, cluster, &o);
    if (!st) {
        if (fflush(stdout) != 0) {
            fprintf(stderr, "plancc: cannot write the report\n");
            st = PCC_ERR_INTERNAL;
        }
    }
    arena_free(arena);
    return st;
}
