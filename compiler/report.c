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
 */
#include "plancc.h"

#include <string.h>

typedef struct op_row {
    double params, fwd, bwd, acts; // per copy
} op_row;

static void rows_compute(const pcc_graph *g, op_row *rows, bool *counted) {
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        rows[o].fwd = op_flops(g, op);
        for (int i = 0; i < op->nin; i++) {
            const pcc_tensor *t = &g->tensors[op->in[i]];
            if (t->kind == PCC_T_PARAM && !counted[op->in[i]]) {
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

void graph_totals(const pcc_graph *g, pcc_totals *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < g->n_tensors; i++) {
        const pcc_tensor *x = &g->tensors[i];
        double n = (double)tensor_numel(g, x) * (double)tensor_copies(g, x), b = tensor_bytes(g, x) * (double)tensor_copies(g, x);
        if (x->kind == PCC_T_PARAM) {
            t->params += n;
            t->bytes_weights += b;
            if (x->grad >= 0) t->bytes_grads += b;
        }
        if (x->kind == PCC_T_STATE) t->bytes_optim += b;
        if (x->saved) t->bytes_acts += b;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        double f = op_flops(g, op) * (double)op_copies(g, op), mm = op_flops_matmul(g, op) * (double)op_copies(g, op);
        switch (op->phase) {
        case PCC_PHASE_FWD: t->flops_fwd += f; t->flops_fwd_matmul += mm; break;
        case PCC_PHASE_BWD: t->flops_bwd += f; t->flops_bwd_matmul += mm; break;
        case PCC_PHASE_OPT: t->flops_opt += f; break;
        }
    }
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
