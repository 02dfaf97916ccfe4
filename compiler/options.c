/*
 * options.c: plancc's command line: the options, their checks against each other, the usage
 * text, and the canonical option string a plan records.
 *
 * options_parse fills one pcc_options (plancc.h) from argv with getopt_long, then checks what
 * no single option can: a template (--dp --tp --pp) or --auto, --burst and what it excludes,
 * --check and what it leaves out, the batch options, --sync background against ZeRO. Every
 * usage error prints one line "plancc: ..." and returns PCC_ERR_INPUT (exit 2); --help and
 * --version print to stdout and set *done. The parts of the options each phase reads are laid
 * out as that phase's own options struct (pcc_batch_opts, pcc_search_opts, pcc_preserve_opts),
 * so the driver hands them on as they are.
 *
 * options_runs says which phases the options ask for (--check stops after its report or after
 * the phases its -d dumps need; --estimate-only after phase 2). options_emit gives the emitter
 * what the plan records: the options that decide the plan in one canonical order (so that the
 * same options give the same bytes and the same hash however they were spelled) and the hashes
 * of the model and cluster files.
 */
#include "plancc.h"
#include "policy.h"
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: plancc MODEL --cluster FILE [-o PLAN] [--nodes N | --devices N] [strategy] [options]\n"
            "       plancc --check MODEL [--cluster FILE [--nodes N] [--devices N]] [--json] [-v] [-q]\n"
            "       plancc --config FILE [MODEL] [options]\n"
            "       plancc --help | --version\n"
            "\n"
            "plancc compiles a DNN training job (a model graph in JSON and a cluster in JSON) into a\n"
            "parallel execution plan: phase 1 splits every operator, phase 2 picks the splits (an ILP\n"
            "solved with GLPK), the device mesh and the pipeline, phase 3 inserts the collectives and\n"
            "sends that keep every producer->consumer edge correct; the memory planner places every\n"
            "buffer; the plan file is verified (plan_check) and written.\n"
            "\n"
            "  -o, --output PLAN  write the plan here (default: MODEL's name + .plan)\n"
            "  --cluster FILE     the cluster: a file, or the name of an installed one (dgx-a100, dgx-h100,\n"
            "                     cpu, cpu-ethernet: share/plancc/clusters/NAME.json, or $PLANCC_CLUSTERS)\n"
            "  --config FILE      options from a JSON object: {\"model\": \"gpt.json\", \"cluster\": \"dgx-a100\",\n"
            "                     \"tensor-model-parallel-size\": 2, \"bf16\": true}; keys are the long options\n"
            "                     (dashes or underscores), true/false for switches; the command line wins\n"
            "  --nodes N          the cluster has N nodes (default: as FILE says)\n"
            "  --devices N        the cluster has N devices in all: a whole number of nodes, or fewer\n"
            "                     than one node; on a cpu cluster without a network, any N (one node\n"
            "                     of N ranks)\n"
            "strategy (default --auto):\n"
            "  --auto             search every factorization pp x dp x tp of the devices, each with the\n"
            "                     ILP for its tensor-parallel splits, and keep the fastest that fits;\n"
            "                     where memory bound that plan (it recomputes, or a faster one was too\n"
            "                     large), also co-shard the operators with the largest outputs 2, 4 or 8\n"
            "                     ways and keep the co-shard if faster\n"
            "  --dp N --tp N --pp N\n"
            "                     the Megatron-LM template: batch split over dp, tensor parallelism of\n"
            "                     tp (inside a node), pp pipeline stages; the product is the device count\n"
            "  --policy FILE      a user policy (docs/policy.md): JSON pins on the mesh (any of dp, tp, pp,\n"
            "                     micro_batches, zero, virtual_stages, recompute, schedule), each stage's\n"
            "                     layer count, and rules that select operators by name, parameter or type\n"
            "                     and pin their split over tp (a letter or replicate), recompute, stage and\n"
            "                     co-shard;\n"
            "                     the search completes what it leaves open (--auto unless dp, tp, pp known)\n"
            "  --coshard GLOB:K[:LETTER],...\n"
            "                     co-shard (nnScaler): the operators GLOB selects run as K pieces along a\n"
            "                     letter, one after another on their devices (lower transient memory);\n"
            "                     none: no co-shard, --auto's included\n"
            "  --tp-batch         with the template: the ILP may also split the batch over the tp group\n"
            "                     (data-parallel operators beside sharded ones, as --auto tries; with\n"
            "                     --dp 1 --tp N, DLRM's layout: embedding tables sharded over all N with\n"
            "                     all-to-all exchanges, the dense layers data-parallel). Implied by\n"
            "                     --sync background where the batch divides by dp x tp\n"
            );
    fprintf(f,
            "  --cp N             with the template: context parallelism over N devices, DeepSpeed-Ulysses'\n"
            "                     form - every operator splits the sequence over cp, attention its heads\n"
            "                     (heads / (tp x cp) each), with an all-to-all before and after it; the\n"
            "                     devices are pp x dp x cp x tp (tp fastest); needs attention, and cp\n"
            "                     dividing the sequence; combines with --sequence-parallel\n");
    fprintf(f,
            "  --cp-form ulysses|ring|zigzag\n"
            "                     --cp's form: ulysses (the default, above) or ring - ring attention: each\n"
            "                     cp rank keeps its piece of the sequence in attention too, and the k/v\n"
            "                     blocks pass around the cp ranks (cp steps, the shift collective),\n"
            "                     merged by log-sum-exp; dk and dv travel with them in the backward.\n"
            "                     zigzag: the ring, causally load balanced - the sequence is cut into\n"
            "                     2 cp chunks and cp rank c holds chunks c and 2 cp - 1 - c (the plan's\n"
            "                     inputs say so; planrun feeds each rank its two), so every rank computes\n"
            "                     half a block at every step (Megatron-Core's); --auto's ring form is\n"
            "                     zigzag where attention is causal\n");
    fprintf(f,
            "  --tp2 N            with --tp: the tp group as a 2-D mesh, tp/N x N (the second axis, tp2,\n"
            "                     the faster); the ILP may then split each operator along two letters,\n"
            "                     one over each axis (nnScaler's multi-axis split: a linear's rows and\n"
            "                     columns), or one letter over both; not with --cp, --sequence-parallel,\n"
            "                     --tp-batch or --sync background\n");
    fprintf(f,
            "  --sequence-parallel\n"
            "                     with --tp 2 or more: Megatron-LM's sequence parallelism - layernorm,\n"
            "                     the residual adds and dropout split along the sequence over the tp\n"
            "                     group, so the all-reduce after a row-parallel product becomes a\n"
            "                     reduce-scatter and an all-gather before the next column-parallel one\n"
            "                     (--auto searches every tp mesh with and without it)\n");
    fprintf(f,
            "  --burst            DeepPool's burst parallelism: every layer data-parallel on its own number\n"
            "                     of devices (1, 2, 4, ... all; a power of two), chosen by a dynamic program\n"
            "                     over the layers on the cost model, with the activation moves between\n"
            "                     widths and each layer's gradient all-reduce, then refined on the step's\n"
            "                     estimate (all-reduces behind the backward pass): never slower than data\n"
            "                     parallelism on it; pair it with --global-batch\n"
            "  --amp-limit X      with --burst: DeepPool's GPU-time amplification limit (X > 1; default none;\n"
            "                     the dynamic program's choice as it is, which leaves GPUs idle for a\n"
            "                     background job)\n"
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
            "  --zero N           ZeRO stage 0..3 over dp (dp x cp with --cp): 1 shards the optimizer\n"
            "                     state (gradients summed whole over the micro-batches, reduce-scattered\n"
            "                     once); 2 also the gradients (each micro-batch's reduce-scattered and\n"
            "                     summed in the shard); 3 also the parameters\n"
            "  --prefetch P       ZeRO-3's parameter gathers: layer (default: the next layer's during this\n"
            "                     one, FSDP's prefetch; gradients reduce-scattered during the next; two\n"
            "                     layers of each held) or none (gathered at its start, each gradient\n"
            "                     reduce-scattered as made; one layer held; --auto tries it where\n"
            "                     nothing fits with the prefetch)\n"
            "  --bucket-mb X      gradient synchronization in buckets of X MB (10^6 bytes per rank), in the\n"
            "                     order the backward pass finishes the gradients, each issued as soon as its\n"
            "                     last gradient is ready (PyTorch DDP's bucket_cap_mb; default 25); 0: one\n"
            "                     collective per parameter\n"
            "  --recompute R      none, full (recompute every block operator in the backward pass) or\n"
            "                     auto (the ILP decides per operator; default)\n"
            "  --bf16, --fp16     every float tensor of the model in bf16 (f16), whatever its file says\n"
            "  --tf32             cost f32 matrix products and convolutions at the TF32 tensor-core peak\n"
            "                     (what planrun --tf32 and PyTorch's allow_tf32 run); default: the f32 peak\n"
            "  --time-limit S     the search's time budget: every ILP gets what is left (with --auto at\n"
            "                     most a twelfth of it), and the search says what it left unsolved\n"
            "                     when it runs out (default 60)\n"
            "  --mip-gap G        an ILP stops within relative gap G of its bound (default 0.005)\n"
            "  --dump-ilp FILE    write the ILP as CPLEX LP text\n"
            "  --estimate-only    plan the strategy and print the cost model's estimate of a step and its\n"
            "                     parts (with --json, as JSON); write no plan\n"
            "  -d, --dump LETTERS print phase 1's candidates (t) and phase 2's choice per operator (s)\n");
    fputs(
            "  --attention F      unfused (default: S = QK^T, softmax and PV through memory, as Megatron-LM\n"
            "                     2021) or flash (FlashAttention-2's fused kernel: key tiles with an\n"
            "                     online softmax, no s x s scores in memory): the form every attention\n"
            "                     operator runs and is costed in; the two compute the same\n"
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
            "  --json             print the report as JSON: --check's, --estimate-only's, or the compile\n"
            "                     summary (schemas/compile.schema.json)\n"
            "  -v, --verbose      more detail\n"
            "  -q, --quiet        no warnings, no summary\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version\n"
            "\n"
            "\n"
            "Megatron-LM's and DeepSpeed's names: --tensor-model-parallel-size (--tp),\n"
            "--pipeline-model-parallel-size (--pp), --global-batch-size (--global-batch), --micro-batch-size,\n"
            "--num-layers-per-virtual-pipeline-stage N (--virtual-stages = layers / (pp x N)),\n"
            "--recompute-granularity full|selective (--recompute full|auto: the ILP picks what to recompute),\n"
            "--use-distributed-optimizer (--zero 1), --zero-stage (--zero), --sequence-parallel (the same),\n"
            "--context-parallel-size (--cp), --expert-model-parallel-size (1 only: plancc has no experts to place).\n"
            "Options are never abbreviated.\n"
            "\n"
            "Formats: schemas/README.md (model, cluster), runtime/PLAN_FORMAT.md (plan). Show a plan with\n"
            "plandump PLAN. Diagnostics: \"plancc: FILE:JSON-POINTER: message\" on stderr.\n",
          f);
    cli_print_exit_codes(f);
}

enum { OPT_CONFIG = 256, OPT_CLUSTER, OPT_NODES, OPT_DEVICES, OPT_TIME_LIMIT, OPT_MIP_GAP, OPT_DUMP_ILP, OPT_DP, OPT_TP, OPT_PP,
       OPT_ZERO, OPT_RECOMPUTE, OPT_SCHEDULE, OPT_AUTO, OPT_GLOBAL_BATCH, OPT_MICRO_BATCH_SIZE, OPT_VIRTUAL_STAGES,
       OPT_ESTIMATE_ONLY, OPT_BURST, OPT_AMP_LIMIT, OPT_BURST_WIDTHS, OPT_BUCKET_MB, OPT_PREFETCH, OPT_SYNC, OPT_TF32,
       OPT_TP_BATCH, OPT_BF16, OPT_FP16, OPT_CP, OPT_EP, OPT_LAYERS_PER_VS, OPT_RECOMPUTE_GRAN, OPT_DIST_OPT,
        OPT_SEQ_PARALLEL, OPT_POLICY, OPT_CP_SHORT, OPT_ATTENTION, OPT_COSHARD, OPT_CP_FORM, OPT_TP2 };

// Where the option being read came from: NULL for the command line, "FILE:/key" for --config.
static const char *origin;

static pcc_arena *config_arena; // the config's strings and cluster paths, which the options point into, live until exit
static void config_free(void) {
    arena_free(config_arena);
    config_arena = NULL;
}

// A usage error: "plancc: [FILE:/key: ]message" (fmt ends with its newline).
static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plancc: ");
    if (origin) fprintf(stderr, "%s: ", origin);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

// What was given, for the checks after parsing.
typedef struct given {
    bool template_, auto_, schedule, recompute, virtual_stages, cp, cp_form, tp2;
} given;

static pcc_status num_option(const char *name, const char *arg, double lo, double hi, double *out) {
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg || !(v >= lo && v <= hi)) {
        bad("%s wants a number in [%g, %g], got \"%s\"\n", name, lo, hi, arg);
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
        bad("%s wants an integer in [%ld, %ld], got \"%s\"\n", name, lo, hi, arg);
        return PCC_ERR_INPUT;
    }
    *out = (int)v;
    return PCC_OK;
}

// One option, c as getopt_long returns it (a flat dispatch over the options).
static pcc_status option(int c, char **argv, pcc_options *o, given *gv, bool *done) {
    switch (c) {
    case 'c': o->check = true; break;
    case 'j': o->report.json = true; break;
    case 'v': o->report.verbose++; break;
    case 'q': o->quiet = true; break;
    case 'h': usage(stdout); *done = true; return PCC_OK;
    case 'V': printf("plancc %s (plan format %u)\n", PCC_VERSION, PLAN_VERSION); *done = true; return PCC_OK;
    case 'm': if (int_option("--micro-batches", optarg, 1, 65536, &o->batch.micro_batches)) return PCC_ERR_INPUT; o->batch.micro_batches_given = true; break;
    case OPT_GLOBAL_BATCH: {
        int gb;
        if (int_option("--global-batch", optarg, 1, INT32_MAX, &gb)) return PCC_ERR_INPUT;
        o->batch.global_batch = gb;
        break;
    }
    case OPT_MICRO_BATCH_SIZE: if (int_option("--micro-batch-size", optarg, 1, 1 << 24, &o->batch.micro_batch_size)) return PCC_ERR_INPUT; break;
    case OPT_VIRTUAL_STAGES: if (int_option("--virtual-stages", optarg, 1, 1 << 16, &o->search.virtual_stages)) return PCC_ERR_INPUT; gv->virtual_stages = true; break;
    case OPT_LAYERS_PER_VS:
        if (int_option("--num-layers-per-virtual-pipeline-stage", optarg, 1, 1 << 24, &o->layers_per_vstage)) return PCC_ERR_INPUT;
        break;
    case OPT_CONFIG: break; // read before the command line (config_parse)
    case OPT_BF16: case OPT_FP16: {
        int want = c == OPT_BF16 ? PCC_BF16 : PCC_F16;
        if (o->dtype_override && o->dtype_override - 1 != want) {
            bad("--bf16 and --fp16 exclude each other\n");
            return PCC_ERR_INPUT;
        }
        o->dtype_override = want + 1;
        break;
    }
    case OPT_PREFETCH:
        if (strcmp(optarg, "layer") && strcmp(optarg, "none")) {
            bad("--prefetch wants layer or none, got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        o->search.zero3_late = strcmp(optarg, "none") == 0;
        break;
    case OPT_CP_FORM:
        if (strcmp(optarg, "ulysses") == 0) o->search.cp_ring = o->search.cp_zigzag = false;
        else if (strcmp(optarg, "ring") == 0) o->search.cp_ring = true, o->search.cp_zigzag = false;
        else if (strcmp(optarg, "zigzag") == 0) o->search.cp_ring = o->search.cp_zigzag = true;
        else {
            bad("--cp-form wants ulysses, ring or zigzag, got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        gv->cp_form = true;
        break;
    case OPT_CP_SHORT: case OPT_CP:
        if (int_option(c == OPT_CP ? "--context-parallel-size" : "--cp", optarg, 1, 1 << 24, &o->search.cp)) return PCC_ERR_INPUT;
        if (o->search.cp > 1) gv->template_ = gv->cp = true;
        break;
    case OPT_EP: {
        int v;
        const char *name = "--expert-model-parallel-size";
        if (int_option(name, optarg, 1, 1 << 24, &v)) return PCC_ERR_INPUT;
        if (v > 1)
            bad("--expert-model-parallel-size %d: plancc's models have no mixture-of-experts layers (runtime/ops.def has "
                "no expert operator), so there are no experts to place; only 1 is accepted\n", v);
        if (v > 1) return PCC_ERR_INPUT;
        break;
    }
    case OPT_DIST_OPT: o->distributed_optimizer = true; break;
    case OPT_ESTIMATE_ONLY: o->estimate_only = true; break;
    case OPT_BUCKET_MB: if (num_option("--bucket-mb", optarg, 0, 1e6, &o->bucket_mb)) return PCC_ERR_INPUT; break;
    case OPT_CLUSTER: o->cluster = optarg; break;
    case OPT_POLICY: o->policy = optarg; break;
    case OPT_COSHARD: o->coshard = strcmp(optarg, "none") ? optarg : NULL, o->coshard_none = !o->coshard; break;
    case OPT_NODES: if (int_option("--nodes", optarg, 1, 1 << 20, &o->nodes)) return PCC_ERR_INPUT; break;
    case OPT_DEVICES: if (int_option("--devices", optarg, 1, 1 << 24, &o->devices)) return PCC_ERR_INPUT; break;
    case OPT_TIME_LIMIT: if (num_option("--time-limit", optarg, 0.001, 1e6, &o->search.ilp.time_limit_s)) return PCC_ERR_INPUT; break;
    case OPT_MIP_GAP: if (num_option("--mip-gap", optarg, 0, 0.999, &o->search.ilp.mip_gap)) return PCC_ERR_INPUT; break;
    case OPT_DUMP_ILP: o->search.ilp.dump_lp = optarg; break;
    case 'o': o->output = optarg; break;
    case OPT_DP: if (int_option("--dp", optarg, 1, 1 << 24, &o->search.dp)) return PCC_ERR_INPUT; gv->template_ = true; break;
    case OPT_TP: if (int_option("--tp", optarg, 1, 1 << 24, &o->search.tp)) return PCC_ERR_INPUT; gv->template_ = true; break;
    case OPT_TP_BATCH: o->search.tp_batch = true; break;
    case OPT_SEQ_PARALLEL: o->search.sequence_parallel = true; break;
    case OPT_TP2:
        if (int_option("--tp2", optarg, 2, 1 << 24, &o->search.tq)) return PCC_ERR_INPUT;
        gv->tp2 = true;
        break;
    case OPT_PP: if (int_option("--pp", optarg, 1, 1 << 24, &o->search.pp)) return PCC_ERR_INPUT; gv->template_ = true; break;
    case OPT_ZERO: if (int_option("--zero", optarg, 0, 3, &o->search.zero)) return PCC_ERR_INPUT; break;
    case OPT_AUTO: gv->auto_ = true; break;
    case OPT_BURST: o->burst = true; break;
    case OPT_TF32: o->tf32 = true; break;
    case OPT_BURST_WIDTHS: o->burst_widths = optarg; break;
    case OPT_AMP_LIMIT: {
        char *end;
        double v = strtod(optarg, &end);
        if (end == optarg || *end || !(v > 1) || !isfinite(v)) {
            bad("--amp-limit wants a number above 1 (DeepPool's GPU-time amplification limit), got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        o->amp_limit = v;
        break;
    }
    case OPT_SYNC: {
        if (sync_parse(optarg, &o->preserve.sync)) return PCC_ERR_INPUT;
        break;
    }
    case OPT_RECOMPUTE_GRAN:
        gv->recompute = true;
        if (strcmp(optarg, "full") == 0) o->search.recompute = PCC_RECOMPUTE_FULL;
        else if (strcmp(optarg, "selective") == 0) o->search.recompute = PCC_RECOMPUTE_AUTO;
        else {
            bad("--recompute-granularity wants full or selective (Megatron-LM's words), got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        break;
    case OPT_RECOMPUTE:
        gv->recompute = true;
        if (strcmp(optarg, "none") == 0) o->search.recompute = PCC_RECOMPUTE_NONE;
        else if (strcmp(optarg, "full") == 0) o->search.recompute = PCC_RECOMPUTE_FULL;
        else if (strcmp(optarg, "auto") == 0) o->search.recompute = PCC_RECOMPUTE_AUTO;
        else {
            bad("--recompute wants none, full or auto, got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        break;
    case OPT_ATTENTION:
        if (strcmp(optarg, "unfused") == 0) o->attention = PLAN_ATTN_UNFUSED;
        else if (strcmp(optarg, "flash") == 0) o->attention = PLAN_ATTN_FLASH;
        else {
            bad("--attention wants unfused or flash, got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        break;
    case OPT_SCHEDULE:
        gv->schedule = true;
        if (strcmp(optarg, "gpipe") == 0) o->search.schedule = PCC_PIPE_GPIPE;
        else if (strcmp(optarg, "1f1b") == 0) o->search.schedule = PCC_PIPE_1F1B;
        else {
            bad("--schedule wants gpipe or 1f1b, got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        break;
    case 'd':
        if (strspn(optarg, "ts") != strlen(optarg) || !*optarg) {
            bad("-d wants letters of \"ts\" (t: phase 1 candidates, s: phase 2 schedule), got \"%s\"\n", optarg);
            return PCC_ERR_INPUT;
        }
        o->dumps = optarg;
        break;
    case ':': bad("option %s needs a value\n", argv[optind - 1]); return PCC_ERR_INPUT;
    default: bad("unknown option %s (see plancc --help)\n", argv[optind - 1]); return PCC_ERR_INPUT;
    }
    return PCC_OK;
}

/* ---- --cluster NAME ---- */

#ifndef PLANCC_CLUSTER_DIR
#define PLANCC_CLUSTER_DIR ""
#endif
#ifndef PLANCC_SOURCE_CLUSTERS
#define PLANCC_SOURCE_CLUSTERS ""
#endif

// The folders a cluster named without a path is looked for in, in order: $PLANCC_CLUSTERS, the
// installed share/plancc/clusters (where meson install put it, then beside this program's bin/),
// and the source tree's models/clusters (a program run from its build folder).
static int cluster_dirs(const char *dirs[4], char *exe_dir, size_t n) {
    int k = 0;
    const char *env = getenv("PLANCC_CLUSTERS");
    if (env && *env) dirs[k++] = env;
    if (*PLANCC_CLUSTER_DIR) dirs[k++] = PLANCC_CLUSTER_DIR;
    ssize_t got = readlink("/proc/self/exe", exe_dir, n - 40);
    if (got > 0) {
        exe_dir[got] = 0;
        char *slash = strrchr(exe_dir, '/'); // PREFIX/bin/plancc -> PREFIX/share/plancc/clusters
        if (slash) *slash = 0;
        slash = strrchr(exe_dir, '/');
        if (slash) {
            strcpy(slash, "/share/plancc/clusters");
            dirs[k++] = exe_dir;
        }
    }
    if (*PLANCC_SOURCE_CLUSTERS) dirs[k++] = PLANCC_SOURCE_CLUSTERS;
    return k;
}

// The names of the clusters in dir (without .json), for a suggestion; up to n-1, NULL-terminated.
static void cluster_names(const char *dir, const char **names, int n) {
    int k = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && k < n - 1 && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) names[k++] = arena_printf(config_arena, "%.*s", (int)len - 5, e->d_name);
    }
    if (d) closedir(d);
    names[k] = NULL;
}

// --cluster: a file as given; a bare name (no '/') that is no file is NAME or NAME.json in
// cluster_dirs. Unchanged when not found there either (the loader then says it cannot open it).
static pcc_status cluster_path(const char **cluster) {
    const char *name = *cluster;
    if (access(name, F_OK) == 0 || !*name) return PCC_OK;
    if (strchr(name, '/')) { // a path: say so plainly (the loader would say "FILE:: cannot open")
        fprintf(stderr, "plancc: %s: cannot open the cluster (--cluster): %s\n", name, strerror(errno));
        return PCC_ERR_INPUT;
    }
    if (!config_arena) {
        config_arena = arena_init();
        atexit(config_free);
    }
    const char *dirs[4];
    char exe_dir[4096];
    int nd = cluster_dirs(dirs, exe_dir, sizeof exe_dir);
    size_t len = strlen(name);
    bool has_json = len > 5 && !strcmp(name + len - 5, ".json");
    for (int k = 0; k < nd; k++) {
        const char *path = arena_printf(config_arena, "%s/%s%s", dirs[k], name, has_json ? "" : ".json");
        if (access(path, R_OK) == 0) return *cluster = path, PCC_OK;
    }
    const char *names[64], *s = NULL;
    for (int k = 0; k < nd && !s; k++) {
        cluster_names(dirs[k], names, 64);
        s = cli_suggest_word(name, names);
    }
    fprintf(stderr, "plancc: --cluster %s: no such file, and no cluster of that name among the installed ones%s%s%s (%s)\n", name,
            s ? "; did you mean " : "", s ? s : "", s ? "?" : "", nd ? dirs[0] : "no cluster folder found");
    return PCC_ERR_INPUT;
}

// The model, and the options that need a cluster.
static pcc_status check_inputs(int argc, char **argv, const char *config_model, pcc_options *o) {
    if (optind + 1 != argc && !(optind == argc && config_model)) {
        fprintf(stderr, optind == argc ? "plancc: no model given (see plancc --help)\n"
                                       : "plancc: more than one model given (see plancc --help)\n");
        return PCC_ERR_INPUT;
    }
    if ((o->dumps || o->search.ilp.dump_lp) && !o->cluster) {
        fprintf(stderr, "plancc: %s needs --cluster FILE (the phases cost their choices on a cluster)\n", o->dumps ? "-d" : "--dump-ilp");
        return PCC_ERR_INPUT;
    }
    if ((o->nodes || o->devices) && !o->cluster) {
        fprintf(stderr, "plancc: %s needs --cluster FILE (see plancc --help)\n", o->nodes ? "--nodes" : "--devices");
        return PCC_ERR_INPUT;
    }
    o->model = optind < argc ? argv[optind] : config_model;
    return o->cluster ? cluster_path(&o->cluster) : PCC_OK;
}

// The strategy: a template or --auto, and the options that follow from it.
static pcc_status check_strategy(pcc_options *o, const given *gv) {
    if (gv->auto_ && gv->template_) {
        fprintf(stderr, "plancc: --auto searches the mesh; it does not go with --dp, --tp, --pp or --cp\n");
        return PCC_ERR_INPUT;
    }
    if (gv->cp && (o->preserve.sync.algo != PCC_SYNC_ALLREDUCE || o->burst || o->check)) {
        fprintf(stderr, "plancc: --cp %d is the template's context parallelism; it does not go with %s\n", o->search.cp,
                o->burst ? "--burst" : o->check ? "--check" : "--sync background");
        return PCC_ERR_INPUT;
    }
    if (gv->cp_form && !gv->cp) {
        fprintf(stderr, "plancc: --cp-form %s is the form of --cp N's context parallelism; it wants --cp 2 or more\n",
                o->search.cp_zigzag ? "zigzag" : o->search.cp_ring ? "ring" : "ulysses");
        return PCC_ERR_INPUT;
    }
    o->search.auto_mesh = !gv->template_;
    if (o->distributed_optimizer && !o->search.zero) o->search.zero = 1; // Megatron-LM's distributed optimizer is ZeRO-1
    o->search.bg_dense = o->preserve.sync.algo != PCC_SYNC_ALLREDUCE;
    o->search.bucket_bytes = o->bucket_mb * 1e6;
    o->search.quiet = o->quiet;
    o->search.whole = o->check;
    o->batch.dp = o->search.dp;
    o->preserve.bucket_bytes = (uint64_t)(o->bucket_mb * 1e6);
    if (o->search.tp_batch && !gv->template_) {
        fprintf(stderr, "plancc: --tp-batch lets the template's ILP split the batch over --tp (--auto tries that by itself); "
                        "it needs --dp, --tp or --pp\n");
        return PCC_ERR_INPUT;
    }
    if (o->search.sequence_parallel && !o->policy && (!gv->template_ || o->search.tp < 2)) { // with a policy: its mesh (policy.c)
        fprintf(stderr, "plancc: --sequence-parallel splits the norms, residual adds and dropout along the sequence over the "
                        "tensor-parallel group: it needs --tp 2 or more\n");
        return PCC_ERR_INPUT;
    }
    if (gv->tp2 && (!gv->template_ || o->search.tp < 2 * o->search.tq || o->search.tp % o->search.tq)) {
        fprintf(stderr, "plancc: --tp2 %d cuts the tp group into tp/%d x %d: it wants --tp a multiple of %d, at least %d\n",
                o->search.tq, o->search.tq, o->search.tq, o->search.tq, 2 * o->search.tq);
        return PCC_ERR_INPUT;
    }
    if (gv->tp2 && (gv->cp || o->search.sequence_parallel || o->search.tp_batch || o->preserve.sync.algo != PCC_SYNC_ALLREDUCE)) {
        fprintf(stderr, "plancc: --tp2 does not go with %s yet\n", gv->cp ? "--cp" : o->search.sequence_parallel ? "--sequence-parallel"
                        : o->search.tp_batch ? "--tp-batch" : "--sync background");
        return PCC_ERR_INPUT;
    }
    if (o->search.tp_batch && o->search.tp < 2) {
        fprintf(stderr, "plancc: --tp-batch splits the batch over the tp group: it needs --tp 2 or more\n");
        return PCC_ERR_INPUT;
    }
    if (!o->check && !o->cluster) {
        fprintf(stderr, "plancc: compiling a plan needs --cluster FILE (models/clusters/ has some; see plancc --help)\n");
        return PCC_ERR_INPUT;
    }
    return PCC_OK;
}

// --burst, --sync and --check against the rest.
static pcc_status check_modes(const pcc_options *o, const given *gv) {
    if (o->burst_widths && !o->burst) {
        fprintf(stderr, "plancc: --burst-widths gives burst parallelism's per-layer device counts: it needs --burst\n");
        return PCC_ERR_INPUT;
    }
    if (o->amp_limit > 0 && !o->burst) {
        fprintf(stderr, "plancc: --amp-limit is burst parallelism's amplification limit: it needs --burst\n");
        return PCC_ERR_INPUT;
    }
    if (o->burst) {
        const char *clash = o->check ? "--check" : gv->template_ ? "--dp, --tp and --pp" : gv->auto_ ? "--auto"
                          : o->batch.micro_batches_given ? "--micro-batches" : o->batch.micro_batch_size ? "--micro-batch-size"
                          : o->search.zero ? "--zero" : gv->recompute ? "--recompute" : gv->schedule ? "--schedule"
                          : o->search.virtual_stages || o->layers_per_vstage ? "--virtual-stages" : o->estimate_only ? "--estimate-only"
                          : o->preserve.sync.algo != PCC_SYNC_ALLREDUCE ? "--sync background" : NULL;
        if (clash) {
            fprintf(stderr, "plancc: --burst chooses every layer's device count itself; it does not go with %s\n", clash);
            return PCC_ERR_INPUT;
        }
    }
    if (o->preserve.sync.algo != PCC_SYNC_ALLREDUCE && o->search.zero) {
        fprintf(stderr, "plancc: --sync background keeps a whole replica of the dense parameters on every dp rank; it does "
                        "not go with --zero\n");
        return PCC_ERR_INPUT;
    }
    if (o->check && (o->output || gv->template_ || gv->auto_ || o->preserve.sync.algo != PCC_SYNC_ALLREDUCE)) {
        fprintf(stderr, "plancc: --check only checks the model; it writes no plan (leave out -o and the strategy)\n");
        return PCC_ERR_INPUT;
    }
    return PCC_OK;
}


// The batch, interleaving and estimate options against each other and the rest.
static pcc_status check_batch_options(const pcc_options *o, const given *gv) {
    const char *why = NULL;
    if (o->batch.micro_batch_size && !gv->template_)
        why = "--micro-batch-size is per data-parallel replica, so it needs the template's --dp (with --tp, --pp)";
    else if (o->estimate_only && (o->check || o->output))
        why = o->check ? "--estimate-only plans a strategy; --check only checks the model" : "--estimate-only writes no plan (leave out -o)";
    else if (o->layers_per_vstage && gv->virtual_stages)
        why = "--num-layers-per-virtual-pipeline-stage and --virtual-stages say the same thing two ways: give one";
    else if (o->layers_per_vstage && (!gv->template_ || o->search.pp < 2))
        why = "--num-layers-per-virtual-pipeline-stage interleaves pipeline stages: it needs --pp (--pipeline-model-parallel-size) 2 or more";
    else if (o->search.virtual_stages > 1 && o->search.schedule == PCC_PIPE_GPIPE)
        why = "--virtual-stages interleaves the 1F1B schedule (Megatron-LM's); it does not combine with --schedule gpipe";
    if (!why) return PCC_OK;
    fprintf(stderr, "plancc: %s\n", why);
    return PCC_ERR_INPUT;
}

static const struct option longopts[] = {
    {"check", no_argument, NULL, 'c'},   {"json", no_argument, NULL, 'j'},
    {"verbose", no_argument, NULL, 'v'}, {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},    {"version", no_argument, NULL, 'V'},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"micro-batches", required_argument, NULL, 'm'}, {"cluster", required_argument, NULL, OPT_CLUSTER},
    {"nodes", required_argument, NULL, OPT_NODES},   {"devices", required_argument, NULL, OPT_DEVICES},
    {"time-limit", required_argument, NULL, OPT_TIME_LIMIT}, {"mip-gap", required_argument, NULL, OPT_MIP_GAP},
    {"dump-ilp", required_argument, NULL, OPT_DUMP_ILP}, {"dump", required_argument, NULL, 'd'},
    {"output", required_argument, NULL, 'o'}, {"dp", required_argument, NULL, OPT_DP},
    {"tp", required_argument, NULL, OPT_TP}, {"pp", required_argument, NULL, OPT_PP},
    {"tp-batch", no_argument, NULL, OPT_TP_BATCH},
    {"sequence-parallel", no_argument, NULL, OPT_SEQ_PARALLEL}, {"attention", required_argument, NULL, OPT_ATTENTION},
    {"global-batch", required_argument, NULL, OPT_GLOBAL_BATCH}, {"zero", required_argument, NULL, OPT_ZERO},
    {"micro-batch-size", required_argument, NULL, OPT_MICRO_BATCH_SIZE},
    {"virtual-stages", required_argument, NULL, OPT_VIRTUAL_STAGES},
    {"estimate-only", no_argument, NULL, OPT_ESTIMATE_ONLY}, {"bucket-mb", required_argument, NULL, OPT_BUCKET_MB},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {"recompute", required_argument, NULL, OPT_RECOMPUTE}, {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"sync", required_argument, NULL, OPT_SYNC}, {"tf32", no_argument, NULL, OPT_TF32},
    {"auto", no_argument, NULL, OPT_AUTO}, {"policy", required_argument, NULL, OPT_POLICY},
    {"coshard", required_argument, NULL, OPT_COSHARD},
    {"burst", no_argument, NULL, OPT_BURST}, {"amp-limit", required_argument, NULL, OPT_AMP_LIMIT},
    {"burst-widths", required_argument, NULL, OPT_BURST_WIDTHS},
    {"bf16", no_argument, NULL, OPT_BF16}, {"fp16", no_argument, NULL, OPT_FP16},
    // Megatron-LM's and DeepSpeed's names for the same things
    {"tensor-model-parallel-size", required_argument, NULL, OPT_TP},
    {"pipeline-model-parallel-size", required_argument, NULL, OPT_PP},
    {"context-parallel-size", required_argument, NULL, OPT_CP}, {"cp", required_argument, NULL, OPT_CP_SHORT},
    {"cp-form", required_argument, NULL, OPT_CP_FORM}, {"tp2", required_argument, NULL, OPT_TP2},
    {"expert-model-parallel-size", required_argument, NULL, OPT_EP},
    {"num-layers-per-virtual-pipeline-stage", required_argument, NULL, OPT_LAYERS_PER_VS},
    {"global-batch-size", required_argument, NULL, OPT_GLOBAL_BATCH},
    {"recompute-granularity", required_argument, NULL, OPT_RECOMPUTE_GRAN},
    {"use-distributed-optimizer", no_argument, NULL, OPT_DIST_OPT},
    {"zero-stage", required_argument, NULL, OPT_ZERO},
    {NULL, 0, NULL, 0},
};
static const char shortopts[] = ":cjvqhVd:o:";

/* ---- --config FILE ---- */

// The words a config file stands for, as a command line would have them, and where each came from.
typedef struct config {
    const char *file;
    char **argv;
    const char **from;          // "FILE:/key" of argv[i]
    int argc, cap;
    const char *model;          // "model": the operand
} config;


static void config_push(config *cfg, const char *word, const char *from) {
    if (cfg->argc + 1 >= cfg->cap) {
        int cap = cfg->cap ? 2 * cfg->cap : 32;
        cfg->argv = arena_realloc(config_arena, cfg->argv, sizeof *cfg->argv * (size_t)cfg->cap, sizeof *cfg->argv * (size_t)cap);
        cfg->from = arena_realloc(config_arena, cfg->from, sizeof *cfg->from * (size_t)cfg->cap, sizeof *cfg->from * (size_t)cap);
        cfg->cap = cap;
    }
    cfg->from[cfg->argc] = from;
    cfg->argv[cfg->argc++] = arena_strdup(config_arena, word);
    cfg->argv[cfg->argc] = NULL;
}

// The option a config key names: "tp", "--tp", "tensor_model_parallel_size" alike.
static void config_name(const char *key, char *name, size_t n) {
    if (!strncmp(key, "--", 2)) key += 2;
    snprintf(name, n, "%s", key);
    for (char *c = name; *c; c++)
        if (*c == '_') *c = '-';
}

// Whether config keys a and b name one option ("tp" and "tensor_model_parallel_size" do).
static bool config_same(const char *a, const char *b) {
    char na[128], nb[128];
    config_name(a, na, sizeof na), config_name(b, nb, sizeof nb);
    if (!strcmp(na, nb)) return true;
    const struct option *oa = longopts, *ob = longopts;
    while (oa->name && strcmp(oa->name, na)) oa++;
    while (ob->name && strcmp(ob->name, nb)) ob++;
    return oa->name && ob->name && oa->val == ob->val;
}

// One member of the config (a key and its value): the words it stands for, pushed onto cfg.
static pcc_status config_member(pcc_jreader *r, const pcc_json *m, const char *ptr, config *cfg) {
    char name[128];
    config_name(json_key(m), name, sizeof name);
    const char *from = arena_printf(config_arena, "%s:%s", cfg->file, ptr);
    if (!strcmp(name, "model")) return json_str(r, m, ptr, &cfg->model);
    if (!strcmp(name, "config")) return diag(r->file, ptr, "a config file cannot name another one");
    const struct option *o = longopts;
    while (o->name && strcmp(o->name, name)) o++;
    if (!o->name) {
        const char *s = cli_suggest(name, longopts);
        return diag(r->file, ptr, "unknown option \"%s\"%s%s%s (the keys are plancc's long options; see plancc --help)", json_key(m),
                    s ? " (did you mean \"" : "", s ? s : "", s ? "\"?)" : "");
    }
    char word[160], value[64];
    snprintf(word, sizeof word, "--%s", name);
    bool b;
    double v;
    switch (json_type(m)) {
    case PCC_J_BOOL:
        if (o->has_arg != no_argument) return diag(r->file, ptr, "--%s takes a value (a number or a string), not true or false", name);
        if (json_bool(r, m, ptr, &b)) return PCC_ERR_INPUT;
        if (b) config_push(cfg, word, from);
        return PCC_OK;
    case PCC_J_NUMBER:
    case PCC_J_STRING:
        if (o->has_arg == no_argument) return diag(r->file, ptr, "--%s is a switch: give it true or false", name);
        config_push(cfg, word, from);
        if (json_type(m) == PCC_J_STRING) {
            const char *sv;
            if (json_str(r, m, ptr, &sv)) return PCC_ERR_INPUT;
            config_push(cfg, sv, from);
            return PCC_OK;
        }
        if (json_num(r, m, ptr, -1e300, 1e300, &v)) return PCC_ERR_INPUT;
        if (v == floor(v) && fabs(v) < 9e15) snprintf(value, sizeof value, "%.0f", v);
        else snprintf(value, sizeof value, "%.17g", v);
        config_push(cfg, value, from);
        return PCC_OK;
    default:
        return diag(r->file, ptr, "--%s wants %s, not %s", name, o->has_arg == no_argument ? "true or false" : "a number or a string",
                    json_type_name(json_type(m)));
    }
}

// Reads the config file into cfg: a JSON object whose keys are long options.
static pcc_status config_read(const char *file, config *cfg) {
    if (!config_arena) {
        config_arena = arena_init();
        atexit(config_free);
    }
    *cfg = (config){.file = file};
    config_push(cfg, "plancc", NULL);
    char *text;
    size_t len;
    pcc_jreader r;
    pcc_json *root;
    if (file_read_all(config_arena, file, &text, &len, 1 << 20)) return PCC_ERR_INPUT;
    pcc_status st = json_open(&r, config_arena, file, text, len, &root);
    if (!st) st = json_expect(&r, root, "", PCC_J_OBJECT);
    for (int i = 0; !st && i < json_size(root); i++) {
        const pcc_json *m = json_at(root, i);
        const char *ptr = json_ptr_key(&r, "", json_key(m));
        for (int j = 0; j < i && !st; j++)
            if (config_same(json_key(m), json_key(json_at(root, j))))
                st = diag(file, ptr, "option \"%s\" is given twice (also as \"%s\")", json_key(m), json_key(json_at(root, j)));
        if (!st) st = config_member(&r, m, ptr, cfg);
    }
    json_close(&r);
    return st;
}

// --config FILE (or --config=FILE) on the command line, NULL when none; one at most.
static pcc_status config_find(int argc, char **argv, const char **file) {
    *file = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *f = !strncmp(argv[i], "--config=", 9) ? argv[i] + 9 : NULL;
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 == argc) return bad("option --config needs a value\n"), PCC_ERR_INPUT;
            f = argv[++i];
        }
        if (!f) continue;
        if (*file) return bad("--config is given twice (%s and %s): give one file\n", *file, f), PCC_ERR_INPUT;
        *file = f;
    }
    return PCC_OK;
}

// Reads argv[1..argc) with getopt_long into o; from (when not NULL) names each word's origin.
static pcc_status parse_words(int argc, char **argv, const char **from, pcc_options *o, given *gv, bool *done) {
    optind = 0; // GNU getopt: start afresh (this runs twice, for a config and for the command line)
    opterr = 0;
    int c;
    for (;;) {
        origin = from && optind < argc ? from[optind ? optind : 1] : NULL;
        if ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) == -1) break;
        pcc_status st = option(c, argv, o, gv, done);
        if (st || *done) return origin = NULL, st;
    }
    origin = NULL;
    return PCC_OK;
}

pcc_status options_parse(int argc, char **argv, pcc_options *o, bool *done) {
    memset(o, 0, sizeof *o);
    *done = false;
    o->search.ilp = (pcc_mip_opts){.time_limit_s = 60, .mip_gap = 5e-3, .progress = true};
    o->search.recompute = PCC_RECOMPUTE_AUTO;
    o->batch.micro_batches = 1;
    o->bucket_mb = 25;
    given gv = {0};
    const char *file;
    config cfg = {0};
    if (cli_check_options("plancc", argc, argv, shortopts, longopts) || config_find(argc, argv, &file)) return PCC_ERR_INPUT;
    if (file && (config_read(file, &cfg) || parse_words(cfg.argc, cfg.argv, cfg.from, o, &gv, done))) return PCC_ERR_INPUT;
    if (*done) return PCC_OK;
    o->config = file;
    pcc_status st = parse_words(argc, argv, NULL, o, &gv, done);
    if (st || *done) return st;
    st = check_inputs(argc, argv, cfg.model, o);
    if (!st) st = check_strategy(o, &gv);
    if (!st) st = check_modes(o, &gv);
    if (!st) st = check_batch_options(o, &gv);
    return st;
}

// The model's layers (the copies of its repeated blocks), for Megatron-LM's per-stage counts.
static int64_t model_layers(const pcc_graph *g) {
    int64_t n = 0;
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].fwd < 0) n += g->blocks[b].repeat;
    return n;
}

pcc_status options_apply_model(pcc_options *o, pcc_graph *g) {
    for (int i = 0; i < g->n_ops; i++) // --attention: autodiff copies the form to the gradients
        if (g->ops[i].kind == PCC_OP_ATTENTION) g->ops[i].attrs.mode = o->attention;
    if (o->dtype_override) {
        pcc_dtype d = (pcc_dtype)(o->dtype_override - 1);
        g->dtype = d;
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].dtype != PCC_I32) g->tensors[t].dtype = d;
    }
    if (!o->layers_per_vstage) return PCC_OK;
    int64_t layers = model_layers(g), pp = o->search.pp ? o->search.pp : 1;
    if (!layers || layers % (pp * o->layers_per_vstage)) {
        fprintf(stderr, "plancc: %s: --num-layers-per-virtual-pipeline-stage %d: the model has %lld layers (copies of its "
                "repeated blocks), which %s %lld pipeline stages of %d layers each\n", g->file, o->layers_per_vstage,
                (long long)layers, layers ? "do not divide into" : "cannot make", (long long)pp, o->layers_per_vstage);
        return PCC_ERR_INPUT;
    }
    o->search.virtual_stages = (int)(layers / (pp * o->layers_per_vstage));
    return PCC_OK;
}

bool options_runs(const pcc_options *o, int phase) {
    if (!o->check) return !o->estimate_only || phase <= 2;
    if (!o->cluster) return false;
    if (phase == 1) return o->dumps || o->search.ilp.dump_lp;
    return phase == 2 && (options_dump(o, 's') || o->search.ilp.dump_lp);
}

bool options_dump(const pcc_options *o, char letter) { return o->dumps && strchr(o->dumps, letter); }

static uint64_t file_hash(const char *path) {
    uint64_t h = 0;
    char err[256];
    if (plan_file_hash(path, &h, err, sizeof err)) warn("%s: the plan records no hash of it", err);
    return h;
}

// The options that decide the plan, in one canonical order (the plan's META and its hash).
static const char *canonical_options_(pcc_arena *a, const pcc_cluster *c, const pcc_options *o);

// The options a plan records (and hashes): what changes the plan or its costs.
static const char *canonical_options(pcc_arena *a, const pcc_cluster *c, const pcc_options *o) {
    const char *s = canonical_options_(a, c, o);
    if (o->dtype_override) s = arena_printf(a, "%s --%s", s, o->dtype_override - 1 == PCC_BF16 ? "bf16" : "fp16");
    s = arena_printf(a, "%s%s%s", s, policy_option(a, o->search.policy), o->attention == PLAN_ATTN_FLASH ? " --attention flash" : "");
    if (o->coshard) s = arena_printf(a, "%s --coshard %s", s, o->coshard);
    return o->tf32 ? arena_printf(a, "%s --tf32", s) : s;
}

static const char *canonical_options_(pcc_arena *a, const pcc_cluster *c, const pcc_options *o) {
    static const char *const rc[] = {"none", "full", "auto"};
    const pcc_search_opts *s = &o->search;
    char mesh[128] = "--auto";
    if (!s->auto_mesh)
        snprintf(mesh, sizeof mesh, "--dp %d --tp %d --pp %d%s%s%s", s->dp ? s->dp : 1, s->tp ? s->tp : 1, s->pp ? s->pp : 1,
                 s->tp_batch ? " --tp-batch" : "", s->sequence_parallel ? " --sequence-parallel" : "",
                 s->cp > 1 ? arena_printf(a, " --cp %d%s", s->cp, s->cp_zigzag ? " --cp-form zigzag" : s->cp_ring ? " --cp-form ring" : "")
                 : s->tq > 1 ? arena_printf(a, " --tp2 %d", s->tq) : "");
    if (o->burst) {
        if (o->amp_limit > 0) snprintf(mesh, sizeof mesh, "--burst --amp-limit %g", o->amp_limit);
        else snprintf(mesh, sizeof mesh, "--burst");
        if (o->burst_widths) return arena_printf(a, "--devices %d %s --burst-widths %s --bucket-mb %g%s%s", c->n_devices, mesh,
                                                 o->burst_widths, o->bucket_mb, o->batch.global_batch ? " --global-batch " : "",
                                                 o->batch.global_batch ? arena_printf(a, "%lld", (long long)o->batch.global_batch) : "");
    }
    char batch[48] = "";
    if (o->batch.global_batch) snprintf(batch, sizeof batch, " --global-batch %lld", (long long)o->batch.global_batch);
    return arena_printf(a, "--devices %d %s --micro-batches %d%s --schedule %s --zero %d --recompute %s --bucket-mb %g%s "
                        "--time-limit %g --mip-gap %g%s%s", c->n_devices, mesh, o->batch.micro_batches, batch,
                        s->schedule == PCC_PIPE_GPIPE ? "gpipe" : "1f1b", s->zero, rc[s->recompute], o->bucket_mb,
                        s->zero3_late ? " --prefetch none" : "",
                        o->search.ilp.time_limit_s, o->search.ilp.mip_gap, o->preserve.sync.algo == PCC_SYNC_ALLREDUCE ? "" : " --sync ",
                        o->preserve.sync.algo == PCC_SYNC_ALLREDUCE ? "" : sync_str(a, &o->preserve.sync));
}

void options_emit(pcc_arena *a, const pcc_cluster *c, const pcc_options *o, pcc_emit_opts *eo) {
    *eo = (pcc_emit_opts){.options = canonical_options(a, c, o)};
    eo->model_hash = file_hash(o->model);
    eo->cluster_hash = file_hash(o->cluster);
}

const char *options_output(pcc_arena *a, const pcc_options *o) {
    if (o->output) return o->output;
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
    return arena_printf(a, "%.*s.plan", (int)n, base);
}
