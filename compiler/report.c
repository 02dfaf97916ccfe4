/*
 * report.c: the `plancc --check` report, in text (read the way one reads DeepSpeed's flops
 * profiler) and JSON (for scripts and tests).
 *
 * Per forward operator: the parameters it introduces (a parameter read by several ops, such as
 * tied embeddings, counts once, at its first reader), its forward FLOPs, the FLOPs of the
 * backward ops derived from it, and the bytes of its outputs that the backward pass keeps.
 * Blocks show per copy and times repeat. Totals: parameters, FLOPs per step (forward, backward,
 * optimizer; the matmul share is what Megatron-LM's formula counts) and the memory of weights,
 * gradients, optimizer state and kept activations on one device at the model's batch size.
 * Numbers in JSON are exact (integers where they are integers); the text rounds.
 *
 * With a cluster (--cluster), a section follows: the cluster's shape and device, whether one
 * step's memory (the totals above) fits one device and by how much, and the compute lower bound
 * of one step: FLOPs per step over the device's peak for the model's dtype (bf16 and f16 at
 * their tensor-core peak, f32 at the f32 peak), on one device and split perfectly over all.
 * These are bounds from datasheet peaks, not predictions; the cost model (cost.c) predicts.
 *
 * The compile's summaries are here too, each printed once the driver has what it reports:
 * --estimate-only's estimate of a step and its parts (text or JSON), the compile summary of a
 * plan written (the strategy, the search, the ILP, each program's arena, the peak, and the plan
 * simulated by runtime/sim.c beside the estimate: two views of one cost model, the one from the
 * strategy, the other from the plan's own instructions, streams and events), and burst
 * parallelism's, with its per-layer table. With -q they print nothing (the JSON estimate
 * still prints: it is the output asked for).
 */
#include "plancc.h"
#include "coshard.h"
#include "sim.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

typedef struct op_row {
    double params, fwd, bwd, acts; // per copy
} op_row;

static void rows_compute(const pcc_graph *g, op_row *rows, bool *counted) {
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        rows[o].fwd = op_flops(g, op);
        for (int i = 0; i < op->nin; i++) {
            const pcc_tensor *t = &g->tensors[op->in[i]];
            if (t->kind == PCC_T_PARAM && !t->frozen && !counted[op->in[i]]) {
                counted[op->in[i]] = true;
                rows[o].params += (double)tensor_numel(g, t);
            }
        }
        for (int i = 0; i < op->nout; i++)
            if (g->tensors[op->out[i]].saved) rows[o].acts += tensor_bytes(g, &g->tensors[op->out[i]]);
    }
    for (int o = g->n_fwd_ops; o < g->n_ops; o++)
        if (g->ops[o].fwd >= 0 && g->ops[o].phase == PCC_PHASE_BWD) rows[g->ops[o].fwd].bwd += op_flops(g, &g->ops[o]);
}

/* ---- text ---- */

static const char *label(const pcc_graph *g, const pcc_op *op, char *buf, size_t n) {
    if (op->label) snprintf(buf, n, "%s", op->label);
    else if (op->nout) snprintf(buf, n, "%s", g->tensors[op->out[0]].name);
    else snprintf(buf, n, "%s", op->ptr);
    return buf;
}

static void print_row(FILE *f, const char *indent, const char *name, const char *type, const op_row *r, double mult) {
    char a[32], b[32], c[32], d[32];
    fprintf(f, "%s%-*s %-14s %10s %12s %12s %11s\n", indent, (int)(34 - strlen(indent)), name, type,
            fmt_count(a, sizeof a, r->params * mult), fmt_flops(b, sizeof b, r->fwd * mult),
            fmt_flops(c, sizeof c, r->bwd * mult), fmt_bytes(d, sizeof d, r->acts * mult));
}

static void text_ops(FILE *f, const pcc_graph *g, const op_row *rows) {
    fprintf(f, "  %-32s %-14s %10s %12s %12s %11s\n", "operator (output)", "type", "params", "fwd", "bwd", "kept acts");
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        char name[64];
        if (op->block < 0) {
            print_row(f, "  ", label(g, op, name, sizeof name), pcc_ops[op->kind].name, &rows[o], 1);
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        op_row sum = {0};
        for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++) {
            sum.params += rows[i].params, sum.fwd += rows[i].fwd, sum.bwd += rows[i].bwd, sum.acts += rows[i].acts;
        }
        char head[64], rep[32];
        snprintf(head, sizeof head, "block %s", bl->name);
        snprintf(rep, sizeof rep, "x%lld", (long long)bl->repeat);
        print_row(f, "  ", head, rep, &sum, (double)bl->repeat);
        print_row(f, "    ", "(one copy)", "", &sum, 1);
        for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++)
            print_row(f, "      ", label(g, &g->ops[i], name, sizeof name), pcc_ops[g->ops[i].kind].name, &rows[i], 1);
        o = bl->first_op + bl->n_ops - 1;
    }
}

static void text_report(FILE *f, const pcc_graph *g, const op_row *rows, const pcc_totals *t, int verbose) {
    int nfwd_blocks = 0, nbwd = 0;
    for (int b = 0; b < g->n_blocks; b++) nfwd_blocks += g->blocks[b].fwd < 0;
    nbwd = g->n_ops - g->n_fwd_ops;
    char a[32], b[32], c[32], d[32], e[32];
    fprintf(f, "model %s (%s): %d forward ops in %d block%s, %d backward and optimizer ops derived; dtype %s; optimizer %s\n",
            g->name, g->file, g->n_fwd_ops, nfwd_blocks, nfwd_blocks == 1 ? "" : "s", nbwd, pcc_dtype_names[g->dtype],
            g->optim.kind == PCC_OPTIM_ADAMW ? "adamw" : "sgd");
    fprintf(f, "dims:");
    for (int i = 0; i < g->n_dims; i++) fprintf(f, " %s=%lld", g->dims[i].name, (long long)g->dims[i].size);
    fprintf(f, "\n\n");
    text_ops(f, g, rows);
    fprintf(f, "\ntotals (one device, the model's batch, one micro-batch)\n");
    fprintf(f, "  parameters           %s (%.0f)\n", fmt_count(a, sizeof a, t->params), t->params);
    fprintf(f, "  FLOPs per step       %s = forward %s + backward %s + optimizer %s\n",
            fmt_flops(a, sizeof a, t->flops_fwd + t->flops_bwd + t->flops_opt), fmt_flops(b, sizeof b, t->flops_fwd),
            fmt_flops(c, sizeof c, t->flops_bwd), fmt_flops(d, sizeof d, t->flops_opt));
    fprintf(f, "    in matmuls         forward %s + backward %s (%.1f%% of all)\n", fmt_flops(a, sizeof a, t->flops_fwd_matmul),
            fmt_flops(b, sizeof b, t->flops_bwd_matmul),
            100 * (t->flops_fwd_matmul + t->flops_bwd_matmul) / (t->flops_fwd + t->flops_bwd + t->flops_opt + 1e-300));
    double total = t->bytes_weights + t->bytes_grads + t->bytes_optim + t->bytes_acts;
    fprintf(f, "  memory               %s = weights %s + gradients %s + optimizer state %s + kept activations %s\n",
            fmt_bytes(a, sizeof a, total), fmt_bytes(b, sizeof b, t->bytes_weights), fmt_bytes(c, sizeof c, t->bytes_grads),
            fmt_bytes(d, sizeof d, t->bytes_optim), fmt_bytes(e, sizeof e, t->bytes_acts));
    if (verbose) fprintf(f, "  (IR: %d tensors, %d ops, %d blocks; compiler arena %s)\n", g->n_tensors, g->n_ops, g->n_blocks,
                         fmt_bytes(a, sizeof a, (double)arena_bytes(g->arena)));
}

/* ---- JSON ---- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_report(FILE *f, const pcc_graph *g, const op_row *rows, const pcc_totals *t) {
    fprintf(f, "{\"model\": ");
    json_string(f, g->name);
    fprintf(f, ", \"file\": ");
    json_string(f, g->file);
    fprintf(f, ", \"dtype\": \"%s\", \"dims\": {", pcc_dtype_names[g->dtype]);
    for (int i = 0; i < g->n_dims; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_string(f, g->dims[i].name);
        fprintf(f, ": %lld", (long long)g->dims[i].size);
    }
    fprintf(f, "},\n \"totals\": {\"params\": %.0f, \"flops\": {\"forward\": %.17g, \"backward\": %.17g, \"optimizer\": %.17g, "
               "\"forward_matmul\": %.17g, \"backward_matmul\": %.17g},\n  \"memory_bytes\": {\"weights\": %.0f, \"grads\": %.0f, "
               "\"optimizer\": %.0f, \"activations\": %.0f, \"total\": %.0f}},\n \"blocks\": [",
            t->params, t->flops_fwd, t->flops_bwd, t->flops_opt, t->flops_fwd_matmul, t->flops_bwd_matmul, t->bytes_weights,
            t->bytes_grads, t->bytes_optim, t->bytes_acts, t->bytes_weights + t->bytes_grads + t->bytes_optim + t->bytes_acts);
    int nb = 0;
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        if (bl->fwd >= 0) continue;
        op_row s = {0};
        for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++)
            s.params += rows[i].params, s.fwd += rows[i].fwd, s.bwd += rows[i].bwd, s.acts += rows[i].acts;
        fprintf(f, "%s\n  {\"name\": ", nb++ ? "," : "");
        json_string(f, bl->name);
        fprintf(f, ", \"pointer\": ");
        json_string(f, bl->ptr);
        fprintf(f, ", \"repeat\": %lld, \"ops\": %d, \"params_per_copy\": %.0f, \"flops_forward_per_copy\": %.17g, "
                   "\"flops_backward_per_copy\": %.17g, \"activation_bytes_per_copy\": %.0f}",
                (long long)bl->repeat, bl->n_ops, s.params, s.fwd, s.bwd, s.acts);
    }
    fprintf(f, "],\n \"ops\": [");
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        fprintf(f, "%s\n  {\"pointer\": ", o ? "," : "");
        json_string(f, op->ptr);
        fprintf(f, ", \"type\": \"%s\", \"output\": ", pcc_ops[op->kind].name);
        json_string(f, g->tensors[op->out[0]].name);
        fprintf(f, ", \"block\": ");
        if (op->block >= 0) json_string(f, g->blocks[op->block].name);
        else fprintf(f, "null");
        fprintf(f, ", \"params\": %.0f, \"flops_forward\": %.17g, \"flops_backward\": %.17g, \"activation_bytes\": %.0f}",
                rows[o].params, rows[o].fwd, rows[o].bwd, rows[o].acts);
    }
    fprintf(f, "]"); // the caller closes the object, after the cluster section if any
}

/* ---- the cluster section ---- */

// What one device of the cluster makes of the model: does one step fit, and how fast could it be.
typedef struct cluster_fit {
    pcc_math math;      // the peak that the model's dtype runs at
    double peak_flops;  // FLOP/s
    double need_bytes;  // weights + gradients + optimizer state + kept activations
    double spare_bytes; // device memory - need_bytes; negative when it does not fit
    double step_s;      // FLOPs per step / peak: no device can be faster
    double step_all_s;  // the same split perfectly over every device of the cluster
} cluster_fit;

static const char *const math_names[PCC_MATH_COUNT] = {"f32", "tf32", "bf16", "f16"};

static void cluster_fit_compute(const pcc_graph *g, const pcc_cluster *c, const pcc_totals *t, cluster_fit *fit) {
    fit->math = g->dtype == PCC_BF16 ? PCC_MATH_BF16 : g->dtype == PCC_F16 ? PCC_MATH_F16 : PCC_MATH_F32;
    fit->peak_flops = c->peak_flops[fit->math];
    fit->need_bytes = t->bytes_weights + t->bytes_grads + t->bytes_optim + t->bytes_acts;
    fit->spare_bytes = c->memory_bytes - fit->need_bytes;
    fit->step_s = (t->flops_fwd + t->flops_bwd + t->flops_opt) / fit->peak_flops;
    fit->step_all_s = fit->step_s / c->n_devices;
}

// Seconds, always in seconds, with a reading in larger or smaller units where that helps.
static char *fmt_seconds(char *buf, size_t n, double s) {
    if (s >= 86400) snprintf(buf, n, "%.4g s (%.2f days)", s, s / 86400);
    else if (s >= 3600) snprintf(buf, n, "%.4g s (%.2f h)", s, s / 3600);
    else if (s >= 60) snprintf(buf, n, "%.4g s (%.2f min)", s, s / 60);
    else if (s >= 1e-3 || s == 0) snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-6) snprintf(buf, n, "%.4g s (%.4g ms)", s, s * 1e3);
    else snprintf(buf, n, "%.4g s (%.4g us)", s, s * 1e6);
    return buf;
}

static const char *link_name(pcc_link_kind k) {
    static const char *const names[] = {"nvlink", "pcie", "shm", "infiniband", "ethernet", "none"};
    return names[k];
}

static void text_cluster(FILE *f, const pcc_cluster *c, const cluster_fit *fit, const pcc_totals *t) {
    char a[48], b[48], d[48];
    fprintf(f, "\ncluster %s (%s): %d devices = %d node%s x %d per node\n", c->name, c->file, c->n_devices, c->nodes,
            c->nodes == 1 ? "" : "s", c->devices_per_node);
    fprintf(f, "  device (%s)         %s: memory %s (%.0f B), peak %s/s %s\n", c->cpu ? "cpu" : "gpu", c->device_name,
            fmt_bytes(a, sizeof a, c->memory_bytes), c->memory_bytes, fmt_flops(b, sizeof b, fit->peak_flops),
            math_names[fit->math]);
    fprintf(f, "  links                %s %.4g GB/s per device, %.3g us", link_name(c->intra.kind), c->intra.bandwidth_Bps / 1e9,
            c->intra.latency_s * 1e6);
    if (c->network.kind != PCC_LINK_NONE)
        fprintf(f, "; %s %d x %.4g GB/s per node, %.3g us", link_name(c->network.kind), c->nics_per_node,
                c->network.bandwidth_Bps / 1e9, c->network.latency_s * 1e6);
    fprintf(f, "\n");
    if (fit->spare_bytes >= 0)
        fprintf(f, "  one device, memory   fits: needs %s of %s (%s to spare)\n", fmt_bytes(a, sizeof a, fit->need_bytes),
                fmt_bytes(b, sizeof b, c->memory_bytes), fmt_bytes(d, sizeof d, fit->spare_bytes));
    else
        fprintf(f, "  one device, memory   does not fit: needs %s, has %s (short by %s; %.1fx its memory)\n",
                fmt_bytes(a, sizeof a, fit->need_bytes), fmt_bytes(b, sizeof b, c->memory_bytes),
                fmt_bytes(d, sizeof d, -fit->spare_bytes), fit->need_bytes / c->memory_bytes);
    fprintf(f, "  one device, compute  at least %s per step = %s / %s/s (%s peak)\n", fmt_seconds(a, sizeof a, fit->step_s),
            fmt_flops(b, sizeof b, t->flops_fwd + t->flops_bwd + t->flops_opt), fmt_flops(d, sizeof d, fit->peak_flops),
            math_names[fit->math]);
    fprintf(f, "  all devices          at least %s per step on %d device%s, if the work split perfectly\n",
            fmt_seconds(a, sizeof a, fit->step_all_s), c->n_devices, c->n_devices == 1 ? "" : "s");
}

static void json_cluster(FILE *f, const pcc_cluster *c, const cluster_fit *fit) {
    fprintf(f, ",\n \"cluster\": {\"name\": ");
    json_string(f, c->name);
    fprintf(f, ", \"file\": ");
    json_string(f, c->file);
    fprintf(f, ", \"nodes\": %d, \"devices_per_node\": %d, \"devices\": %d,\n  \"device\": {\"kind\": \"%s\", \"name\": ",
            c->nodes, c->devices_per_node, c->n_devices, c->cpu ? "cpu" : "gpu");
    json_string(f, c->device_name);
    fprintf(f, ", \"memory_bytes\": %.0f, \"memory_bandwidth_Bps\": %.17g, \"peak_flops\": {", c->memory_bytes,
            c->memory_bandwidth_Bps);
    for (int m = 0; m < PCC_MATH_COUNT; m++) fprintf(f, "%s\"%s\": %.17g", m ? ", " : "", math_names[m], c->peak_flops[m]);
    fprintf(f, "}},\n  \"model_math\": \"%s\", \"peak_flops\": %.17g,\n  \"one_device\": {\"memory_needed_bytes\": %.0f, "
               "\"fits\": %s, \"memory_spare_bytes\": %.0f, \"step_lower_bound_s\": %.17g},\n  "
               "\"all_devices\": {\"step_lower_bound_s\": %.17g}}",
            math_names[fit->math], fit->peak_flops, fit->need_bytes, fit->spare_bytes >= 0 ? "true" : "false",
            fit->spare_bytes, fit->step_s, fit->step_all_s);
}

void report_print_cluster(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_report_opts *o) {
    op_row *rows = arena_alloc(g->arena, sizeof(op_row) * (size_t)(g->n_fwd_ops + 1));
    bool *counted = arena_alloc(g->arena, sizeof(bool) * (size_t)g->n_tensors);
    rows_compute(g, rows, counted);
    pcc_totals t;
    graph_totals(g, &t);
    cluster_fit fit;
    if (c) cluster_fit_compute(g, c, &t, &fit);
    if (o->json) {
        json_report(f, g, rows, &t);
        if (c) json_cluster(f, c, &fit);
        fprintf(f, "}\n");
    } else {
        text_report(f, g, rows, &t, o->verbose);
        if (c) text_cluster(f, c, &fit, &t);
    }
}

void report_print(FILE *f, const pcc_graph *g, const pcc_report_opts *o) { report_print_cluster(f, g, NULL, o); }

/* ---- the compile's summaries ---- */

// --auto's search: what it looked at and what it solved (bestfirst.c, glpk.c), and the
// micro-batch counts it planned.
static void report_search(FILE *f, const pcc_graph *g, const pcc_options *o) {
    const pcc_search_counts *all = bestfirst_counts(), *r = driver_coshard_counts();
    const pcc_ilp_counts *n = mip_counts();
    pcc_search_counts k = {all->searches - r->searches, all->configs - r->configs, all->expanded - r->expanded,
                           all->checked - r->checked, all->dropped - r->dropped, all->seconds - r->seconds, 0, 0};
    char left[80] = "";
    if (!o->search.auto_mesh || !all->searches) return;
    if (k.dropped) snprintf(left, sizeof left, "; %d left unsolved when the time ran out", k.dropped);
    fprintf(f, "  searched %d of %d candidates (%d planned by the memory planner%s) in %.3f s; ILPs: %d solved in %.3f s, "
               "%d reused, %d answered without their memory row\n", k.expanded, k.configs, k.checked, left, k.seconds,
            n->solves, n->seconds, n->reused, n->relaxed);
    if (r->searches) {
        if (r->dropped) snprintf(left, sizeof left, "; %d left unsolved when the time ran out", r->dropped);
        fprintf(f, "  co-shard round (memory bound the plan without it): %d graphs, searched %d of %d candidates (%d planned "
                   "by the memory planner%s) in %.3f s (its ILPs counted above); %s\n", (int)r->bound, r->expanded, r->configs, r->checked,
                r->dropped ? left : "", r->seconds, o->coshard_over_s > 0 ? "co-shard chosen" : "none faster");
    }
    int bd = graph_batch_dim(g);
    int64_t gb = bd >= 0 ? g->dims[bd].size * g->micro_batches : 0;
    if (o->mb_searched)
        fprintf(f, "  searched %d micro-batch counts of the %s %lld; %d was the fastest\n", o->mb_searched,
                o->batch.global_batch ? "global batch" : "model's batch", (long long)gb, o->batch.micro_batches);
}

#define BUBBLE_WARN 0.25  // a pipeline idle more than this share of the step
#define MFU_WARN 0.25     // or less than this share of the devices' peak used

// No silent bad plan: a pipeline mostly idle, or devices mostly idle, says so on stderr with the
// options that change it (warn: nothing with -q).
static void report_warnings(const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, const pcc_strategy *s) {
    pcc_totals t;
    graph_totals(g, &t);
    double step = s->est_step_s, peak = cost_peak_flops(c, g->dtype, true) * c->n_devices;
    double mfu = step > 0 && peak > 0 ? (t.flops_fwd + t.flops_bwd) * s->micro_batches / (step * peak) : 1;
    double bubble = step > 0 ? s->est.bubble_s / step : 0;
    int pp = s->mesh[PCC_AX_PP], m = s->micro_batches;
    bool searched = o->search.auto_mesh && o->batch.global_batch && !o->batch.micro_batches_given;
    if (bubble > BUBBLE_WARN)
        warn("%s: the pipeline's fill and drain idle %.0f%% of the step (pp %d, %d micro-batch%s): more micro-batches fill "
             "it: %s", g->file, 100 * bubble, pp, m, m == 1 ? "" : "es",
             searched || o->search.auto_mesh ? "a larger --global-batch (--auto then searches how to cut it into micro-batches)"
                                             : "--micro-batches M, or --global-batch N with --micro-batch-size");
    if (mfu < MFU_WARN)
        warn("%s: the plan uses %.1f%% of the devices' peak FLOP/s by its estimate (MFU); each device has little work: a "
             "larger --global-batch, or fewer devices (--devices, --nodes)", g->file, 100 * mfu);
}

// Where the cost model's device calibration came from: the cluster profile's measured entries
// (they replace the roofline for the shapes they list) and, for every other shape, each device
// figure: "cluster" (the cluster file's, with its source if the file gives one) or "default" (the
// file gives none: 1, the ideal roofline). models/clusters/README.md, "Calibration".
// The form the model's attention operators run in (--attention): "unfused" or "flash".
static const char *attn_form(const pcc_graph *g) {
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == PCC_OP_ATTENTION && g->ops[i].attrs.mode == PLAN_ATTN_FLASH) return "flash";
    return "unfused";
}

static const char *calibration_from(double v) { return v > 0 ? "cluster" : "default"; }

static void json_calibration_figure(FILE *f, const char *name, double v, const char *src) {
    fprintf(f, "\"%s\": {\"value\": %.9g, \"from\": \"%s\", \"source\": ", name, v > 0 ? v : 1, calibration_from(v));
    if (v > 0 && src) json_string(f, src);
    else fprintf(f, "null");
    fprintf(f, "}");
}

// Where flash attention's rate comes from (cost_flash_efficiency): the cluster's published
// benchmark by shape, its single flash_efficiency, or the default (gemm_efficiency x FA2's ratio).
static const char *flash_from(const pcc_cluster *c) {
    return c->flash.n_rows ? "benchmark" : c->flash_efficiency > 0 ? "cluster" : "default";
}

// The "calibration" member of the --json summaries: the device figures, what the GEMM efficiency
// depends on, and where attention's rate comes from.
static void json_calibration(FILE *f, const pcc_graph *g, const pcc_cluster *c) {
    fprintf(f, "\"calibration\": {\"profile_entries\": %d, ", profile_size(c->profile));
    json_calibration_figure(f, "gemm_efficiency", c->gemm_efficiency, c->gemm_efficiency_source);
    fprintf(f, ", ");
    json_calibration_figure(f, "memory_efficiency", c->memory_efficiency, c->memory_efficiency_source);
    fprintf(f, ", \"gemm_shape\": ");
    if (c->sm_count > 0) fprintf(f, "\"first principles: tile and wave quantization over %d SMs, main-loop depth\"", c->sm_count);
    else fprintf(f, "null");
    bool flash = !strcmp(attn_form(g), "flash");
    fprintf(f, ", \"attention\": {\"form\": \"%s\", \"from\": ", attn_form(g));
    if (flash) fprintf(f, "\"%s\", \"source\": ", flash_from(c));
    else fprintf(f, "null, \"source\": ");
    if (flash && c->flash.n_rows && c->flash_source) json_string(f, c->flash_source);
    else fprintf(f, "null");
    fprintf(f, "}}");
}

// One figure of the text summary: "gemm_efficiency 0.83 (cluster file: First principles, measured)",
// the source's words up to its first colon (the cluster files open each source with its kind).
static void text_calibration_figure(FILE *f, const char *name, double v, const char *src) {
    if (v <= 0) {
        fprintf(f, "%s 1 (default: not in the cluster file, the ideal roofline)", name);
        return;
    }
    int n = src ? (int)strcspn(src, ":.") : 0;
    fprintf(f, "%s %.3g (cluster file%s%.*s%s)", name, v, src ? ": " : ", no source given", n > 60 ? 60 : n, src ? src : "",
            n > 60 ? "..." : "");
}

// The text summary's calibration lines.
static void text_calibration(FILE *f, const pcc_graph *g, const pcc_cluster *c) {
    fprintf(f, "  calibration (plancc --json for the sources): ");
    if (profile_size(c->profile) > 0)
        fprintf(f, "measured profile table (%d entries) for the shapes it lists; otherwise ", profile_size(c->profile));
    text_calibration_figure(f, "gemm_efficiency", c->gemm_efficiency, c->gemm_efficiency_source);
    fprintf(f, ", ");
    text_calibration_figure(f, "memory_efficiency", c->memory_efficiency, c->memory_efficiency_source);
    fprintf(f, "\n  cost model: GEMM efficiency ");
    if (c->sm_count > 0) fprintf(f, "from first principles (tile/wave quantization over %d SMs, %s)", c->sm_count, c->name);
    else fprintf(f, "the sustained figure alone (no sm_count in %s)", c->name);
    static const char *const said[] = {"FA2's published benchmark", "the cluster's flash_efficiency", "gemm_efficiency x FA2's A100 ratio"};
    const char *from = flash_from(c);
    if (strcmp(attn_form(g), "flash")) fprintf(f, "; attention unfused (its GEMMs and memory passes)\n");
    else fprintf(f, "; flash attention from %s (%s)\n", said[from[0] == 'b' ? 0 : from[0] == 'c' ? 1 : 2], c->name);
}

// A number, or null where it is not finite (a bound before GLPK has one).
static void json_num_or_null(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.9g", x);
    else fprintf(f, "null");
}

// The step-time estimate as a JSON object (a term that is not finite is null: valid JSON whatever
// the cost model says).
static void json_estimate(FILE *f, const pcc_estimate *x) {
    const char *const key[] = {"step_s", "pipeline_s", "bubble_s", "compute_s", "tp_comm_s", "p2p_s", "sync_s", "sync_exposed_s", "optimizer_s"};
    const double v[] = {x->step_s, x->pipeline_s, x->bubble_s, x->compute_s, x->tp_comm_s, x->p2p_s, x->sync_s, x->sync_exposed_s, x->optimizer_s};
    for (int i = 0; i < 9; i++) {
        fprintf(f, "%s\"%s\": ", i ? ", " : "{", key[i]);
        json_num_or_null(f, v[i]);
    }
    fprintf(f, "}");
}

// The operators coshard.c rewrote: a JSON array and the key "coshard_over_s" (the estimate of the
// plan --auto's co-shard round beat, or null), or one text line (nothing when none).
static void report_coshard(FILE *f, const pcc_options *o, bool json) {
    if (json) fprintf(f, "[");
    else if (o->n_coshard_notes) fprintf(f, "  co-shard:");
    for (int i = 0; i < o->n_coshard_notes; i++) {
        const pcc_coshard_note *n = &o->coshard_notes[i];
        if (!json) {
            fprintf(f, "%s %s %d ways along %s=%s", i ? "," : "", n->op, n->ways, n->letter, n->dim);
            continue;
        }
        fprintf(f, "%s{\"op\": ", i ? ", " : "");
        json_string(f, n->op);
        fprintf(f, ", \"letter\": ");
        json_string(f, n->letter);
        fprintf(f, ", \"dim\": ");
        json_string(f, n->dim);
        fprintf(f, ", \"ways\": %d}", n->ways);
    }
    if (json) {
        fprintf(f, "], \"coshard_over_s\": ");
        json_num_or_null(f, o->coshard_over_s > 0 ? o->coshard_over_s : NAN);
    } else if (o->n_coshard_notes && o->coshard_over_s > 0) {
        fprintf(f, " (pieces one after another on each device; --auto chose it: the best plan without co-shard, "
                   "which memory bound, is estimated at %.6g s)\n", o->coshard_over_s);
    } else if (o->n_coshard_notes) {
        fprintf(f, " (pieces one after another on each device)\n");
    }
}

void report_estimate(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, const pcc_strategy *s,
                     double peak_bytes, int n, double seconds) {
    report_warnings(g, c, o, s);
    const pcc_estimate *x = &s->est;
    char buf[160], b1[32], b2[32];
    int bd = graph_batch_dim(g);
    int64_t batch = bd >= 0 ? g->dims[bd].size : 0;
    if (o->report.json) {
        fprintf(f, "{\"model\": \"%s\", \"cluster\": \"%s\", \"devices\": %d, \"pp\": %d, \"dp\": %d, \"cp\": %d, \"cp_form\": \"%s\", "
               "\"tp\": %d, \"tp2\": %d, \"virtual_stages\": %d, \"micro_batches\": %d, \"batch\": %lld, \"global_batch\": %lld, \"zero\": %d, "
               "\"prefetch\": \"%s\", \"sequence_parallel\": %s, \"attention\": \"%s\", \"candidates\": %d, \"estimate\": ",
               g->name, c->name, c->n_devices, s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP], s->mesh[PCC_AX_CP],
               s->config.cp_zigzag ? "zigzag" : s->config.cp_ring ? "ring" : "ulysses", strategy_tp(s), s->mesh[PCC_AX_TQ], s->virtual_stages,
               s->micro_batches, (long long)batch, (long long)batch * s->micro_batches, s->zero,
               s->zero == 3 && s->zero3_late ? "none" : "layer", s->config.sp ? "true" : "false", attn_form(g), n);
        json_estimate(f, x);
        fprintf(f, ", \"memory_bytes\": %.9g, \"micro_batch_counts_searched\": %d, \"seconds\": %.6f, ", peak_bytes, o->mb_searched, seconds);
        fprintf(f, "\"coshard\": ");
        report_coshard(f, o, true);
        fprintf(f, ", ");
        json_calibration(f, g, c);
        fprintf(f, "}\n");
        return;
    }
    if (o->quiet) return;
    fprintf(f, "plancc: %s on %d x %s (%s): %s%s%s; estimate only, no plan written\n", g->name, c->n_devices, c->device_name,
           c->file, strategy_str(s, buf, sizeof buf), o->search.auto_mesh ? " (--auto)" : "",
           strcmp(attn_form(g), "flash") ? "" : ", flash attention");
    fprintf(f, "  estimated step %.6g s: pipeline %.6g s (bubble %.6g s), then gradient sync %.6g s exposed of %.6g s, "
           "optimizer %.6g s\n", x->step_s, x->pipeline_s, x->bubble_s, x->sync_exposed_s, x->sync_s, x->optimizer_s);
    fprintf(f, "  the busiest pipeline device over the step: operators %.6g s, tensor-parallel communication %.6g s, "
           "pipeline sends %.6g s\n", x->compute_s, x->tp_comm_s, x->p2p_s);
    fprintf(f, "  batch %lld per micro-batch step, %d micro-batch%s (%lld samples per step); memory per device %s of "
           "%s (the memory planner's peak); planned in %.3f s\n", (long long)batch, s->micro_batches, s->micro_batches == 1 ? "" : "es",
           (long long)batch * s->micro_batches, fmt_bytes(b1, sizeof b1, peak_bytes),
           fmt_bytes(b2, sizeof b2, c->memory_bytes), seconds);
    report_coshard(f, o, false);
    hetero_report(f, g, c, s);
    text_calibration(f, g, c);
    report_search(f, g, o);
}

// The emitted plan simulated (runtime/sim.h; check_plan ran it) next to the scheduler's estimate:
// the two come from one cost model, the simulation from the plan's own instructions, streams and
// events.
static void report_simulation(FILE *f, const pcc_emitted *e, double est_s) {
    const sim_result *r = e->sim;
    if (!r) {
        warn("the simulator cannot run the plan: %s", e->sim_err);
        return;
    }
    fprintf(f, "  simulated step %.6g s (%.3f x the estimate)", r->step_s, est_s > 0 ? r->step_s / est_s : 0);
    if (r->tflops_per_gpu > 0) fprintf(f, ", %.3g TFLOP/s per GPU", r->tflops_per_gpu);
    if (r->mfu > 0) fprintf(f, ", MFU %.1f%%", 100 * r->mfu);
    fprintf(f, ", bubble %.1f%%, exposed communication %.3g s per rank (plandump --sim, --trace)\n", 100 * r->bubble, r->exposed_comm_s);
}

// One line per program: its arena, buffers and instructions.
static void report_programs(FILE *f, const plan *p) {
    char b1[32];
    for (uint32_t k = 0; k < p->n_programs; k++)
        fprintf(f, "  %s: arena %s, %u buffers, %u instructions\n", p->programs[k].name,
                fmt_bytes(b1, sizeof b1, (double)p->programs[k].arena_bytes), p->programs[k].n_buffers, p->programs[k].n_insns);
}

// -v: one line per candidate of the ranking, key=value for scripts.
static void report_candidates(FILE *f, pcc_strategy *const *cand, int n) {
    static const char *const ilp_word[] = {"optimal", "gap", "time_limit", "infeasible", "no_solution", "error"};
    char buf[160];
    for (int k = 0; k < n; k++) {
        const pcc_mip_result *r = &cand[k]->intra->ilp;
        fprintf(f, "  candidate %d: %s; est_step_s=%.6g est_memory=%.4g ilp_rows=%d ilp_cols=%d ilp_status=%s ilp_gap=%.4g "
                   "ilp_s=%.3f\n", k + 1, strategy_str(cand[k], buf, sizeof buf), cand[k]->est_step_s,
                cand[k]->est_memory_bytes, r->rows, r->cols, ilp_word[r->status], r->gap, r->seconds);
    }
}

/* ---- the compile summary as JSON (schemas/compile.schema.json) ---- */

static void json_compile_head(FILE *f, const pcc_graph *g, const pcc_cluster *c, const char *out, double nbytes) {
    fprintf(f, "{\"model\": ");
    json_string(f, g->name);
    fprintf(f, ", \"model_file\": ");
    json_string(f, g->file);
    fprintf(f, ", \"dtype\": \"%s\", \"attention\": \"%s\",\n \"cluster\": {\"name\": ", pcc_dtype_names[g->dtype], attn_form(g));
    json_string(f, c->name);
    fprintf(f, ", \"file\": ");
    json_string(f, c->file);
    fprintf(f, ", \"devices\": %d, \"nodes\": %d, \"device\": ", c->n_devices, c->nodes);
    json_string(f, c->device_name);
    fprintf(f, ", \"memory_bytes\": %.0f},\n \"plan\": {\"file\": ", c->memory_bytes);
    json_string(f, out);
    fprintf(f, ", \"bytes\": %.0f, \"plan_check\": true},\n", nbytes);
}

static void json_compile_programs(FILE *f, const pcc_emitted *e, double device_bytes) {
    fprintf(f, " \"memory\": {\"peak_bytes\": %.0f, \"peak_stage\": %d, \"live_bound_bytes\": %.0f, \"device_bytes\": %.0f},\n"
               " \"programs\": [", e->peak_bytes, e->peak_stage, e->live_bound_bytes, device_bytes);
    for (uint32_t k = 0; k < e->p->n_programs; k++) {
        const plan_program *pg = &e->p->programs[k];
        fprintf(f, "%s\n  {\"name\": ", k ? "," : "");
        json_string(f, pg->name);
        fprintf(f, ", \"arena_bytes\": %llu, \"buffers\": %u, \"instructions\": %u}", (unsigned long long)pg->arena_bytes,
                pg->n_buffers, pg->n_insns);
    }
    fprintf(f, "],\n");
}

static void json_compile_sim(FILE *f, const pcc_emitted *e, double est_s) {
    const sim_result *r = e->sim;
    fprintf(f, " \"simulation\": ");
    if (!r) {
        warn("the simulator cannot run the plan: %s", e->sim_err);
        fprintf(f, "null,\n");
        return;
    }
    fprintf(f, "{\"step_s\": %.9g, \"ratio_to_estimate\": %.9g, \"tflops_per_gpu\": %.9g, \"mfu\": %.9g, \"bubble\": %.9g, "
               "\"exposed_comm_s\": %.9g, \"peak_bytes\": %llu},\n", r->step_s, est_s > 0 ? r->step_s / est_s : 0, r->tflops_per_gpu,
            r->mfu, r->bubble, r->exposed_comm_s, (unsigned long long)r->peak_bytes);
}

static void json_compile_warnings(FILE *f) {
    const char *w[PCC_MAX_WARNINGS];
    int n = warnings(w, PCC_MAX_WARNINGS);
    fprintf(f, " \"warnings\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_string(f, w[i]);
    }
    fprintf(f, "]");
}

// The compile summary of report_compile, as one JSON object.
static void json_compile(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, pcc_strategy *const *cand,
                         int n, int which, const pcc_emitted *e, const char *out, double nbytes, double seconds) {
    static const char *const sched[] = {"gpipe", "1f1b"};
    const pcc_strategy *s = cand[which];
    const pcc_mip_result *r = &s->intra->ilp;
    const pcc_estimate *x = &s->est;
    char buf[160];
    json_compile_head(f, g, c, out, nbytes);
    fprintf(f, " \"strategy\": {\"pp\": %d, \"dp\": %d, \"cp\": %d, \"tp\": %d, \"tp2\": %d, \"virtual_stages\": %d, \"micro_batches\": %d, "
               "\"cp_form\": \"%s\", \"schedule\": \"%s\", \"zero\": %d, \"prefetch\": \"%s\", \"sequence_parallel\": %s, \"auto\": %s, "
               "\"text\": ", s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP], s->mesh[PCC_AX_CP], strategy_tp(s), s->mesh[PCC_AX_TQ], s->virtual_stages,
            s->micro_batches, s->config.cp_zigzag ? "zigzag" : s->config.cp_ring ? "ring" : "ulysses",
            sched[s->schedule == PCC_PIPE_GPIPE ? 0 : 1], s->zero, s->zero == 3 && s->zero3_late ? "none" : "layer",
            s->config.sp ? "true" : "false", o->search.auto_mesh ? "true" : "false");
    json_string(f, strategy_str(s, buf, sizeof buf));
    fprintf(f, ", \"coshard\": ");
    report_coshard(f, o, true);
    fprintf(f, "},\n \"search\": {\"candidates\": %d, \"rank\": %d, \"micro_batch_counts_searched\": %d},\n", n, which + 1,
            o->mb_searched);
    fprintf(f, " \"ilp\": {\"tp_group\": %d, \"rows\": %d, \"columns\": %d, \"status\": \"%s\", \"objective_s\": ",
            strategy_tp(s), r->rows, r->cols, mip_status_name(r->status));
    json_num_or_null(f, r->objective);
    fprintf(f, ", \"bound_s\": ");
    json_num_or_null(f, r->bound);
    fprintf(f, ", \"gap\": ");
    json_num_or_null(f, r->gap);
    fprintf(f, ", \"seconds\": %.6f},\n", r->seconds);
    json_compile_programs(f, e, c->memory_bytes);
    fprintf(f, " \"estimate\": ");
    json_estimate(f, x);
    fprintf(f, ",\n");
    json_compile_sim(f, e, s->est_step_s);
    json_compile_warnings(f);
    fprintf(f, ",\n ");
    json_calibration(f, g, c);
    fprintf(f, ",\n \"seconds\": %.6f}\n", seconds);
}

void report_compile(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, pcc_strategy *const *cand, int n,
                    int which, const pcc_emitted *e, const char *out, double seconds) {
    struct stat sb;
    double nbytes = stat(out, &sb) == 0 ? (double)sb.st_size : 0;
    const pcc_strategy *s = cand[which];
    report_warnings(g, c, o, s);                       // on stderr, and in the JSON's "warnings"
    if (o->report.json) {
        json_compile(f, g, c, o, cand, n, which, e, out, nbytes, seconds);
        return;
    }
    if (o->quiet) return;
    const pcc_mip_result *r = &s->intra->ilp;
    char buf[160], b1[32], b2[32], b3[32];
    fprintf(f, "plancc: %s on %d x %s (%s): %s%s%s\n", g->name, c->n_devices, c->device_name, c->file,
            strategy_str(s, buf, sizeof buf), o->search.auto_mesh ? " (--auto)" : "", strcmp(attn_form(g), "flash") ? "" : ", flash attention");
    report_search(f, g, o);
    report_coshard(f, o, false);
    if (o->report.verbose) report_candidates(f, cand, n);
    fprintf(f, "  ILP (tp group of %d): %d rows x %d columns, %s, objective %.6g s, bound %.6g s, gap %.2f%%, %.3f s\n",
            strategy_tp(s), r->rows, r->cols, mip_status_name(r->status), r->objective, r->bound, 100 * r->gap, r->seconds);
    report_programs(f, e->p);
    fprintf(f, "  peak memory per device %s of %s (stage %d; live-buffer bound %s); estimated step %.6g s\n",
            fmt_bytes(b1, sizeof b1, e->peak_bytes), fmt_bytes(b2, sizeof b2, c->memory_bytes), e->peak_stage,
            fmt_bytes(b3, sizeof b3, e->live_bound_bytes), s->est_step_s);
    report_simulation(f, e, s->est_step_s);
    text_calibration(f, g, c);
    fprintf(f, "  wrote %s: %s, plan_check passed; compiled in %.3f s\n", out, fmt_bytes(b1, sizeof b1, nbytes), seconds);
}

void report_burst(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, const pcc_burst *b,
                  const pcc_emitted *e, const char *out, double seconds) {
    if (o->report.json) {
        struct stat sb;
        json_compile_head(f, g, c, out, stat(out, &sb) == 0 ? (double)sb.st_size : 0);
        fprintf(f, " \"strategy\": {\"burst\": true, \"layers\": %d, \"amp_limit\": %g, \"dp_step_s\": %.9g},\n", b->n_regions,
                o->amp_limit, b->dp_step_s);
        json_compile_programs(f, e, c->memory_bytes);
        fprintf(f, " \"estimate\": {\"step_s\": %.9g},\n", b->est_step_s);
        json_compile_sim(f, e, b->est_step_s);
        json_compile_warnings(f);
        fprintf(f, ",\n ");
        json_calibration(f, g, c);
        fprintf(f, ",\n \"seconds\": %.6f}\n", seconds);
        return;
    }
    if (o->quiet) return;
    char b1[32], b2[32];
    fprintf(f, "plancc: %s on %d x %s (%s): burst parallelism, %d layers%s\n", g->name, c->n_devices, c->device_name, c->file,
            b->n_regions, o->amp_limit > 0 ? "" : " (no amplification limit)");
    if (o->amp_limit > 0) fprintf(f, "  amplification limit %g\n", o->amp_limit);
    burst_table(f, g, b);
    report_programs(f, e->p);
    fprintf(f, "  peak memory per device %s of %s; estimated step %.6g s (data parallelism on the same cost model %.6g s, "
               "%.3f x)\n", fmt_bytes(b1, sizeof b1, e->peak_bytes), fmt_bytes(b2, sizeof b2, c->memory_bytes), b->est_step_s,
            b->dp_step_s, b->est_step_s > 0 ? b->dp_step_s / b->est_step_s : 0);
    report_simulation(f, e, b->est_step_s);
    text_calibration(f, g, c);
    fprintf(f, "  wrote %s, plan_check passed; compiled in %.3f s\n", out, seconds);
}
