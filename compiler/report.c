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
    fprintf(f, "]}\n");
}

void report_print(FILE *f, const pcc_graph *g, const pcc_report_opts *o) {
    op_row *rows = arena_alloc(g->arena, sizeof(op_row) * (size_t)(g->n_fwd_ops + 1));
    bool *counted = arena_alloc(g->arena, sizeof(bool) * (size_t)g->n_tensors);
    rows_compute(g, rows, counted);
    pcc_totals t;
    graph_totals(g, &t);
    if (o->json) json_report(f, g, rows, &t);
    else text_report(f, g, rows, &t, o->verbose);
}
