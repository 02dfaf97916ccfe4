/*
 * planrun.c: runs a plan for training steps.
 *
 *   planrun PLAN [--backend cpu] [--steps N] [--seed S] [--data TOKENS.bin] [--save F] ...
 *
 * The CPU backend runs every rank of the plan as threads of this process (interp.c), so one
 * command runs a 1-rank or a 64-rank plan anywhere. It loads the whole plan, verifies it
 * (plan_check) before running anything, initializes the parameters from the plan's
 * initializers, and prints the loss of each step. --save, --load and --compare move the
 * parameters and optimizer state through safetensors files: the equivalence tests run a
 * parallel plan with --compare against the one-device plan's --save.
 *
 * The cuda backend (built when meson finds CUDA, cuBLAS, cuDNN and NCCL) runs ONE rank per
 * process on one GPU. Rank, world size and local rank come from the launcher (launch.c: flags,
 * torchrun, OpenMPI, SLURM, in that order), which must agree with the plan's world; rank 0 makes
 * the NCCL unique id and the rendezvous (MPI, TCP at MASTER_ADDR:MASTER_PORT, or a file) hands it
 * to the others; the local rank picks the GPU among CUDA_VISIBLE_DEVICES. Rank 0 prints the
 * losses (each step's loss is summed over the ranks); every rank prints what it found.
 *
 * Under mpirun (OpenMPI's variables say this is one of N > 1 processes) the cpu backend runs one
 * rank per process, communicating through MPI (comm_mpi.c), and computes what the threaded run
 * computes, bit for bit; rank 0 prints. Any failure ends every process (MPI_Abort).
 *
 * For programs: --json prints JSON lines (a "start" object, one "step" object per logged step,
 * a "summary"; schemas/planrun.schema.json) instead of the text, whose other lines then go to
 * stderr; --metrics FILE writes every step's figures as CSV or JSON lines, --plot FILE.svg the
 * loss and step time over the steps (metrics.c). While the steps run, a progress line comes on
 * stderr every few seconds (runtime/cli.h; --quiet silences it).
 *
 * Exit codes: the table the three tools share (runtime/cli.h, printed by --help): 2 usage, 4 the
 * plan cannot be read, 5 it fails plan_check, 6 stale, 7 --compare differs, 8 an unusable data,
 * --load, --save, --metrics or --plot file, 9 the backend cannot run here (built without it, no
 * GPU, f16 on the cpu), 10 an inconsistent launch, 11 a failed step, 12 a non-finite loss or
 * gradient (nothing saved; --allow-nonfinite runs on), 13 an unusable --background plan.
 *
 * --background BG.plan (DeepPool's GPU multiplexing, bgjob.c and gate.c): every foreground rank
 * runs its own replica of the one-rank plan BG (seed --background-seed + rank) beside its
 * foreground streams, admitted by the rank's gate: at most --background-inflight pieces in
 * flight, none while the foreground is inside a collective. The foreground computes exactly
 * what it computes alone (--compare still holds); --background-save and --background-compare
 * move one replica's parameters, which equal a plain run of BG with that seed.
 */
#include "rt.h"
#include "cli.h"
#ifdef PLANCC_HAVE_CUDA
#include "cuda/rt_cuda.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef PLANRUN_VERSION
#define PLANRUN_VERSION "0.0.0"
#endif
#ifdef PLANCC_HAVE_CUDA
#define BACKENDS "cpu, cpu-serial, cuda"
#else
#define BACKENDS "cpu, cpu-serial"
#endif
#ifdef PLANCC_HAVE_MPI
#define RDV_MPI ", mpi"
#define MPIRUN "cpu under mpirun (one rank per process, MPI)"
#else
#define RDV_MPI ""
#define MPIRUN "cpu under mpirun: not built (no MPI)"
#endif

enum { EXIT_USAGE = CLI_EXIT_INPUT, EXIT_READ = CLI_EXIT_NOT_PLAN, EXIT_INVALID = CLI_EXIT_CHECK, EXIT_STALE = CLI_EXIT_STALE,
       EXIT_BACKEND = CLI_EXIT_BACKEND, EXIT_RUN = CLI_EXIT_STEP, EXIT_DIFFER = CLI_EXIT_DIFFER, EXIT_FILE = CLI_EXIT_FILE,
       EXIT_NO_GPU = CLI_EXIT_BACKEND, EXIT_LAUNCH = CLI_EXIT_LAUNCH, EXIT_BACKGROUND = CLI_EXIT_BACKGROUND,
       EXIT_NONFINITE = CLI_EXIT_NONFINITE, EXIT_LIMIT = CLI_EXIT_LIMIT };

// Where the human lines go: stdout, or stderr when --json keeps stdout for JSON lines.
static FILE *text_out;

typedef struct options {
    const char *plan, *backend, *data, *save, *load, *compare, *losses, *model, *cluster, *rendezvous, *trace;
    const char *metrics, *plot;     // --metrics FILE (CSV or JSON lines), --plot FILE.svg
    bool json;                      // --json: JSON lines on stdout
    long steps, log_every;
    // --background: the plan, steps per replica (-1: until the foreground ends), pieces in
    // flight, seed of replica 0, the replica --background-save/--background-compare speak of
    const char *bg, *bg_save, *bg_compare;
    long bg_steps;
    uint32_t bg_inflight;
    uint64_t bg_seed;
    int bg_replica, bg_nice;
    bool bg_given;                  // some --background-* option was given
    uint64_t seed;
    double timeout_s, rtol, atol, dilation;
    bool quiet, f64, tf32, emulate_network, allow_nonfinite;
    int rank, world, local_rank;    // -1: not given
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: planrun PLAN [options]\n"
            "Runs a plan that plancc compiled for training steps. The cpu backend runs every rank of\n"
            "the plan as threads of this process, or under mpirun one rank per process.\n"
            "\n"
            "  --backend cpu|cpu-serial|cuda\n"
            "                      the backend (default cpu: every stream of every rank a thread;\n"
            "                      cpu-serial: one thread per rank issues all its streams in\n"
            "                      program order, as the cuda backend does; cuda: one rank of\n"
            "                      the plan per process on one GPU, see the launch options)\n"
            "  --precision P       f32 (default) or f64: the cpu backends compute the plan's f32\n"
            "                      tensors in double, to check a plan's algebra without float32's\n"
            "                      rounding noise (files --save writes are then F64)\n"
            "  --steps N           training steps (default 10)\n"
            "  --seed S            seed of the initializers, synthetic data and dropout (default 1)\n"
            "  --data FILE         a token file (uint16, nanoGPT's train.bin) for tokens/targets inputs;\n"
            "                      default: synthetic data\n"
            "  --load FILE         start from the parameters and optimizer state in FILE (safetensors)\n"
            "  --save FILE         write the parameters and optimizer state after the steps\n"
            "  --compare FILE      compare the parameters after the steps with FILE's, element by\n"
            "                      element: exit 7 unless |x - ref| <= atol + rtol |ref| everywhere\n"
            "  --rtol X, --atol X  tolerances of --compare (default 1e-5 and 1e-5, PyTorch's atol\n"
            "                      for float32 in torch.testing.assert_close)\n"
            "  --losses FILE       write each step's loss, one per line (%%.9g; f64: %%.17g)\n"
            "  --log-every N       print the loss every N steps (default 1; 0: only the summary)\n"
            "  --trace FILE        write the run's measured timeline as Chrome trace JSON: every\n"
            "                      instruction's start and end per rank and stream, in the tracks\n"
            "                      of plandump --trace (cuda: timed by CUDA events); a process that\n"
            "                      runs one rank of several writes FILE.rankN.json instead;\n"
            "                      tools/compare_trace.py sets it beside the simulation\n"
            "  --json              JSON lines on stdout instead of the text: {\"type\": \"start\"}, one\n"
            "                      {\"type\": \"step\"} per logged step (step, loss, time_s, samples_per_s,\n"
            "                      tokens_per_s, arena_bytes, max_rss_bytes), {\"type\": \"summary\"}\n"
            "                      (schemas/planrun.schema.json); the other lines go to stderr\n"
            "  --metrics FILE      every step's figures: CSV when FILE ends in .csv, else JSON lines\n"
            "  --plot FILE.svg     the loss and the step time over the steps, as a picture\n"
            "  --timeout SEC       a blocked rank gives up after SEC seconds (default 60); a deadlock\n"
            "                      among all ranks is reported at once; ranks still computing SEC\n"
            "                      seconds after a failure end the run (exit 6)\n"
            "  --allow-nonfinite   run on through NaN and infinite values (by default the first\n"
            "                      operator that writes one stops the run: exit 12, nothing saved)\n"
            "  --model F --cluster F  refuse the plan unless it was compiled from these files\n"
            "  --tf32              cuda: allow TF32 tensor cores in f32 products and convolutions\n"
            "  --emulate-network   the cpu backends: every collective, send and receive also takes\n"
            "                      the plan's time for it (the cost model's, on the links of the\n"
            "                      cluster it was compiled for), one at a time on each rank's link,\n"
            "                      waiting asleep: what overlapping communication with compute is\n"
            "                      worth on that cluster, measured with real threads\n"
            "  --dilation X        with --emulate-network: every such time times X (default 1;\n"
            "                      time dilation: where N ranks share fewer cores, each computes\n"
            "                      about N/cores times slower than on a core of its own, and a\n"
            "                      network slowed by as much keeps the cluster's ratio of compute\n"
            "                      to communication)\n"
            "\n");
    fprintf(f,
            "Background job (DeepPool's GPU multiplexing):\n"
            "  --background BG.plan  every rank of PLAN also trains its own replica of the one-rank\n"
            "                      plan BG beside its foreground (cpu: threads of its own; cuda:\n"
            "                      streams at the lowest priority, the foreground's at the highest),\n"
            "                      admitted only into the foreground's idle time: at most K pieces\n"
            "                      (BG instructions) in flight, none while the rank's foreground is\n"
            "                      inside a collective. Prints each replica's steps and how many\n"
            "                      pieces the gate held back. BG runs on synthetic data\n"
            "  --background-steps N  each replica runs N steps (the run ends when both jobs have)\n"
            "  --background-until-fg  replicas run steps until the foreground's last step ends,\n"
            "                      then finish the step they are in (the default)\n"
            "  --background-inflight K  pieces in flight per rank (default 1)\n"
            "  --background-nice N  cpu: the replicas' threads run at nice N (0..19; default 0),\n"
            "                      the CPU's nearest thing to a low-priority stream\n"
            "  --background-seed S  replica of rank r uses seed S + r (default 1): it equals\n"
            "                      planrun BG.plan --seed S+r --steps N\n"
            "  --background-replica R  the replica the next two options speak of (default 0)\n"
            "  --background-save F  write that replica's parameters and optimizer state\n"
            "  --background-compare F  compare that replica's parameters with F's (--rtol, --atol;\n"
            "                      exit 7 on a difference)\n"
            "\n"
            "Launch. mpirun -np N planrun PLAN (an N-rank plan) runs one rank per process on the cpu\n"
            "backend, communicating through MPI, with the threaded run's results bit for bit. The cuda\n"
            "backend runs one process per GPU. Each number comes from the first of:\n"
            "  --rank R, --world-size N, --local-rank L   flags\n"
            "  RANK, WORLD_SIZE, LOCAL_RANK               torchrun\n"
            "  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK   mpirun (OpenMPI)\n"
            "  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID  srun\n"
            "  torchrun's and OpenMPI's variables that disagree (WORLD_SIZE=2 beside\n"
            "  OMPI_COMM_WORLD_SIZE=4) are an error (exit 10; a flag wins); SLURM's are not compared\n"
            "  (mpirun or torchrun inside an allocation is normal).\n"
            "  The world size must be the plan's. The local rank picks the GPU (one visible GPU:\n"
            "  that one). NCCL's variables (NCCL_DEBUG, NCCL_SOCKET_IFNAME, ...) pass through.\n"
            "  --rendezvous tcp:HOST:PORT | file:PATH | mpi\n"
            "                      how rank 0's NCCL id reaches the others (default: MPI under\n"
            "                      mpirun when built with MPI, else tcp at MASTER_ADDR:MASTER_PORT);\n"
            "                      file: a path on a shared filesystem that does not exist yet\n"
            "  -q, --quiet         print nothing but errors (no progress lines either)\n"
            "  --help, --version   (the version names the plan format it reads)\n"
            "\n");
    cli_print_exit_codes(f);
}

static int number(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "planrun: %s wants a number from %g to %g, not \"%s\"\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

// A whole number from lo to 2^30 (a rank or a world size).
static int whole(const char *opt, const char *s, int lo, int *out) {
    double v;
    if (number(opt, s, lo, 1 << 30, &v)) return -1;
    if (v != (double)(int)v) {
        fprintf(stderr, "planrun: %s wants a whole number, not \"%s\"\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int check_background_args(const options *o, bool until) {
    if (o->bg_given && !o->bg) {
        fprintf(stderr, "planrun: the --background-* options need --background BG.plan\n");
        return EXIT_USAGE;
    }
    if (until && o->bg_steps >= 0) {
        fprintf(stderr, "planrun: --background-steps and --background-until-fg exclude each other\n");
        return EXIT_USAGE;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o) {
    enum { O_BACKEND = 256, O_STEPS, O_SEED, O_DATA, O_SAVE, O_LOAD, O_COMPARE, O_RTOL, O_LOSSES, O_LOG, O_TIMEOUT,
           O_MODEL, O_CLUSTER, O_QUIET, O_HELP, O_VERSION, O_ATOL, O_PRECISION, O_RANK, O_WORLD, O_LOCAL, O_RDV, O_TF32,
           O_BG, O_BG_STEPS, O_BG_UNTIL, O_BG_INFLIGHT, O_BG_SEED, O_BG_REPLICA, O_BG_SAVE, O_BG_COMPARE, O_BG_NICE, O_NET, O_DILATION, O_JSON,
           O_METRICS, O_PLOT, O_TRACE, O_NONFINITE };
    static const struct option longs[] = {
        {"backend", required_argument, NULL, O_BACKEND}, {"steps", required_argument, NULL, O_STEPS},
        {"seed", required_argument, NULL, O_SEED}, {"data", required_argument, NULL, O_DATA},
        {"save", required_argument, NULL, O_SAVE}, {"load", required_argument, NULL, O_LOAD},
        {"compare", required_argument, NULL, O_COMPARE}, {"rtol", required_argument, NULL, O_RTOL},
        {"atol", required_argument, NULL, O_ATOL}, {"precision", required_argument, NULL, O_PRECISION},
        {"losses", required_argument, NULL, O_LOSSES}, {"log-every", required_argument, NULL, O_LOG},
        {"timeout", required_argument, NULL, O_TIMEOUT}, {"model", required_argument, NULL, O_MODEL},
        {"cluster", required_argument, NULL, O_CLUSTER}, {"quiet", no_argument, NULL, O_QUIET},
        {"rank", required_argument, NULL, O_RANK}, {"world-size", required_argument, NULL, O_WORLD},
        {"local-rank", required_argument, NULL, O_LOCAL}, {"rendezvous", required_argument, NULL, O_RDV},
        {"tf32", no_argument, NULL, O_TF32}, {"emulate-network", no_argument, NULL, O_NET},
        {"dilation", required_argument, NULL, O_DILATION}, {"json", no_argument, NULL, O_JSON},
        {"metrics", required_argument, NULL, O_METRICS}, {"plot", required_argument, NULL, O_PLOT}, {"trace", required_argument, NULL, O_TRACE},
        {"allow-nonfinite", no_argument, NULL, O_NONFINITE},
        {"background", required_argument, NULL, O_BG}, {"background-steps", required_argument, NULL, O_BG_STEPS},
        {"background-until-fg", no_argument, NULL, O_BG_UNTIL}, {"background-inflight", required_argument, NULL, O_BG_INFLIGHT},
        {"background-seed", required_argument, NULL, O_BG_SEED}, {"background-replica", required_argument, NULL, O_BG_REPLICA},
        {"background-nice", required_argument, NULL, O_BG_NICE}, {"background-save", required_argument, NULL, O_BG_SAVE}, {"background-compare", required_argument, NULL, O_BG_COMPARE},
        {"help", no_argument, NULL, O_HELP}, {"version", no_argument, NULL, O_VERSION}, {0, 0, 0, 0}};
    *o = (options){.backend = "cpu", .steps = 10, .log_every = 1, .seed = 1, .timeout_s = 60, .rtol = 1e-5, .atol = 1e-5,
                   .rank = -1, .world = -1, .local_rank = -1, .bg_steps = -1, .bg_inflight = 1, .bg_seed = 1};
    bool until = false;
    double v;
    int c;
    opterr = 0;
    if (cli_check_options("planrun", argc, argv, "q", longs)) return EXIT_USAGE;
    while ((c = getopt_long(argc, argv, "q", longs, NULL)) != -1) {
        switch (c) {
        case O_BACKEND: o->backend = optarg; break;
        case O_PRECISION:
            if (strcmp(optarg, "f32") && strcmp(optarg, "f64")) {
                fprintf(stderr, "planrun: --precision is f32 or f64, not \"%s\"\n", optarg);
                return EXIT_USAGE;
            }
            o->f64 = !strcmp(optarg, "f64");
            break;
        case O_STEPS: if (number("--steps", optarg, 0, 1e9, &v)) return EXIT_USAGE; o->steps = (long)v; break;
        case O_SEED: if (number("--seed", optarg, 0, 9007199254740992.0, &v)) return EXIT_USAGE; o->seed = (uint64_t)v; break;
        case O_DATA: o->data = optarg; break;
        case O_SAVE: o->save = optarg; break;
        case O_LOAD: o->load = optarg; break;
        case O_COMPARE: o->compare = optarg; break;
        case O_RTOL: if (number("--rtol", optarg, 0, 1, &o->rtol)) return EXIT_USAGE; break;
        case O_ATOL: if (number("--atol", optarg, 0, 1, &o->atol)) return EXIT_USAGE; break;
        case O_LOSSES: o->losses = optarg; break;
        case O_TRACE: o->trace = optarg; break;
        case O_LOG: if (number("--log-every", optarg, 0, 1e9, &v)) return EXIT_USAGE; o->log_every = (long)v; break;
        case O_TIMEOUT: if (number("--timeout", optarg, 0.001, 1e6, &o->timeout_s)) return EXIT_USAGE; break;
        case O_MODEL: o->model = optarg; break;
        case O_CLUSTER: o->cluster = optarg; break;
        case O_RANK: if (whole("--rank", optarg, 0, &o->rank)) return EXIT_USAGE; break;
        case O_WORLD: if (whole("--world-size", optarg, 1, &o->world)) return EXIT_USAGE; break;
        case O_LOCAL: if (whole("--local-rank", optarg, 0, &o->local_rank)) return EXIT_USAGE; break;
        case O_RDV: o->rendezvous = optarg; break;
        case O_TF32: o->tf32 = true; break;
        case O_NET: o->emulate_network = true; break;
        case O_NONFINITE: o->allow_nonfinite = true; break;
        case O_DILATION: if (number("--dilation", optarg, 1e-3, 1e6, &o->dilation)) return EXIT_USAGE; break;
        case O_BG: o->bg = optarg; break;
        case O_BG_STEPS: if (number("--background-steps", optarg, 0, 1e9, &v)) return EXIT_USAGE; o->bg_steps = (long)v, o->bg_given = true; break;
        case O_BG_UNTIL: until = o->bg_given = true; break;
        case O_BG_INFLIGHT:
            if (number("--background-inflight", optarg, 1, 1024, &v)) return EXIT_USAGE;
            o->bg_inflight = (uint32_t)v, o->bg_given = true;
            break;
        case O_BG_SEED: if (number("--background-seed", optarg, 0, 9007199254740992.0, &v)) return EXIT_USAGE; o->bg_seed = (uint64_t)v, o->bg_given = true; break;
        case O_BG_REPLICA: if (whole("--background-replica", optarg, 0, &o->bg_replica)) return EXIT_USAGE; o->bg_given = true; break;
        case O_BG_SAVE: o->bg_save = optarg, o->bg_given = true; break;
        case O_BG_NICE:
            if (whole("--background-nice", optarg, 0, &o->bg_nice)) return EXIT_USAGE;
            if (o->bg_nice > 19) return fprintf(stderr, "planrun: --background-nice is 0 to 19, not %d\n", o->bg_nice), EXIT_USAGE;
            o->bg_given = true;
            break;
        case O_BG_COMPARE: o->bg_compare = optarg, o->bg_given = true; break;
        case O_QUIET: case 'q': o->quiet = true; break;
        case O_JSON: o->json = true; break;
        case O_METRICS: o->metrics = optarg; break;
        case O_PLOT: o->plot = optarg; break;
        case O_HELP: usage(stdout); exit(0);
        case O_VERSION:
            printf("planrun %s (plan format %u; backends: %s; %s; rendezvous: tcp, file%s)\n", PLANRUN_VERSION, PLAN_VERSION, BACKENDS,
                   MPIRUN, RDV_MPI);
            exit(0);
        default:
            fprintf(stderr, "planrun: unknown option or missing value: %s (see planrun --help)\n", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "planrun: want one plan file (see planrun --help)\n");
        return EXIT_USAGE;
    }
    o->plan = argv[optind];
    if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cpu-serial") && strcmp(o->backend, "cuda")) {
        fprintf(stderr, "planrun: --backend is cpu, cpu-serial or cuda, not \"%s\"\n", o->backend);
        return EXIT_USAGE;
    }
    if (o->f64 && strncmp(o->backend, "cpu", 3)) {
        fprintf(stderr, "planrun: --precision f64 runs on the cpu backends only\n");
        return EXIT_USAGE;
    }
    if (o->dilation > 0 && !o->emulate_network) {
        fprintf(stderr, "planrun: --dilation needs --emulate-network\n");
        return EXIT_USAGE;
    }
    if (o->emulate_network && strncmp(o->backend, "cpu", 3)) {
        fprintf(stderr, "planrun: --emulate-network is for the cpu backends (the %s backend's network is real)\n", o->backend);
        return EXIT_USAGE;
    }
    return check_background_args(o, until);
}

static int load_plan(const options *o, plan *p) {
    char err[1024];
    plan_status st = plan_read(o->plan, -1, p, err, sizeof err);
    if (st != PLAN_OK) {
        fprintf(stderr, "planrun: %s: %s\n", o->plan, err);
        return EXIT_READ;
    }
    if ((o->model || o->cluster) && plan_verify_inputs(p, o->model, o->cluster, err, sizeof err) != PLAN_OK) {
        fprintf(stderr, "planrun: %s: %s\n", o->plan, err);
        plan_free(p);
        return EXIT_STALE;
    }
    plan_status ck = plan_check(p, err, sizeof err);
    if (ck == PLAN_ERR_LIMIT) {
        fprintf(stderr, "planrun: %s: %s\n", o->plan, err);
        plan_free(p);
        return EXIT_LIMIT;
    }
    if (ck != PLAN_OK) {
        // PLANRUN_UNCHECKED=1: tests/faults.py measures what a fault the verifier refuses would
        // do at run time (planrun's own checks still stand); nothing else sets it.
        const char *unchecked = getenv("PLANRUN_UNCHECKED");
        fprintf(stderr, "planrun: %s: the plan fails its check: %s%s\n", o->plan, err,
                unchecked && !strcmp(unchecked, "1") ? " (PLANRUN_UNCHECKED=1: running it anyway)" : "");
        if (unchecked && !strcmp(unchecked, "1")) return 0;
        plan_free(p);
        return EXIT_INVALID;
    }
    return 0;
}

// The background plan: read whole, checked, one rank. EXIT_BACKGROUND with a message otherwise.
static int load_background(const options *o, uint32_t fg_world, plan *bg) {
    char err[1024];
    if (plan_read(o->bg, -1, bg, err, sizeof err) != PLAN_OK) {
        fprintf(stderr, "planrun: --background %s: %s\n", o->bg, err);
        return EXIT_BACKGROUND;
    }
    int rc = 0;
    if (plan_check(bg, err, sizeof err) != PLAN_OK)
        fprintf(stderr, "planrun: --background %s: the plan fails its check: %s\n", o->bg, err), rc = EXIT_BACKGROUND;
    else if (bg->meta.world != 1)
        fprintf(stderr, "planrun: --background %s: the plan has %u ranks; a background job is a one-rank plan (every rank "
                "of the foreground trains its own replica of it): compile it with --devices 1\n", o->bg, bg->meta.world),
            rc = EXIT_BACKGROUND;
    else if (o->bg_replica >= (int)fg_world)
        fprintf(stderr, "planrun: --background-replica %d: the foreground has %u rank%s, so replicas 0 to %u\n", o->bg_replica,
                fg_world, fg_world == 1 ? "" : "s", fg_world - 1), rc = EXIT_USAGE;
    if (rc) plan_free(bg);
    return rc;
}

// How this process runs the plan: every rank (the cpu backends) or one (cuda), and whether it
// speaks for the run (prints the losses, writes --losses).
typedef struct how {
    const char *backend;            // the rt_options backend (NULL: --backend's; "cpu-mpi" under mpirun)
    int processes;                  // the run's processes (0: one)
    bool one_rank;
    int rank;
    bool leader;
    const void *backend_config;
    const plan *bg;                 // --background: the one-rank plan, else NULL
    const void *bg_backend_config;  // the background's backend settings (cuda: lowest priority)
} how;

// What one step moves: samples (the first data input's batch, times the micro-batches), tokens
// (a token input's elements, times the micro-batches; -1 for a model without one) and the arena
// per rank.
typedef struct step_size {
    double samples, tokens;
    uint64_t arena;
} step_size;

static step_size step_size_of(const plan *p, bool f64) {
    step_size z = {0, -1, 0};
    for (uint32_t t = 0; t < p->n_tensors; t++) {
        const plan_tensor *x = &p->tensors[t];
        if (x->kind != PLAN_T_INPUT || x->source == PLAN_DATA_ARANGE) continue;
        double n = 1;
        for (int d = 0; d < x->rank; d++) n *= (double)x->shape[d];
        if (!z.samples && x->rank) z.samples = (double)x->shape[0] * p->meta.micro_batches;
        if (x->source == PLAN_DATA_TOKENS && z.tokens < 0) z.tokens = n * p->meta.micro_batches;
    }
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].arena_bytes > z.arena) z.arena = p->programs[k].arena_bytes;
    z.arena *= f64 ? 2 : 1;
    return z;
}

// The plan's mesh as "pp 1 x dp 4 x tp 1" (or as JSON members "pp": 1, ...).
static void mesh_str(const plan *p, char *mesh, size_t size, bool json) {
    size_t n = 0;
    mesh[0] = 0;
    for (uint32_t a = 0; a < p->meta.n_axes && n < size; a++)
        n += (size_t)snprintf(mesh + n, size - n, json ? "%s\"%s\": %u" : "%s%s %u", a ? (json ? ", " : " x ") : "", p->meta.axis_names[a],
                              p->meta.mesh[a]);
}

// --json's first line: what runs.
static void json_start(const options *o, const plan *p, const how *h) {
    char mesh[256];
    mesh_str(p, mesh, sizeof mesh, true);
    step_size z = step_size_of(p, o->f64);
    printf("{\"type\": \"start\", \"plan\": \"%s\", \"model\": \"%s\", \"world\": %u, \"mesh\": {%s}, \"micro_batches\": %u, "
           "\"backend\": \"%s\", \"processes\": %d, \"steps\": %ld, \"seed\": %llu, \"arena_bytes\": %llu, \"samples_per_step\": %.17g, "
           "\"tokens_per_step\": ", o->plan, p->meta.model_name ? p->meta.model_name : "", p->meta.world, mesh, p->meta.micro_batches,
           h->backend ? h->backend : o->backend, h->processes ? h->processes : 1, o->steps, (unsigned long long)o->seed,
           (unsigned long long)z.arena, z.samples);
    printf(z.tokens >= 0 ? "%.17g" : "null", z.tokens);
    printf("}\n");
}

static void describe_plan(const options *o, const plan *p, const how *h) {
    char mesh[256], procs[64] = "";
    mesh_str(p, mesh, sizeof mesh, false);
    if (h->processes > 1) snprintf(procs, sizeof procs, " over MPI (%d processes)", h->processes);
    size_t n = strlen(mesh);
    uint64_t peak = 0;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].arena_bytes > peak) peak = p->programs[k].arena_bytes;
    fprintf(text_out, "planrun: %s: model %s, %u rank%s (%s), %u micro-batch%s, %s backend, arena %.2f MiB per rank, seed %llu%s%s\n",
           o->plan, p->meta.model_name ? p->meta.model_name : "?", p->meta.world, p->meta.world == 1 ? "" : "s",
           n ? mesh : "one device", p->meta.micro_batches, p->meta.micro_batches == 1 ? "" : "es", o->backend,
           (double)peak / (1 << 20), (unsigned long long)o->seed, o->data ? ", data " : ", synthetic data",
           o->data ? o->data : "");
    if (*procs) fprintf(text_out, "planrun: one rank per process%s; losses summed in rank order, as the threaded run sums them\n", procs);
    if (o->emulate_network)
        fprintf(text_out, "planrun: network emulated: each collective, send and receive takes the plan's time for it on its ranks' links%s\n",
               o->dilation > 0 && o->dilation != 1 ? ", dilated" : "");
    if (o->emulate_network && o->dilation > 0 && o->dilation != 1) fprintf(text_out, "planrun: time dilation %g\n", o->dilation);
}


/* ---- the background job (--background; bgjob.c, gate.c) ---- */

typedef struct background {
    rt_gate *gates;                 // one per foreground rank
    int n_gates;
    rt_bgjob job;
} background;

// Before the foreground's rt_run_init: one gate per rank, hooked into the foreground's options.
static int bg_gates(const options *o, const how *h, int world, rt_options *ro, background *b) {
    memset(b, 0, sizeof *b);
    if (!h->bg) return 0;
    if (!(b->gates = calloc((size_t)world, sizeof *b->gates))) {
        fprintf(stderr, "planrun: out of memory\n");
        return EXIT_RUN;
    }
    for (int q = 0; q < world; q++, b->n_gates++)
        if (rt_gate_init(&b->gates[q], o->bg_inflight)) {
            fprintf(stderr, "planrun: cannot make the background gate of rank %d\n", q);
            return EXIT_RUN;
        }
    ro->gates = b->gates;
    return 0;
}

// The replicas (one per foreground rank this process runs), started.
static int bg_start(const options *o, const how *h, const rt_options *ro, background *b, bool quiet) {
    if (!h->bg) return 0;
    char err[2048];
    int *ranks = malloc((size_t)b->n_gates * sizeof *ranks), n = 0;
    if (!ranks) return fprintf(stderr, "planrun: out of memory\n"), EXIT_RUN;
    for (int q = 0; q < b->n_gates; q++)
        if (!h->one_rank || q == h->rank) ranks[n++] = q;
    rt_options bo = *ro;
    bo.backend_config = h->bg_backend_config;
    int rc = rt_bgjob_init(&b->job, h->bg, &bo, ranks, n, o->bg_seed, b->gates, o->bg_steps, err, sizeof err);
    free(ranks);
    if (rc) return fprintf(stderr, "planrun: --background %s: %s\n", o->bg, err), EXIT_BACKGROUND;
    b->job.nice = o->bg_nice;
    if (!quiet) {
        char steps[64] = "steps until the foreground ends";
        if (o->bg_steps >= 0) snprintf(steps, sizeof steps, "%ld steps", o->bg_steps);
        fprintf(text_out, "planrun: background %s: model %s, a replica beside each of %d rank%s (seed %llu + rank), %s, at most %u "
               "piece%s in flight, none during the foreground's collectives\n", o->bg, h->bg->meta.model_name ? h->bg->meta.model_name : "?",
               n, n == 1 ? "" : "s", (unsigned long long)o->bg_seed, steps, o->bg_inflight, o->bg_inflight == 1 ? "" : "s");
    }
    if (rt_bgjob_start(&b->job, err, sizeof err)) {
        fprintf(stderr, "planrun: %s\n", err);
        for (int q = 0; q < b->n_gates; q++) rt_gate_close(&b->gates[q]);
        rt_bgjob_join(&b->job, err, sizeof err);
        return EXIT_RUN;
    }
    return 0;
}

static void bg_report(const background *b) {
    for (int k = 0; k < b->job.n; k++) {
        const rt_bgjob_replica *x = &b->job.reps[k];
        rt_gate_stats st;
        rt_gate_stats_get(&b->gates[x->rank], &st);
        fprintf(text_out, "background beside rank %d: seed %llu, %llu step%s, loss %.6f -> %.6f; %llu pieces, %llu held back by the gate (%llu "
               "during foreground collectives), at most %u in flight; %llu foreground collectives (%llu began with a piece in flight)\n",
               x->rank, (unsigned long long)x->seed, (unsigned long long)x->steps, x->steps == 1 ? "" : "s", x->first_loss,
               x->last_loss, (unsigned long long)st.admitted, (unsigned long long)st.held, (unsigned long long)st.held_coll,
               st.max_inflight, (unsigned long long)st.fg_colls, (unsigned long long)st.overlapped);
    }
}

// --background-save and --background-compare on the replica they name (when this process runs it).
static int bg_files(const options *o, const background *b, bool quiet) {
    const rt_bgjob_replica *x = NULL;
    for (int k = 0; k < b->job.n; k++)
        if (b->job.reps[k].rank == o->bg_replica) x = &b->job.reps[k];
    if (!x) return 0;
    char err[4096];
    if (o->bg_save) {
        if (rt_save(&x->run, o->bg_save, err, sizeof err)) return fprintf(stderr, "planrun: --background-save: %s\n", err), EXIT_FILE;
        if (!quiet) fprintf(text_out, "saved the background replica beside rank %d to %s\n", x->rank, o->bg_save);
    }
    if (o->bg_compare) {
        rt_diff d;
        int c = rt_compare(&x->run, o->bg_compare, o->rtol, o->atol, &d, err, sizeof err);
        if (c < 0) return fprintf(stderr, "planrun: --background-compare: %s\n", err), EXIT_FILE;
        if (c > 0) return fprintf(stderr, "planrun: --background-compare %s (replica beside rank %d): %s\n", o->bg_compare, x->rank, err), EXIT_DIFFER;
        fprintf(text_out, "background replica beside rank %d: parameters equal %s's within atol %g + rtol %g; largest difference %.3g (\"%s\")\n",
               x->rank, o->bg_compare, o->atol, o->rtol, d.abs, d.tensor);
    }
    return 0;
}

// After the foreground's steps: replicas that run until the foreground ends stop after their
// step; a failed foreground shuts the gates (its replicas stop, their errors are not news).
static int bg_end(const options *o, background *b, bool fg_ok, bool quiet) {
    if (!b->gates) return 0;
    char err[2048];
    if (!fg_ok)
        for (int q = 0; q < b->n_gates; q++) rt_gate_close(&b->gates[q]);
    rt_bgjob_stop(&b->job);
    int rc = rt_bgjob_join(&b->job, err, sizeof err);
    if (!fg_ok) return 0;
    if (rc) return fprintf(stderr, "planrun: %s\n", err), EXIT_RUN;
    if (!quiet) bg_report(b);
    return bg_files(o, b, quiet);
}

static void bg_free(background *b) {
    rt_bgjob_free(&b->job);
    for (int q = 0; q < b->n_gates; q++) rt_gate_free(&b->gates[q]);
    free(b->gates);
    memset(b, 0, sizeof *b);
}

static uint64_t max_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024 : 0;
}

static void figures_of(const options *o, const step_size *z, long s, double loss, double dt, rt_step_figures *f) {
    *f = (rt_step_figures){.step = (uint64_t)s, .steps = (uint64_t)o->steps, .loss = loss, .time_s = dt,
                           .samples_per_s = dt > 0 ? z->samples / dt : 0, .tokens_per_s = z->tokens < 0 ? -1 : dt > 0 ? z->tokens / dt : 0,
                           .arena_bytes = z->arena, .rss_bytes = max_rss_bytes()};
}

// --json's last line: the run as a whole.
static void json_summary(const options *o, const step_size *z, double el, double first, double last) {
    rt_step_figures f;
    figures_of(o, z, o->steps, last, el / (o->steps ? (double)o->steps : 1), &f);
    printf("{\"type\": \"summary\", \"steps\": %ld, \"seconds\": %.9g, \"steps_per_s\": %.9g, \"first_loss\": ", o->steps, el,
           el > 0 ? (double)o->steps / el : 0);
    printf(isfinite(first) ? "%.9g" : "null", first);
    printf(", \"last_loss\": ");
    printf(isfinite(last) ? "%.9g" : "null", last);
    printf(", \"samples_per_s\": %.9g, \"tokens_per_s\": ", f.samples_per_s);
    printf(f.tokens_per_s >= 0 ? "%.9g" : "null", f.tokens_per_s);
    printf(", \"arena_bytes\": %llu, \"max_rss_bytes\": %llu}\n", (unsigned long long)f.arena_bytes, (unsigned long long)f.rss_bytes);
}

// One step's figures: to the log (text or JSON, every --log-every steps), --metrics and --plot.
static int step_done(const options *o, const step_size *z, long s, double loss, double dt, bool speak, rt_metrics *mx) {
    char err[512];
    rt_step_figures f;
    figures_of(o, z, s, loss, dt, &f);
    bool log = o->log_every && (s % o->log_every == 0 || s == o->steps);
    if (speak && log && o->json) rt_step_json(stdout, &f), putchar('\n');
    else if (speak && log && !o->quiet) printf("step %ld/%ld  loss %.6f  %.3f ms\n", s, o->steps, loss, 1e3 * dt);
    char note[64];
    snprintf(note, sizeof note, "loss %.6g", loss);
    cli_progress_count((uint64_t)s);
    cli_progress_note(note);
    if (mx && rt_metrics_add(mx, &f, err, sizeof err)) return fprintf(stderr, "planrun: %s\n", err), EXIT_FILE;
    return 0;
}

// The training steps: each step's loss (to lf, the --losses file, when not NULL; to the log and
// the metrics mx, when not NULL), then the drain of a background round still running; closes lf.
// speak: this process prints (rank 0's). 0, or the exit code of the failure.
static int run_steps(const options *o, rt_run *r, FILE *lf, bool speak, rt_metrics *mx) {
    char err[4096];
    int rc = 0;
    step_size z = step_size_of(r->p, o->f64);
    double t0 = rt_clock_s(), loss = NAN, first = NAN;
    if (speak) {
        snprintf(err, sizeof err, "training %s", o->plan);
        cli_progress_work(err, "steps", (uint64_t)o->steps);
    }
    for (long s = 0; s < o->steps && !rc; s++) {
        double ts = rt_clock_s();
        int st = rt_run_step(r, &loss, err, sizeof err);
        if (st) {
            fprintf(stderr, "planrun: %s%s\n", err, st == RT_STEP_NONFINITE && o->save ? "; nothing saved" : "");
            rc = st == RT_STEP_NONFINITE ? EXIT_NONFINITE : EXIT_RUN;
            break;
        }
        if (s == 0) first = loss;
        if (lf) fprintf(lf, o->f64 ? "%.17g\n" : "%.9g\n", loss);
        rc = step_done(o, &z, s + 1, loss, rt_clock_s() - ts, speak, mx);
    }
    cli_progress_work(NULL, NULL, 0);
    // A background round may still be running on the GPU: the run's time includes it, and
    // --save and --compare read the parameters it writes.
    if (!rc && rt_run_drain(r, err, sizeof err)) {
        fprintf(stderr, "planrun: %s\n", err);
        rc = EXIT_RUN;
    }
    if (lf && fclose(lf) && !rc) {
        fprintf(stderr, "planrun: %s: cannot write the losses\n", o->losses);
        rc = EXIT_FILE;
    }
    double el = rt_clock_s() - t0;
    if (!rc && speak && o->json) json_summary(o, &z, el, first, loss);
    else if (!rc && speak && !o->quiet && o->steps)
        printf("%ld steps in %.3f s (%.1f steps/s); loss %.6f -> %.6f\n", o->steps, el, (double)o->steps / el, first, loss);
    return rc;
}

// --metrics and --plot, after the steps: the file closed, the picture drawn.
static int metrics_end(const options *o, const plan *p, rt_metrics *mx, int rc) {
    char err[1024], title[512];
    if (rt_metrics_close(mx, err, sizeof err) && !rc) fprintf(stderr, "planrun: %s\n", err), rc = EXIT_FILE;
    snprintf(title, sizeof title, "%s: %s, %u rank%s, %s backend", o->plan, p->meta.model_name ? p->meta.model_name : "?", p->meta.world,
             p->meta.world == 1 ? "" : "s", o->backend);
    if (!rc && o->plot && rt_metrics_svg(mx, o->plot, title, err, sizeof err)) fprintf(stderr, "planrun: %s\n", err), rc = EXIT_FILE;
    rt_metrics_free(mx);
    return rc;
}

// After a good run: how many background rounds the ranks ran (unless quiet or none ran).
static void run_report(const rt_run *r, bool quiet) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int q = 0; q < r->world; q++)
        if (r->ranks && r->ranks[q].local && r->ranks[q].bg_loop >= 0) {
            lo = r->ranks[q].bg_rounds < lo ? r->ranks[q].bg_rounds : lo;
            hi = r->ranks[q].bg_rounds > hi ? r->ranks[q].bg_rounds : hi;
        }
    if (!quiet && lo != UINT64_MAX)
        fprintf(text_out, "background rounds: %llu to %llu per rank\n", (unsigned long long)lo, (unsigned long long)hi);
}

// After a good run: the teacher's labels this process drew (unless quiet or none).
static void teacher_report(bool quiet) {
    rt_teacher_stats ts;
    rt_teacher_stats_get(&ts);
    if (!quiet && ts.labels > 0) // this process's ranks: every label once per step and micro-batch
        fprintf(text_out, "teacher labels: %.0f drawn, mean label %.6f, mean probability %.6f, best loss %.6f (the teacher's mean entropy)\n",
               ts.labels, ts.sum_label / ts.labels, ts.sum_prob / ts.labels, ts.sum_entropy / ts.labels);
}

// --save and --compare on the trained parameters. 0, or the exit code of the failure.
static int run_files(const options *o, const rt_run *r, bool quiet) {
    char err[4096];
    if (o->save) {
        if (rt_save(r, o->save, err, sizeof err)) return fprintf(stderr, "planrun: %s\n", err), EXIT_FILE;
        if (!quiet) fprintf(text_out, "saved the parameters and optimizer state to %s\n", o->save);
    }
    if (o->compare) {
        rt_diff d;
        int c = rt_compare(r, o->compare, o->rtol, o->atol, &d, err, sizeof err);
        if (c < 0) return fprintf(stderr, "planrun: %s\n", err), EXIT_FILE;
        if (c > 0) return fprintf(stderr, "planrun: --compare %s: %s\n", o->compare, err), EXIT_DIFFER;
        fprintf(text_out, "parameters equal %s's within atol %g + rtol %g; largest difference %.3g (\"%s\")\n", o->compare, o->atol,
               o->rtol, d.abs, d.tensor);
    }
    return 0;
}

/* ---- --trace: the measured timeline (trace.c) ---- */

enum { TRACE_MAX_SLICES = 1 << 22 }; // 160 MiB of slices at most; past it they are counted, not kept

// The file this process writes: --trace's, or where it runs one rank of several, the name with
// ".rankN" before its extension (t.json -> t.rank3.json), so that processes never share a file.
static void trace_path(const options *o, const how *h, const plan *p, char *buf, size_t n) {
    const char *dot = strrchr(o->trace, '.'), *slash = strrchr(o->trace, '/');
    if (!h->one_rank || p->meta.world == 1) snprintf(buf, n, "%s", o->trace);
    else if (!dot || (slash && dot < slash)) snprintf(buf, n, "%s.rank%d", o->trace, h->rank);
    else snprintf(buf, n, "%.*s.rank%d%s", (int)(dot - o->trace), o->trace, h->rank, dot);
}

// Before the run starts: the trace in ro (with --trace). 0, or EXIT_RUN with a message.
static int trace_start(const options *o, const plan *p, rt_options *ro) {
    if (!o->trace) return 0;
    uint32_t streams = 1;
    for (uint32_t k = 0; k < p->n_programs; k++) streams = p->programs[k].n_streams > streams ? p->programs[k].n_streams : streams;
    if (!(ro->trace = rt_trace_new((int)p->meta.world, streams, TRACE_MAX_SLICES)))
        return fprintf(stderr, "planrun: out of memory starting the trace\n"), EXIT_RUN;
    return 0;
}

// Before the first step: the --trace file, opened (a path that cannot be written costs no run).
// 0, or EXIT_FILE with a message.
static int trace_open(const options *o, const how *h, const plan *p, FILE **f) {
    *f = NULL;
    if (!o->trace) return 0;
    char path[4200];
    trace_path(o, h, p, path, sizeof path);
    if (!(*f = fopen(path, "w"))) return fprintf(stderr, "planrun: --trace %s: cannot write it: %s\n", path, strerror(errno)), EXIT_FILE;
    return 0;
}

// After the steps (a failed run's too): writes this process's ranks' timeline and frees the
// trace. 0, or EXIT_FILE with a message.
static int trace_close(const options *o, const how *h, const plan *p, rt_options *ro, FILE *f, bool quiet) {
    if (!f) {
        rt_trace_free(ro->trace), ro->trace = NULL;
        return 0;
    }
    bool *local = calloc(p->meta.world, sizeof *local);
    for (uint32_t q = 0; local && q < p->meta.world; q++) local[q] = !h->one_rank || (int)q == h->rank;
    rt_trace_info info = {.plan_path = o->plan, .backend = o->backend, .f64 = o->f64};
    char path[4200];
    trace_path(o, h, p, path, sizeof path);
    int bad = !local || rt_trace_write(ro->trace, p, local, &info, f);
    bad |= fclose(f) != 0;
    uint64_t dropped = rt_trace_dropped(ro->trace);
    if (dropped) fprintf(stderr, "planrun: --trace %s: %llu instructions not recorded (more than %d); trace fewer steps\n", path,
                         (unsigned long long)dropped, TRACE_MAX_SLICES);
    else if (!bad && !quiet) fprintf(text_out, "wrote the measured timeline to %s\n", path);
    free(local);
    rt_trace_free(ro->trace), ro->trace = NULL;
    if (bad) fprintf(stderr, "planrun: --trace %s: cannot write it\n", path);
    return bad ? EXIT_FILE : 0;
}

// The files the run writes or reads after its steps, checked before the first step (a typo
// used to lose the run): --save and --losses can be written (runtime/plan/file.c), --compare
// and --load can be read. 0, or EXIT_FILE with a message.
static int check_paths(const options *o) {
    char err[4096];
    const char *out[] = {o->save, o->losses}, *in[] = {o->load, o->compare};
    for (int i = 0; i < 2; i++)
        if (out[i] && plan_out_check(out[i], err, sizeof err))
            return fprintf(stderr, "planrun: %s %s\n", i ? "--losses" : "--save", err), EXIT_FILE;
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        if (!in[i]) continue;
        if (stat(in[i], &sb) != 0 || access(in[i], R_OK) != 0)
            return fprintf(stderr, "planrun: %s %s: cannot read: %s\n", i ? "--compare" : "--load", in[i], strerror(errno)), EXIT_FILE;
        if (S_ISDIR(sb.st_mode))
            return fprintf(stderr, "planrun: %s %s: cannot read: it is a directory\n", i ? "--compare" : "--load", in[i]), EXIT_FILE;
    }
    return 0;
}

// One run of the plan: the corpus, the run (and the background job's gates and replicas), the
// steps, the reports and files. Returns planrun's exit code.
static int run(const options *o, const plan *p, const how *h) {
    char err[4096];
    if (h->leader && check_paths(o)) return EXIT_FILE;
    rt_corpus corpus = {0};
    if (o->data && (rt_corpus_open(&corpus, o->data, err, sizeof err) || rt_corpus_check(&corpus, p, o->data, err, sizeof err))) {
        fprintf(stderr, "planrun: %s\n", err);
        rt_corpus_free(&corpus);
        return EXIT_FILE;
    }
    rt_options ro = {.backend = h->backend ? h->backend : o->backend, .f64 = o->f64, .one_rank = h->one_rank, .rank = h->rank, .seed = o->seed,
                     .timeout_s = o->timeout_s, .corpus = &corpus, .steps = (uint64_t)o->steps, .backend_config = h->backend_config,
                     .emulate_network = o->emulate_network, .dilation = o->dilation, .allow_nonfinite = o->allow_nonfinite,
                     .watchdog_exit = EXIT_RUN, .watchdog_prefix = "planrun: "};
    bool quiet = o->quiet || !h->leader;
    background bg;
    FILE *tf = NULL;
    int rc = trace_start(o, p, &ro);
    if (!rc) rc = bg_gates(o, h, (int)p->meta.world, &ro, &bg);
    else memset(&bg, 0, sizeof bg);
    rt_run r;
    if (rc || rt_run_init(&r, p, &ro, err, sizeof err)) {
        if (!rc) fprintf(stderr, "planrun: %s: %s\n", o->plan, err);
        rt_trace_free(ro.trace);
        bg_free(&bg);
        rt_corpus_free(&corpus);
        return rc ? rc : EXIT_BACKEND;
    }
    if (o->load && rt_load(&r, o->load, err, sizeof err)) {
        fprintf(stderr, "planrun: %s\n", err);
        rc = EXIT_FILE;
    }
    FILE *lf = NULL;
    if (!rc && o->losses && h->leader && !(lf = fopen(o->losses, "w"))) {
        fprintf(stderr, "planrun: %s: cannot write the losses\n", o->losses);
        rc = EXIT_FILE;
    }
    if (!rc) rc = trace_open(o, h, p, &tf);
    rt_metrics mx;
    bool keep = h->leader && (o->metrics || o->plot);
    if (!rc && rt_metrics_open(&mx, keep ? o->metrics : NULL, err, sizeof err)) fprintf(stderr, "planrun: %s\n", err), rc = EXIT_FILE;
    if (!rc && !quiet) describe_plan(o, p, h);
    if (!rc && o->json && h->leader) json_start(o, p, h);
    if (!rc) rc = bg_start(o, h, &ro, &bg, o->quiet);
    if (!rc) rc = metrics_end(o, p, &mx, run_steps(o, &r, lf, h->leader, keep ? &mx : NULL));
    else if (lf) fclose(lf);
    if (!rc) run_report(&r, quiet);
    int bg_rc = bg_end(o, &bg, !rc, o->quiet);
    if (!rc) teacher_report(quiet);
    if (!rc) rc = run_files(o, &r, quiet);
    int trace_rc = trace_close(o, h, p, &ro, tf, quiet);
    rc = rc ? rc : trace_rc;
    rt_run_free(&r);
    bg_free(&bg);
    rt_corpus_free(&corpus);
    return rc ? rc : bg_rc;
}

// A failure every rank of an mpirun reaches alike, before any message (rt_mpi_end).
static bool mpi_agreed;

// Under mpirun: one rank of the plan per process, through MPI (comm_mpi.c).
static int run_cpu_mpi(const options *o, const plan *p, const plan *bg, const rt_launch *l) {
    char err[512];
    int rank, world;
    if (rt_mpi_begin(&rank, &world, err, sizeof err)) return fprintf(stderr, "planrun: rank %d: %s\n", l->rank, err), EXIT_BACKEND;
    if (rank != l->rank || world != l->world) {
        fprintf(stderr, "planrun: MPI says rank %d of %d, but %s and %s say rank %d of %d\n", rank, world, l->rank_from, l->world_from,
                l->rank, l->world);
        return EXIT_LAUNCH;
    }
    if (world != (int)p->meta.world) {
        fprintf(stderr, "planrun: %s: the plan was compiled for %u rank%s but mpirun started %d processes: run mpirun -np %u\n", o->plan,
                p->meta.world, p->meta.world == 1 ? "" : "s", world, p->meta.world);
        mpi_agreed = true;
        return EXIT_LAUNCH;
    }
    const char *why = bg ? "--background" : o->save || o->compare ? "--save and --compare" : o->emulate_network ? "--emulate-network"
                    : strcmp(o->backend, "cpu") ? "--backend cpu-serial" : NULL;
    if (why) {
        fprintf(stderr, "planrun: %s: not with one rank per process under mpirun (they need every rank in one process: start a "
                "single planrun)\n", why);
        mpi_agreed = true;
        return EXIT_USAGE;
    }
    how h = {.backend = "cpu-mpi", .processes = world, .one_rank = true, .rank = rank, .leader = rank == 0};
    return run(o, p, &h);
}

// The cpu backends run every rank here, or under mpirun one rank per process; another launcher
// that says this is one of several processes is a mistake (a world of one, srun -n 1 say, is fine).
static int run_cpu(const options *o, const plan *p, const plan *bg, const rt_launch *l) {
    if (l->launched && l->world > 1 && l->by_mpi) return run_cpu_mpi(o, p, bg, l);
    if (l->launched && l->world > 1) {
        fprintf(stderr, "planrun: the %s backend runs every rank of the plan in this one process, or one rank per process under "
                "mpirun, but %s says this is one of %d processes: start it with mpirun -np %d, use --backend cuda (one rank per "
                "process), or start a single planrun\n", o->backend, l->world_from, l->world, l->world);
        return EXIT_LAUNCH;
    }
    how h = {.leader = true, .bg = bg};
    return run(o, p, &h);
}

#ifdef PLANCC_HAVE_CUDA
static void describe_launch(const rt_launch *l, const rt_rendezvous *r) {
    char who[512], how_[300];
    rt_launch_describe(l, who, sizeof who);
    rt_rendezvous_describe(r, how_, sizeof how_);
    fprintf(text_out, "planrun[%d]: %s; rendezvous %s\n", l->rank, who, how_);
    fflush(stdout);
}

static void describe_gpu(const rt_launch *l, const rt_cuda_device *d) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    fprintf(text_out, "planrun[%d]: GPU %d of %d (%s, sm_%d%d, %.1f GiB%s%s%s); CUDA runtime %d.%d, driver %d.%d, NCCL %d.%d.%d, cuDNN %d.%d.%d, "
           "cuBLAS %d.%d.%d\n", l->rank, d->ordinal, d->count, d->name, d->cc_major, d->cc_minor, (double)d->mem_bytes / (1 << 30),
           vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", "", d->runtime_version / 1000, d->runtime_version % 1000 / 10,
           d->driver_version / 1000, d->driver_version % 1000 / 10, d->nccl_version / 10000, d->nccl_version / 100 % 100,
           d->nccl_version % 100, d->cudnn_version / 10000, d->cudnn_version / 100 % 100, d->cudnn_version % 100,
           d->cublas_version / 10000, d->cublas_version / 100 % 100, d->cublas_version % 100);
    fflush(stdout);
}

// One rank per process: who this is, which GPU, the NCCL id from rank 0, then the steps.
static int run_cuda(const options *o, const plan *p, const plan *bg, rt_launch *l) {
    char err[2048];
    if (!l->launched) {
        if (p->meta.world != 1) {
            fprintf(stderr, "planrun: %s: the plan has %u ranks and the cuda backend runs one rank per process: start %u "
                    "processes (torchrun, mpirun, srun) or give each --rank R --world-size %u\n", o->plan, p->meta.world,
                    p->meta.world, p->meta.world);
            return EXIT_LAUNCH;
        }
        l->rank = 0, l->world = 1, l->local_rank = 0;
        l->rank_from = l->world_from = l->local_from = "default";
        l->launched = true;
    }
    if (l->world != (int)p->meta.world) {
        fprintf(stderr, "planrun: %s: the plan was compiled for %u rank%s but %s says the world has %d\n", o->plan, p->meta.world,
                p->meta.world == 1 ? "" : "s", l->world_from, l->world);
        return EXIT_LAUNCH;
    }
    if (l->world > 1 && (o->save || o->compare)) {
        fprintf(stderr, "planrun: --save and --compare need every rank's parameters in one process: with the cuda backend "
                "they work on plans of one rank\n");
        return EXIT_USAGE;
    }
    rt_rendezvous rdv;
    if (rt_rendezvous_choose(&rdv, o->rendezvous, l, err, sizeof err)) {
        fprintf(stderr, "planrun: rank %d: %s\n", l->rank, err);
        return EXIT_LAUNCH;
    }
    if (!o->quiet) describe_launch(l, &rdv);
    // The GPU first: a rank without one says so at once and stops, rather than meet its peers and
    // fail after the rendezvous (its peers then stop at the rendezvous's timeout, naming it).
    rt_cuda_config cfg = {.rank = l->rank, .world = l->world, .tf32 = o->tf32};
    rt_cuda_device dev;
    if (rt_cuda_load(err, sizeof err)) {
        fprintf(stderr, "planrun: --backend cuda, rank %d: %s; stopping before the rendezvous\n", l->rank, err);
        return EXIT_BACKEND;
    }
    if (rt_cuda_device_open(l->local_rank, &dev, err, sizeof err)) {
        fprintf(stderr, "planrun: --backend cuda, rank %d (local rank %d): %s; stopping before the rendezvous (its peers will "
                "time out waiting for rank %d)\n", l->rank, l->local_rank, err, l->rank);
        return EXIT_NO_GPU;
    }
    if (l->world > 1 || o->rendezvous) { // a world of one meets only when asked to (a test of the path)
        if (l->rank == 0 && rt_cuda_nccl_id(cfg.nccl_id, err, sizeof err)) {
            fprintf(stderr, "planrun: rank 0: cannot make the NCCL id: %s\n", err);
            return EXIT_LAUNCH;
        }
        if (rt_rendezvous_run(&rdv, l->rank, l->world, cfg.nccl_id, sizeof cfg.nccl_id, o->timeout_s, err, sizeof err)) {
            fprintf(stderr, "planrun: rank %d: %s\n", l->rank, err);
            rt_rendezvous_finish();
            return EXIT_LAUNCH;
        }
        if (!o->quiet) fprintf(text_out, "planrun[%d]: rendezvous done: rank 0's NCCL id received\n", l->rank);
    }
    cfg.device = dev.ordinal;
    if (!o->quiet) describe_gpu(l, &dev);
    // With a background job the foreground's streams take the device's highest priorities and
    // the background replica's (a one-rank run of its own on this GPU) the lowest.
    rt_cuda_config bg_cfg = cfg;
    if (bg) {
        cfg.priority = RT_CUDA_PRIORITY_HIGH;
        bg_cfg.rank = 0, bg_cfg.world = 1, bg_cfg.priority = RT_CUDA_PRIORITY_LOW;
    }
    how h = {.one_rank = true, .rank = l->rank, .leader = l->rank == 0, .backend_config = &cfg, .bg = bg, .bg_backend_config = &bg_cfg};
    int rc = run(o, p, &h);
    rt_rendezvous_finish();
    return rc;
}
#endif

int main(int argc, char **argv) {
    options o;
    text_out = stdout;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.json) text_out = stderr;
    rt_launch l;
    char err[1024];
    if (rt_launch_discover(&l, o.rank, o.world, o.local_rank, NULL, err, sizeof err)) {
        fprintf(stderr, "planrun: %s\n", err);
        return EXIT_LAUNCH;
    }
    plan p, bg;
    if ((rc = load_plan(&o, &p))) return rc;
    // Progress from the process that prints (rank 0 of a multi-process run).
    cli_progress_start("planrun", o.quiet || (l.launched && l.rank > 0));
    if (o.bg && (rc = load_background(&o, p.meta.world, &bg))) {
        plan_free(&p);
        return rc;
    }
    const plan *bgp = o.bg ? &bg : NULL;
    if (!strcmp(o.backend, "cuda")) {
#ifdef PLANCC_HAVE_CUDA
        rc = run_cuda(&o, &p, bgp, &l);
#else
        fprintf(stderr, "planrun: this planrun was built without the cuda backend (meson found no CUDA toolkit with cuBLAS, "
                "cuDNN and NCCL); use --backend cpu\n");
        rc = EXIT_BACKEND;
#endif
    } else {
        rc = run_cpu(&o, &p, bgp, &l);
    }
    if (bgp) plan_free(&bg);
    plan_free(&p);
    cli_progress_stop();
    rt_mpi_end(rc, mpi_agreed);
    return rc;
}
