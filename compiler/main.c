/*
 * main.c: the plancc driver. It reads like the pipeline: parse options, load the model, verify,
 * differentiate, verify, load the cluster (--cluster, with --nodes/--devices), report. Later phases (transform, schedule, preserve, memory plan, emit)
 * join this row as they land.
 *
 * Exit codes (documented in --help and README.md): 0 success, 1 internal error, 2 invalid input
 * or usage, 3 infeasible.
 */
#include "plancc.h"
#include "sim.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: plancc MODEL --cluster FILE [-o PLAN] [--nodes N | --devices N] [strategy] [options]\n"
            "       plancc --check MODEL [--cluster FILE [--nodes N] [--devices N]] [--json] [-v] [-q]\n"
            "       plancc --help | --version\n"
            "\n"
            "plancc compiles a DNN training job (a model graph in JSON and a cluster in JSON) into a\n"
            "parallel execution plan: phase 1 splits every operator, phase 2 picks the splits (an ILP\n"
            "solved with GLPK), the device mesh and the pipeline, phase 3 inserts the collectives and\n"
            "sends that keep every producer->consumer edge correct; the memory planner places every\n"
            "buffer; the plan file is verified (plan_check) and written.\n"
            "\n"
            "  -o, --output PLAN  write the plan here (default: MODEL's name + .plan)\n"
            "  --cluster FILE     the cluster (models/clusters/*.json)\n"
            "  --nodes N          the cluster has N nodes (default: as FILE says)\n"
            "  --devices N        the cluster has N devices in all: a whole number of nodes, or fewer\n"
            "                     than one node; on a cpu cluster without a network, any N (one node\n"
            "                     of N ranks)\n"
            "strategy (default --auto):\n"
            "  --auto             search every factorization pp x dp x tp of the devices, each with the\n"
            "                     ILP for its tensor-parallel splits, and keep the fastest that fits\n"
            "  --dp N --tp N --pp N\n"
            "                     the Megatron-LM template: batch split over dp, tensor parallelism of\n"
            "                     tp (inside a node), pp pipeline stages; the product is the device count\n"
            "  --tp-batch         with the template: the ILP may also split the batch over the tp group\n"
            "                     (data-parallel operators beside sharded ones, as --auto tries; with\n"
            "                     --dp 1 --tp N, DLRM's layout: embedding tables sharded over all N with\n"
            "                     all-to-all exchanges, the dense layers data-parallel). Implied by\n"
            "                     --sync background where the batch divides by dp x tp\n"
            );
    fprintf(f,
            "  --burst            DeepPool's burst parallelism: every layer data-parallel on its own number\n"
            "                     of devices (1, 2, 4, ... all; a power of two), chosen by a dynamic program\n"
            "                     over the layers on the cost model, with the activation moves between\n"
            "                     widths and each layer's gradient all-reduce; pair it with --global-batch\n"
            "  --amp-limit X      with --burst: DeepPool's GPU-time amplification limit (X > 1; default none)\n"
            "  --burst-widths L   with --burst: the device count of every layer given, comma-separated\n"
            "                     (for tests and experiments; plancc prints the layers)\n"
            "  --micro-batches N  micro-batches per step, the gradient accumulation (default 1; with --auto\n"
            "                     and --global-batch, searched: the fastest count on the cost model)\n"
            "  --global-batch N   samples per step; the model's batch dimension becomes N divided by the\n"
            "                     micro-batches (default: the model file's batch is one micro-batch step)\n"
            "  --micro-batch-size N\n"
            "                     samples per micro-batch on each data-parallel replica (needs --dp):\n"
            "                     with --global-batch, micro-batches = N_global / (N x dp), as Megatron-LM's\n"
            "                     --micro-batch-size and --global-batch-size\n"
            "  --virtual-stages V model chunks per pipeline device: Megatron-LM's interleaved 1F1B\n"
            "                     (needs --pp > 1 and micro-batches a multiple of pp; not with --zero 2)\n"
            "  --schedule S       gpipe or 1f1b (default 1f1b when pp > 1)\n"
            "  --zero N           ZeRO stage 0..3 over dp: 1 shards the optimizer state (gradients summed\n"
            "                     whole over the micro-batches, reduce-scattered once); 2 also the\n"
            "                     gradients (each micro-batch's reduce-scattered and summed in the shard);\n"
            "                     3 also the parameters\n"
            "  --bucket-mb X      gradient synchronization in buckets of X MB (10^6 bytes per rank), in the\n"
            "                     order the backward pass finishes the gradients, each issued as soon as its\n"
            "                     last gradient is ready (PyTorch DDP's bucket_cap_mb; default 25); 0: one\n"
            "                     collective per parameter\n"
            "  --recompute R      none, full (recompute every block operator in the backward pass) or\n"
            "                     auto (the ILP decides per operator; default)\n"
            "  --tf32             cost f32 matrix products and convolutions at the TF32 tensor-core peak\n"
            "                     (what planrun --tf32 and PyTorch's allow_tf32 run); default: the f32 peak\n"
            "  --time-limit S     the ILP stops after S seconds with its best (default 60)\n"
            "  --mip-gap G        ... or once within relative gap G of the bound (default 1e-4)\n"
            "  --dump-ilp FILE    write the ILP as CPLEX LP text\n"
            "  --estimate-only    plan the strategy and print the cost model's estimate of a step and its\n"
            "                     parts (with --json, as JSON); write no plan\n"
            "  -d, --dump LETTERS print phase 1's candidates (t) and phase 2's choice per operator (s)\n");
    fputs(
            "  --sync S           how replicas of the dense parameters agree: allreduce (the gradient\n"
            "                     all-reduce in every step; default), or ShadowSync's background sync\n"
            "                     background:algo=ma|easgd|bmuf[,period=K|continuous][,alpha=A]\n"
            "                     [,eta=E][,zeta=Z][,nesterov=0|1][,hogwild][,chunk=BYTES][,bucket=BYTES]:\n"
            "                     each rank trains its own replica and a background stream averages\n"
            "                     them every K steps (default 1) or back to back (continuous); MA\n"
            "                     averages, EASGD pulls towards a\n"
            "                     centre at rate alpha (default 0.5/N), BMUF adds block momentum eta\n"
            "                     (default 1-1/N), block rate zeta (1), Nesterov (1); hogwild applies\n"
            "                     the rounds racing with the foreground; chunk splits a round's all-reduce\n"
            "                     into pieces of at most BYTES (default 4194304; 0: whole parameters);\n"
            "                     bucket lets parameters share one all-reduce up to BYTES (default 0:\n"
            "                     one a collective, each snapshot just before its own all-reduce).\n"
            "                     The N replicas: a dense parameter replicated over dp, and over tp where\n"
            "                     the ILP splits its operators by the batch (implies --tp-batch; with\n"
            "                     --auto also tp = every device). Embedding tables stay synchronous\n"
            "other:\n"
            "  --check MODEL      only load and check MODEL, derive its backward pass and optimizer step,\n"
            "                     and print per-operator parameters, FLOPs and kept activations; with\n"
            "                     --cluster, whether one step fits one device and its compute bound\n"
            "  --json             print the --check report as JSON\n"
            "  -v, --verbose      more detail\n"
            "  -q, --quiet        no warnings, no summary\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version\n"
            "\n"
            "Formats: schemas/README.md (model, cluster), runtime/PLAN_FORMAT.md (plan). Show a plan with\n"
            "plandump PLAN. Diagnostics: \"plancc: FILE:JSON-POINTER: message\" on stderr.\n"
            "Exit codes: 0 success, 1 internal error, 2 invalid input or usage, 3 infeasible (does not fit).\n",
          f);
}

typedef struct options {
    const char *model;
    const char *cluster; // NULL: no cluster section
    bool check, json, quiet;
    int verbose;
    int nodes, devices;  // 0: as the cluster file says
    const char *dumps;   // -d letters: t (phase 1 candidates), s (phase 2 schedule)
    pcc_mip_opts ilp;
    const char *output;
    pcc_search_opts strat;
    bool template_given;
    pcc_batch_opts batch;     // --global-batch, --micro-batch-size, --micro-batches
    bool estimate_only;
    int mb_searched;          // micro-batch counts the --auto search planned (0: no search)
    double mb_search_s;       // its seconds
    bool burst;               // --burst: DeepPool's burst parallelism (burst.c)
    double amp_limit;         // --amp-limit (0: none)
    const char *burst_widths; // --burst-widths LIST
    bool schedule_given, recompute_given;
    double bucket_mb;         // --bucket-mb: gradient bucket size in MB (10^6 bytes); 0: one per parameter
    pcc_sync_opts sync;       // --sync
    bool tf32;                // --tf32: cost f32 matrix products at the TF32 tensor-core peak
} options;

enum { OPT_CLUSTER = 256, OPT_NODES, OPT_DEVICES, OPT_TIME_LIMIT, OPT_MIP_GAP, OPT_DUMP_ILP, OPT_DP, OPT_TP, OPT_PP,
       OPT_ZERO, OPT_RECOMPUTE, OPT_SCHEDULE, OPT_AUTO, OPT_GLOBAL_BATCH, OPT_MICRO_BATCH_SIZE, OPT_VIRTUAL_STAGES,
       OPT_ESTIMATE_ONLY, OPT_BURST, OPT_AMP_LIMIT, OPT_BURST_WIDTHS, OPT_BUCKET_MB, OPT_SYNC, OPT_TF32,
       OPT_TP_BATCH };

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

// The batch, interleaving and estimate options against each other and the rest.
static pcc_status check_batch_options(const options *o) {
    const char *why = NULL;
    if (o->batch.micro_batch_size && !o->template_given)
        why = "--micro-batch-size is per data-parallel replica, so it needs the template's --dp (with --tp, --pp)";
    else if (o->estimate_only && (o->check || o->output))
        why = o->check ? "--estimate-only plans a strategy; --check only checks the model" : "--estimate-only writes no plan (leave out -o)";
    else if (o->strat.virtual_stages > 1 && o->strat.schedule == PCC_PIPE_GPIPE)
        why = "--virtual-stages interleaves the 1F1B schedule (Megatron-LM's); it does not combine with --schedule gpipe";
    if (!why) return PCC_OK;
    fprintf(stderr, "plancc: %s\n", why);
    return PCC_ERR_INPUT;
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
        {"output", required_argument, NULL, 'o'}, {"dp", required_argument, NULL, OPT_DP},
        {"tp", required_argument, NULL, OPT_TP}, {"pp", required_argument, NULL, OPT_PP},
        {"tp-batch", no_argument, NULL, OPT_TP_BATCH},
        {"global-batch", required_argument, NULL, OPT_GLOBAL_BATCH}, {"zero", required_argument, NULL, OPT_ZERO},
        {"micro-batch-size", required_argument, NULL, OPT_MICRO_BATCH_SIZE},
        {"virtual-stages", required_argument, NULL, OPT_VIRTUAL_STAGES},
        {"estimate-only", no_argument, NULL, OPT_ESTIMATE_ONLY}, {"bucket-mb", required_argument, NULL, OPT_BUCKET_MB},
        {"recompute", required_argument, NULL, OPT_RECOMPUTE}, {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"sync", required_argument, NULL, OPT_SYNC}, {"tf32", no_argument, NULL, OPT_TF32},
        {"auto", no_argument, NULL, OPT_AUTO},
        {"burst", no_argument, NULL, OPT_BURST}, {"amp-limit", required_argument, NULL, OPT_AMP_LIMIT},
        {"burst-widths", required_argument, NULL, OPT_BURST_WIDTHS},
        {NULL, 0, NULL, 0},
    };
    *done = false;
    o->batch.micro_batches = 1;
    o->bucket_mb = 25;
    opterr = 0;
    int c;
    bool auto_given = false;
    o->strat.recompute = PCC_RECOMPUTE_AUTO;
    while ((c = getopt_long(argc, argv, ":cjvqhVd:o:", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->check = true; break;
        case 'j': o->json = true; break;
        case 'v': o->verbose++; break;
        case 'q': o->quiet = true; break;
        case 'h': usage(stdout); *done = true; return PCC_OK;
        case 'V': printf("plancc %s\n", PCC_VERSION); *done = true; return PCC_OK;
        case 'm': if (int_option("--micro-batches", optarg, 1, 65536, &o->batch.micro_batches)) return PCC_ERR_INPUT; o->batch.micro_batches_given = true; break;
        case OPT_GLOBAL_BATCH: {
            int gb;
            if (int_option("--global-batch", optarg, 1, INT32_MAX, &gb)) return PCC_ERR_INPUT;
            o->batch.global_batch = gb;
            break;
        }
        case OPT_MICRO_BATCH_SIZE: if (int_option("--micro-batch-size", optarg, 1, 1 << 24, &o->batch.micro_batch_size)) return PCC_ERR_INPUT; break;
        case OPT_VIRTUAL_STAGES: if (int_option("--virtual-stages", optarg, 1, 1 << 16, &o->strat.virtual_stages)) return PCC_ERR_INPUT; break;
        case OPT_ESTIMATE_ONLY: o->estimate_only = true; break;
        case OPT_BUCKET_MB: if (num_option("--bucket-mb", optarg, 0, 1e6, &o->bucket_mb)) return PCC_ERR_INPUT; break;
        case OPT_CLUSTER: o->cluster = optarg; break;
        case OPT_NODES: if (int_option("--nodes", optarg, 1, 1 << 20, &o->nodes)) return PCC_ERR_INPUT; break;
        case OPT_DEVICES: if (int_option("--devices", optarg, 1, 1 << 24, &o->devices)) return PCC_ERR_INPUT; break;
        case OPT_TIME_LIMIT: if (num_option("--time-limit", optarg, 0.001, 1e6, &o->ilp.time_limit_s)) return PCC_ERR_INPUT; break;
        case OPT_MIP_GAP: if (num_option("--mip-gap", optarg, 0, 0.999, &o->ilp.mip_gap)) return PCC_ERR_INPUT; break;
        case OPT_DUMP_ILP: o->ilp.dump_lp = optarg; break;
        case 'o': o->output = optarg; break;
        case OPT_DP: if (int_option("--dp", optarg, 1, 1 << 24, &o->strat.dp)) return PCC_ERR_INPUT; o->template_given = true; break;
        case OPT_TP: if (int_option("--tp", optarg, 1, 1 << 24, &o->strat.tp)) return PCC_ERR_INPUT; o->template_given = true; break;
        case OPT_TP_BATCH: o->strat.tp_batch = true; break;
        case OPT_PP: if (int_option("--pp", optarg, 1, 1 << 24, &o->strat.pp)) return PCC_ERR_INPUT; o->template_given = true; break;
        case OPT_ZERO: if (int_option("--zero", optarg, 0, 3, &o->strat.zero)) return PCC_ERR_INPUT; break;
        case OPT_AUTO: auto_given = true; break;
        case OPT_BURST: o->burst = true; break;
        case OPT_TF32: o->tf32 = true; break;
        case OPT_BURST_WIDTHS: o->burst_widths = optarg; break;
        case OPT_AMP_LIMIT: {
            char *end;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || !(v > 1) || !isfinite(v)) {
                fprintf(stderr, "plancc: --amp-limit wants a number above 1 (DeepPool's GPU-time amplification limit), got \"%s\"\n", optarg);
                return PCC_ERR_INPUT;
            }
            o->amp_limit = v;
            break;
        }
        case OPT_SYNC: {
            if (sync_parse(optarg, &o->sync)) return PCC_ERR_INPUT;
            break;
        }
        case OPT_RECOMPUTE:
            o->recompute_given = true;
            if (strcmp(optarg, "none") == 0) o->strat.recompute = PCC_RECOMPUTE_NONE;
            else if (strcmp(optarg, "full") == 0) o->strat.recompute = PCC_RECOMPUTE_FULL;
            else if (strcmp(optarg, "auto") == 0) o->strat.recompute = PCC_RECOMPUTE_AUTO;
            else {
                fprintf(stderr, "plancc: --recompute wants none, full or auto, got \"%s\"\n", optarg);
                return PCC_ERR_INPUT;
            }
            break;
        case OPT_SCHEDULE:
            o->schedule_given = true;
            if (strcmp(optarg, "gpipe") == 0) o->strat.schedule = PCC_PIPE_GPIPE;
            else if (strcmp(optarg, "1f1b") == 0) o->strat.schedule = PCC_PIPE_1F1B;
            else {
                fprintf(stderr, "plancc: --schedule wants gpipe or 1f1b, got \"%s\"\n", optarg);
                return PCC_ERR_INPUT;
            }
            break;
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
    if (auto_given && o->template_given) {
        fprintf(stderr, "plancc: --auto searches the mesh; it does not go with --dp, --tp or --pp\n");
        return PCC_ERR_INPUT;
    }
    o->strat.auto_mesh = !o->template_given;
    o->batch.dp = o->strat.dp;
    o->strat.bg_dense = o->sync.algo != PCC_SYNC_ALLREDUCE;
    o->strat.bucket_bytes = o->bucket_mb * 1e6;
    if (o->strat.tp_batch && !o->template_given) {
        fprintf(stderr, "plancc: --tp-batch lets the template's ILP split the batch over --tp (--auto tries that by itself); "
                        "it needs --dp, --tp or --pp\n");
        return PCC_ERR_INPUT;
    }
    if (o->strat.tp_batch && o->strat.tp < 2) {
        fprintf(stderr, "plancc: --tp-batch splits the batch over the tp group: it needs --tp 2 or more\n");
        return PCC_ERR_INPUT;
    }
    if (!o->check && !o->cluster) {
        fprintf(stderr, "plancc: compiling a plan needs --cluster FILE (models/clusters/ has some; see plancc --help)\n");
        return PCC_ERR_INPUT;
    }
    if (o->burst_widths && !o->burst) {
        fprintf(stderr, "plancc: --burst-widths gives burst parallelism's per-layer device counts: it needs --burst\n");
        return PCC_ERR_INPUT;
    }
    if (o->amp_limit > 0 && !o->burst) {
        fprintf(stderr, "plancc: --amp-limit is burst parallelism's amplification limit: it needs --burst\n");
        return PCC_ERR_INPUT;
    }
    if (o->burst) {
        const char *clash = o->check ? "--check" : o->template_given ? "--dp, --tp and --pp" : auto_given ? "--auto"
                          : o->batch.micro_batches_given ? "--micro-batches" : o->batch.micro_batch_size ? "--micro-batch-size"
                          : o->strat.zero ? "--zero" : o->recompute_given ? "--recompute" : o->schedule_given ? "--schedule"
                          : o->strat.virtual_stages ? "--virtual-stages" : o->estimate_only ? "--estimate-only"
                          : o->sync.algo != PCC_SYNC_ALLREDUCE ? "--sync background" : NULL;
        if (clash) {
            fprintf(stderr, "plancc: --burst chooses every layer's device count itself; it does not go with %s\n", clash);
            return PCC_ERR_INPUT;
        }
    }
    if (o->sync.algo != PCC_SYNC_ALLREDUCE && o->strat.zero) {
        fprintf(stderr, "plancc: --sync background keeps a whole replica of the dense parameters on every dp rank; it does "
                        "not go with --zero\n");
        return PCC_ERR_INPUT;
    }
    if (o->check && (o->output || o->template_given || auto_given || o->sync.algo != PCC_SYNC_ALLREDUCE)) {
        fprintf(stderr, "plancc: --check only checks the model; it writes no plan (leave out -o and the strategy)\n");
        return PCC_ERR_INPUT;
    }
    return check_batch_options(o);
}

// Phase 1 for the group sizes phase 2 will try.
static pcc_transforms *phase1(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *so) {
    int n;
    int *sizes = search_group_sizes(g, c, so, &n);
    return transform_all(g, sizes, n);
}

// Phases 1 and 2 on all the cluster's devices as one group, for the -d dumps.
static pcc_status run_phases(const pcc_graph *g, const pcc_cluster *c, const options *o) {
    pcc_search_opts so = {.whole = true, .ilp = o->ilp};
    pcc_transforms *t = phase1(g, c, &so);
    if (o->dumps && strchr(o->dumps, 't')) transform_dump(stdout, g, t);
    if (!(o->dumps && strchr(o->dumps, 's')) && !o->ilp.dump_lp) return PCC_OK;
    pcc_strategy **s;
    int n;
    pcc_status st = search(g, c, t, &so, &s, &n);
    if (!st && o->dumps && strchr(o->dumps, 's')) ilp_dump(stdout, g, s[0]->intra);
    return st;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t file_hash(const char *path) {
    uint64_t h = 0;
    char err[256];
    if (plan_file_hash(path, &h, err, sizeof err)) warn("%s: the plan records no hash of it", err);
    return h;
}

// The options that decide the plan, in one canonical order (the plan's META and its hash).
static const char *canonical_options_(pcc_arena *a, const pcc_cluster *c, const options *o);

// The options a plan records (and hashes): what changes the plan or its costs.
static const char *canonical_options(pcc_arena *a, const pcc_cluster *c, const options *o) {
    const char *s = canonical_options_(a, c, o);
    return o->tf32 ? arena_printf(a, "%s --tf32", s) : s;
}

static const char *canonical_options_(pcc_arena *a, const pcc_cluster *c, const options *o) {
    static const char *const rc[] = {"none", "full", "auto"};
    const pcc_search_opts *s = &o->strat;
    char mesh[96] = "--auto";
    if (!s->auto_mesh)
        snprintf(mesh, sizeof mesh, "--dp %d --tp %d --pp %d%s", s->dp ? s->dp : 1, s->tp ? s->tp : 1, s->pp ? s->pp : 1,
                 s->tp_batch ? " --tp-batch" : "");
    if (o->burst) {
        if (o->amp_limit > 0) snprintf(mesh, sizeof mesh, "--burst --amp-limit %g", o->amp_limit);
        else snprintf(mesh, sizeof mesh, "--burst");
        if (o->burst_widths) return arena_printf(a, "--devices %d %s --burst-widths %s --bucket-mb %g%s%s", c->n_devices, mesh,
                                                 o->burst_widths, o->bucket_mb, o->batch.global_batch ? " --global-batch " : "",
                                                 o->batch.global_batch ? arena_printf(a, "%lld", (long long)o->batch.global_batch) : "");
    }
    char batch[48] = "";
    if (o->batch.global_batch) snprintf(batch, sizeof batch, " --global-batch %lld", (long long)o->batch.global_batch);
    return arena_printf(a, "--devices %d %s --micro-batches %d%s --schedule %s --zero %d --recompute %s --bucket-mb %g "
                        "--time-limit %g --mip-gap %g%s%s", c->n_devices, mesh, o->batch.micro_batches, batch,
                        s->schedule == PCC_PIPE_GPIPE ? "gpipe" : "1f1b", s->zero, rc[s->recompute], o->bucket_mb,
                        o->ilp.time_limit_s, o->ilp.mip_gap, o->sync.algo == PCC_SYNC_ALLREDUCE ? "" : " --sync ",
                        o->sync.algo == PCC_SYNC_ALLREDUCE ? "" : sync_str(a, &o->sync));
}

static const char *default_output(pcc_arena *a, const char *model) {
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
    return arena_printf(a, "%.*s.plan", (int)n, base);
}

// The options of phase 3 and the emitter.
typedef struct back {
    pcc_preserve_opts preserve;
    pcc_emit_opts emit;
} back;

// Phase 3, the memory planner, the emitter and plan_check on one strategy, into *e.
// PCC_ERR_INFEASIBLE when its largest arena exceeds the device's memory.
static pcc_status plan_strategy(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const back *o,
                                pcc_emitted *e) {
    pcc_programs *pr;
    memset(e, 0, sizeof *e);
    pcc_status st = preserve(g, c, s, &o->preserve, &pr);
    if (st) return st;
    memplan(pr);
    emit_plan(g, c, pr, &o->emit, e);
    st = check_plan(e->p);
    if (!st && e->peak_bytes > c->memory_bytes) st = PCC_ERR_INFEASIBLE;
    return st;
}

// Emits the candidates best first; the first that fits memory wins. *peak_out: the smallest
// peak among those that did not fit (for the message).
static pcc_status emit_first_fit(const pcc_graph *g, const pcc_cluster *c, pcc_strategy **cand, int n,
                                 const back *eo, pcc_emitted *out, int *which, double *peak_out) {
    *peak_out = INFINITY;
    for (int i = 0; i < n; i++) {
        pcc_emitted e;
        pcc_status st = plan_strategy(g, c, cand[i], eo, &e);
        if (st == PCC_OK) {
            *out = e, *which = i;
            return PCC_OK;
        }
        if (e.p) plan_free(e.p), free(e.p);
        if (st != PCC_ERR_INFEASIBLE) return st;
        if (e.peak_bytes < *peak_out) *peak_out = e.peak_bytes;
    }
    return PCC_ERR_INFEASIBLE;
}

// Phase 2 again, and the emitter. The ILP's memory model (parameters and kept activations,
// spread evenly over the stages) is not the memory planner's exact arena (transient buffers,
// the first and last stages' extra operators): when nothing it chose fits, the ILP's budget
// shrinks by the overshoot of the smallest arena (*peak), at most to 3/4 a round, so that it
// recomputes or splits more; the last round recomputes every block operator (what
// explain_infeasible would suggest). The emitter still checks against the real memory.
static pcc_status replan_tighter(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, pcc_cluster *budget, pcc_search_opts so,
                                 bool last, const back *eo, pcc_strategy ***cand, int *n, pcc_emitted *e,
                                 int *which, double *peak) {
    budget->memory_bytes *= fmax(0.75, 0.98 * c->memory_bytes / *peak);
    if (last) budget->memory_bytes = c->memory_bytes, so.recompute = PCC_RECOMPUTE_FULL;
    so.quiet = true;
    pcc_strategy **v;
    int nv;
    if (search(g, budget, t, &so, &v, &nv)) return PCC_ERR_INFEASIBLE; // keep the first round's figures
    if (nv > 4) nv = 4; // the best few: each emit of a large model takes a while
    double p;
    pcc_status st = emit_first_fit(g, c, v, nv, eo, e, which, &p);
    if (st == PCC_OK || st == PCC_ERR_INFEASIBLE) *cand = v, *n = nv, *peak = fmin(*peak, p);
    return st;
}

static pcc_status try_fit(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, pcc_search_opts so,
                          const back *eo) {
    pcc_strategy **cand;
    int n, which;
    double peak;
    pcc_emitted e;
    pcc_status st = search(g, c, t, &so, &cand, &n);
    if (st) return st;
    st = emit_first_fit(g, c, cand, n, eo, &e, &which, &peak);
    if (st == PCC_OK) plan_free(e.p), free(e.p);
    return st;
}

// Nothing fits: say by how much, and the smallest change that would fit.
static void explain_infeasible(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *tr, const options *o,
                               const back *eo,
                               double peak) {
    char need[32], have[32];
    fmt_bytes(need, sizeof need, peak);
    fmt_bytes(have, sizeof have, c->memory_bytes);
    fprintf(stderr, "plancc: %s: does not fit: the smallest plan needs %s per device (its largest stage's arena), and a %s "
                    "has %s\n", g->file, need, c->device_name, have);
    back q = *eo;
    const char *fix = NULL;
    pcc_search_opts so = o->strat;
    so.quiet = true;
    so.ilp = o->ilp;
    so.ilp.progress = false;
    so.ilp.dump_lp = NULL;
    if (so.recompute != PCC_RECOMPUTE_FULL) {
        pcc_search_opts t = so;
        t.recompute = PCC_RECOMPUTE_FULL;
        if (try_fit(g, c, tr, t, &q) == PCC_OK) fix = "--recompute full";
    }
    if (!fix && so.zero < 3 && (so.auto_mesh || so.dp > 1)) {
        pcc_search_opts t = so;
        t.zero = 3;
        if (try_fit(g, c, tr, t, &q) == PCC_OK) fix = "--zero 3";
        else {
            t.recompute = PCC_RECOMPUTE_FULL;
            if (try_fit(g, c, tr, t, &q) == PCC_OK) fix = "--zero 3 --recompute full";
        }
    }
    if (fix) fprintf(stderr, "plancc: it fits with %s\n", fix);
    else
        fprintf(stderr, "plancc: neither recompute nor ZeRO-3 make it fit: use more devices (--nodes, --devices, or more "
                        "pipeline stages with --pp), or a smaller micro-batch (the batch dimension in the model)\n");
}

// --estimate-only: the best strategy's estimate and its parts, as text or JSON.
static pcc_status print_estimate(const pcc_graph *g, const pcc_cluster *c, const options *o, const pcc_strategy *s, int n,
                                 double seconds) {
    const pcc_estimate *x = &s->est;
    char buf[160], b1[32], b2[32];
    int bd = graph_batch_dim(g);
    int64_t batch = bd >= 0 ? g->dims[bd].size : 0;
    if (o->json) {
        printf("{\"model\": \"%s\", \"cluster\": \"%s\", \"devices\": %d, \"pp\": %d, \"dp\": %d, \"tp\": %d, "
               "\"virtual_stages\": %d, \"micro_batches\": %d, \"batch\": %lld, \"global_batch\": %lld, \"zero\": %d, "
               "\"candidates\": %d, \"estimate\": {\"step_s\": %.9g, \"pipeline_s\": %.9g, \"bubble_s\": %.9g, "
               "\"compute_s\": %.9g, \"tp_comm_s\": %.9g, \"p2p_s\": %.9g, \"sync_s\": %.9g, \"sync_exposed_s\": %.9g, "
               "\"optimizer_s\": %.9g}, \"memory_bytes\": %.9g, \"micro_batch_counts_searched\": %d, \"seconds\": %.6f}\n",
               g->name, c->name, c->n_devices, s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP], s->mesh[PCC_AX_TP], s->virtual_stages,
               s->micro_batches, (long long)batch, (long long)batch * s->micro_batches, s->zero, n, x->step_s, x->pipeline_s,
               x->bubble_s, x->compute_s, x->tp_comm_s, x->p2p_s, x->sync_s, x->sync_exposed_s, x->optimizer_s,
               s->est_memory_bytes, o->mb_searched, seconds);
        return PCC_OK;
    }
    if (o->quiet) return PCC_OK;
    printf("plancc: %s on %d x %s (%s): %s%s; estimate only, no plan written\n", g->name, c->n_devices, c->device_name,
           c->file, strategy_str(s, buf, sizeof buf), o->strat.auto_mesh ? " (--auto)" : "");
    printf("  estimated step %.6g s: pipeline %.6g s (bubble %.6g s), then gradient sync %.6g s exposed of %.6g s, "
           "optimizer %.6g s\n", x->step_s, x->pipeline_s, x->bubble_s, x->sync_exposed_s, x->sync_s, x->optimizer_s);
    printf("  the busiest pipeline device over the step: operators %.6g s, tensor-parallel communication %.6g s, "
           "pipeline sends %.6g s\n", x->compute_s, x->tp_comm_s, x->p2p_s);
    printf("  batch %lld per micro-batch step, %d micro-batch%s (%lld samples per step); memory per device (estimate) %s of "
           "%s; planned in %.3f s\n", (long long)batch, s->micro_batches, s->micro_batches == 1 ? "" : "es",
           (long long)batch * s->micro_batches, fmt_bytes(b1, sizeof b1, s->est_memory_bytes),
           fmt_bytes(b2, sizeof b2, c->memory_bytes), seconds);
    if (o->mb_searched)
        printf("  searched %d micro-batch counts of the global batch %lld; %d was the fastest\n", o->mb_searched,
               (long long)o->batch.global_batch, o->batch.micro_batches);
    return PCC_OK;
}

// The emitted plan simulated (runtime/sim.h) next to the scheduler's estimate: the two come from
// one cost model, the simulation from the plan's own instructions, streams and events.
static void print_simulation(const plan *p, double est_s) {
    sim_result r;
    char err[512];
    if (sim_run(p, NULL, &r, err, sizeof err) != PLAN_OK) {
        warn("the simulator cannot run the plan: %s", err);
        sim_free(&r);
        return;
    }
    printf("  simulated step %.6g s (%.3f x the estimate)", r.step_s, est_s > 0 ? r.step_s / est_s : 0);
    if (r.tflops_per_gpu > 0) printf(", %.3g TFLOP/s per GPU", r.tflops_per_gpu);
    if (r.mfu > 0) printf(", MFU %.1f%%", 100 * r.mfu);
    printf(", bubble %.1f%%, exposed communication %.3g s per rank (plandump --sim, --trace)\n", 100 * r.bubble, r.exposed_comm_s);
    sim_free(&r);
}

// --burst: the layers' widths (burst.c), the plan, and the per-layer table.
static pcc_status compile_burst(pcc_arena *a, const pcc_graph *g, const pcc_cluster *c, const options *o) {
    double t0 = now_s();
    if (c->n_devices & (c->n_devices - 1) || c->n_devices > (1 << PLAN_MAX_AXES)) {
        fprintf(stderr, "plancc: --burst needs a power-of-two device count up to %d (the layers run on 1, 2, 4, ... devices), "
                        "got %d devices\n", 1 << PLAN_MAX_AXES, c->n_devices);
        return PCC_ERR_INPUT;
    }
    pcc_burst_opts bo = {.devices = c->n_devices, .amp_limit = o->amp_limit, .widths = o->burst_widths};
    pcc_burst *b;
    progress_phase("phase 2: burst parallelism, every layer's device count");
    pcc_status st = burst_plan(g, c, &bo, &b);
    if (st) return st;
    pcc_emit_opts eo = {.options = canonical_options(a, c, o)};
    eo.model_hash = file_hash(o->model);
    eo.cluster_hash = file_hash(o->cluster);
    pcc_preserve_opts po = {.bucket_bytes = (uint64_t)(o->bucket_mb * 1e6)};
    pcc_emitted e;
    progress_phase("phase 3: burst plan, memory plan and plan_check");
    pcc_programs *pr = burst_programs(g, c, b, &po);
    memplan(pr);
    emit_plan(g, c, pr, &eo, &e);
    st = check_plan(e.p);
    if (!st && e.peak_bytes > c->memory_bytes) st = PCC_ERR_INFEASIBLE;
    progress_done();
    char b1[32], b2[32];
    if (st == PCC_ERR_INFEASIBLE)
        fprintf(stderr, "plancc: %s: does not fit: the burst plan needs %s per device, and a %s has %s\n", g->file,
                fmt_bytes(b1, sizeof b1, e.peak_bytes), c->device_name, fmt_bytes(b2, sizeof b2, c->memory_bytes));
    if (st) {
        if (e.p) plan_free(e.p), free(e.p);
        return st;
    }
    const char *out = o->output ? o->output : default_output(a, o->model);
    char err[512];
    if (plan_write(e.p, out, err, sizeof err) != PLAN_OK) {
        fprintf(stderr, "plancc: %s: %s\n", out, err);
        plan_free(e.p), free(e.p);
        return PCC_ERR_INPUT;
    }
    if (!o->quiet) {
        printf("plancc: %s on %d x %s (%s): burst parallelism, %d layers%s\n", g->name, c->n_devices, c->device_name, c->file,
               b->n_regions, o->amp_limit > 0 ? "" : " (no amplification limit)");
        if (o->amp_limit > 0) printf("  amplification limit %g\n", o->amp_limit);
        burst_table(stdout, g, b);
        for (uint32_t k = 0; k < e.p->n_programs; k++)
            printf("  %s: arena %s, %u buffers, %u instructions\n", e.p->programs[k].name,
                   fmt_bytes(b1, sizeof b1, (double)e.p->programs[k].arena_bytes), e.p->programs[k].n_buffers,
                   e.p->programs[k].n_insns);
        printf("  peak memory per device %s of %s; estimated step %.6g s (data parallelism on the same cost model %.6g s, "
               "%.3f x)\n", fmt_bytes(b1, sizeof b1, e.peak_bytes), fmt_bytes(b2, sizeof b2, c->memory_bytes), b->est_step_s,
               b->dp_step_s, b->est_step_s > 0 ? b->dp_step_s / b->est_step_s : 0);
        print_simulation(e.p, b->est_step_s);
        printf("  wrote %s, plan_check passed; compiled in %.3f s\n", out, now_s() - t0);
    }
    plan_free(e.p), free(e.p);
    return PCC_OK;
}

static pcc_status compile(pcc_arena *a, const pcc_graph *g, const pcc_cluster *c, const options *o) {
    if (o->burst) return compile_burst(a, g, c, o);
    double t0 = now_s();
    pcc_search_opts so = o->strat;
    so.ilp = o->ilp;
    so.quiet = o->quiet;
    pcc_strategy **cand;
    int n;
    progress_phase("phase 2: the device mesh and the splits (%s)", so.auto_mesh ? "--auto" : "template");
    pcc_transforms *t = phase1(g, c, &so);
    pcc_status st = search(g, c, t, &so, &cand, &n);
    if (st) return st;
    if (o->estimate_only) return print_estimate(g, c, o, cand[0], n, now_s() - t0 + o->mb_search_s);
    progress_phase("phase 3: communication, memory plan and plan_check (%d candidate%s)", n, n == 1 ? "" : "s");
    back eo = {.preserve = {.bucket_bytes = (uint64_t)(o->bucket_mb * 1e6), .sync = o->sync},
               .emit = {.options = canonical_options(a, c, o)}};
    eo.emit.model_hash = file_hash(o->model);
    eo.emit.cluster_hash = file_hash(o->cluster);
    pcc_emitted e;
    int which = 0;
    double peak;
    st = emit_first_fit(g, c, cand, n, &eo, &e, &which, &peak);
    pcc_cluster budget = *c;
    for (int round = 0; st == PCC_ERR_INFEASIBLE && so.recompute == PCC_RECOMPUTE_AUTO && isfinite(peak) && round < 3; round++) {
        progress_phase("phase 2 again: nothing fit in memory; a tighter budget for the ILP (round %d)", round + 1);
        st = replan_tighter(g, c, t, &budget, so, round == 2, &eo, &cand, &n, &e, &which, &peak);
    }
    progress_done();
    if (st == PCC_ERR_INFEASIBLE) explain_infeasible(g, c, t, o, &eo, peak);
    if (st) return st;
    const char *out = o->output ? o->output : default_output(a, o->model);
    char err[512];
    plan_status ps = plan_write(e.p, out, err, sizeof err);
    if (ps != PLAN_OK) {
        fprintf(stderr, "plancc: %s: %s\n", out, err);
        plan_free(e.p), free(e.p);
        return PCC_ERR_INPUT;
    }
    struct stat sb;
    double nbytes = stat(out, &sb) == 0 ? (double)sb.st_size : 0;
    double t1 = now_s();
    if (!o->quiet) {
        const pcc_strategy *s = cand[which];
        char buf[160], b1[32], b2[32], b3[32];
        printf("plancc: %s on %d x %s (%s): %s%s\n", g->name, c->n_devices, c->device_name, c->file,
               strategy_str(s, buf, sizeof buf), o->strat.auto_mesh ? " (--auto)" : "");
        if (o->strat.auto_mesh) printf("  searched %d factorizations; this one ranked %d by the cost model\n", n, which + 1);
        if (o->mb_searched)
            printf("  searched %d micro-batch counts of the global batch %lld; %d was the fastest\n", o->mb_searched,
                   (long long)o->batch.global_batch, o->batch.micro_batches);
        static const char *const ilp_word[] = {"optimal", "gap", "time_limit", "infeasible", "no_solution", "error"};
        for (int k = 0; o->verbose && k < n; k++) // one line per candidate, key=value for scripts
            printf("  candidate %d: %s; est_step_s=%.6g est_memory=%.4g ilp_rows=%d ilp_cols=%d ilp_status=%s ilp_gap=%.4g "
                   "ilp_s=%.3f\n", k + 1, strategy_str(cand[k], buf, sizeof buf), cand[k]->est_step_s,
                   cand[k]->est_memory_bytes, cand[k]->intra->ilp.rows, cand[k]->intra->ilp.cols, ilp_word[cand[k]->intra->ilp.status],
                   cand[k]->intra->ilp.gap, cand[k]->intra->ilp.seconds);
        printf("  ILP (tp group of %d): %d rows x %d columns, %s, objective %.6g s, bound %.6g s, gap %.2f%%, %.3f s\n",
               s->mesh[PCC_AX_TP], s->intra->ilp.rows, s->intra->ilp.cols, mip_status_name(s->intra->ilp.status),
               s->intra->ilp.objective, s->intra->ilp.bound, 100 * s->intra->ilp.gap, s->intra->ilp.seconds);
        const plan *p = e.p;
        for (uint32_t k = 0; k < p->n_programs; k++)
            printf("  %s: arena %s, %u buffers, %u instructions\n", p->programs[k].name,
                   fmt_bytes(b1, sizeof b1, (double)p->programs[k].arena_bytes), p->programs[k].n_buffers, p->programs[k].n_insns);
        printf("  peak memory per device %s of %s (stage %d; live-buffer bound %s); estimated step %.6g s\n",
               fmt_bytes(b1, sizeof b1, e.peak_bytes), fmt_bytes(b2, sizeof b2, c->memory_bytes), e.peak_stage,
               fmt_bytes(b3, sizeof b3, e.live_bound_bytes), s->est_step_s);
        print_simulation(p, s->est_step_s);
        printf("  wrote %s: %s, plan_check passed; compiled in %.3f s\n", out, fmt_bytes(b1, sizeof b1, nbytes),
               t1 - t0 + o->mb_search_s);
    }
    plan_free(e.p), free(e.p);
    return PCC_OK;
}

// The model as the options make it: loaded, the batch set from --global-batch and the
// micro-batch count, checked, and differentiated.
static pcc_status load_graph(pcc_arena *a, options *o, pcc_graph **out) {
    pcc_graph *g = NULL;
    pcc_status st = model_load(a, o->model, &g);
    if (!st) st = batch_apply(g, &o->batch);
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);
    if (!st) st = graph_check(g);
    *out = g;
    return st;
}

// --auto with --global-batch and no micro-batch count: the count is searched too, as Megatron-LM
// users search --micro-batch-size. Every divisor m of the global batch that leaves whole ghost
// batch norm groups in a micro-batch, from the most micro-batches down (the small, quickly
// solved ILPs first), is planned on the cost model; the
// search stops once MB_PATIENCE counts in a row do no better than the best so far (fewer
// micro-batches mean bigger activations, so the ILP recomputes or shards more, while the bubble
// grows), and keeps the fastest estimate. Each count's graph lives in an arena of its own.
#define MB_PATIENCE 3

static pcc_status search_micro_batches(options *o, const pcc_cluster *c, int64_t grain) {
    double t0 = now_s();
    int64_t gb = o->batch.global_batch;
    double best = INFINITY;
    int best_m = 0, misses = 0;
    bool was_quiet = pcc_quiet;
    pcc_quiet = true; // the counts that do not fit say nothing; the chosen one is compiled loudly
    for (int64_t m = gb < 65536 ? gb : 65536; m >= 1 && misses < MB_PATIENCE; m--) {
        if (gb % m || (gb / m) % grain) continue; // whole samples, whole ghost batch norm groups
        progress_phase("phase 2: %lld micro-batches of %lld samples (tried %d; best %d at %.4g s)", (long long)m,
                       (long long)(gb / m), o->mb_searched, best_m, isfinite(best) ? best : 0);
        options t = *o;
        t.batch.micro_batches = (int)m, t.batch.micro_batches_given = true;
        pcc_arena *a = arena_init();
        pcc_graph *g;
        pcc_status st = load_graph(a, &t, &g);
        pcc_strategy **cand = NULL;
        int n = 0;
        if (!st) {
            pcc_search_opts so = o->strat;
            so.ilp = o->ilp;
            so.ilp.progress = false, so.ilp.dump_lp = NULL, so.quiet = true;
            st = search(g, c, phase1(g, c, &so), &so, &cand, &n);
        }
        double t_s = !st && n > 0 ? cand[0]->est_step_s : INFINITY;
        arena_free(a);
        if (st && st != PCC_ERR_INFEASIBLE) {
            pcc_quiet = was_quiet;
            return st;
        }
        o->mb_searched++;
        if (t_s < best) best = t_s, best_m = (int)m, misses = 0;
        else if (best_m) misses++;
    }
    pcc_quiet = was_quiet;
    o->mb_search_s = now_s() - t0;
    if (best_m) o->batch.micro_batches = best_m, o->batch.micro_batches_given = true;
    return PCC_OK; // nothing fit: the plain compile (one micro-batch) says why
}

int main(int argc, char **argv) {
    options o = {.ilp = {.time_limit_s = 60, .mip_gap = 1e-4, .progress = true}};
    bool done;
    pcc_status st = parse_options(argc, argv, &o, &done);
    if (st || done) return st;
    pcc_quiet = o.quiet;
    progress_init(!o.quiet && !o.check);

    pcc_arena *arena = arena_init();
    pcc_graph *g = NULL;
    st = load_graph(arena, &o, &g);
    pcc_cluster *cluster = NULL;
    if (!st && o.cluster) st = cluster_load(arena, o.cluster, o.nodes, o.devices, &cluster);
    if (!st && cluster && o.tf32) cluster->tf32 = true;
    bool search = !o.check && !o.burst && o.strat.auto_mesh && o.batch.global_batch && !o.batch.micro_batches_given &&
                  !o.batch.micro_batch_size;
    if (!st && search) {
        st = search_micro_batches(&o, cluster, batch_grain(g));
        if (!st && o.batch.micro_batches != g->micro_batches) st = load_graph(arena, &o, &g);
    }
    if (!st && o.check) {
        pcc_report_opts ro = {.json = o.json, .verbose = o.verbose};
        report_print_cluster(stdout, g, cluster, &ro);
        if (cluster && (o.dumps || o.ilp.dump_lp)) st = run_phases(g, cluster, &o);
    } else if (!st) {
        st = compile(arena, g, cluster, &o);
    }
    if (!st) {
        if (fflush(stdout) != 0) {
            fprintf(stderr, "plancc: cannot write the report\n");
            st = PCC_ERR_INTERNAL;
        }
    }
    progress_done();
    arena_free(arena);
    return st;
}
