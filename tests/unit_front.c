/*
 * unit_front.c: unit tests of the front end's pieces: arena, symbol table, JSON pointers and
 * checked reads, shape rules and FLOPs of the operator table, and autodiff's structure.
 * Models come from models/ (the source root is argv[1]).
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *root;

static pcc_graph *load(pcc_arena *a, const char *model) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", root, model);
    pcc_graph *g = NULL;
    if (model_load(a, path, &g) || graph_check(g) || autodiff(g) || graph_check(g)) return NULL;
    return g;
}

// Writes `text` to a temporary file and loads it; returns the status.
static pcc_status load_text(pcc_arena *a, const char *text, pcc_graph **g) {
    char path[] = "/tmp/plancc-unit-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return PCC_ERR_INTERNAL;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    pcc_status st = model_load(a, path, g);
    remove(path);
    return st;
}

static void test_arena_symtab(void) {
    pcc_arena *a = arena_init();
    pcc_symtab t;
    symtab_init(&t, a, 2);
    char names[200][16]; // room for any int (gcc at -O1 does not see i < 200)
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof names[i], "n%d", i);
        EXPECT(symtab_put(&t, a, names[i], i));
    }
    EXPECT(!symtab_put(&t, a, "n7", 99));
    EXPECT(symtab_get(&t, "n7") == 7 && symtab_get(&t, "n199") == 199 && symtab_get(&t, "x") == -1);
    int *v = NULL, n = 0, cap = 0;
    for (int i = 0; i < 1000; i++) *VEC_PUSH(a, v, n, cap) = i;
    EXPECT(n == 1000 && v[999] == 999 && v[0] == 0);
    char *s = arena_printf(a, "%s-%d", "x", 42);
    EXPECT(strcmp(s, "x-42") == 0);
    arena_free(a);
    arena_free(NULL);
}

static void test_json(void) {
    pcc_arena *a = arena_init();
    pcc_jreader r;
    pcc_json *root_v;
    const char *doc = "{\"a/b~c\": [1, 2.5, 1e3]}";
    EXPECT(json_open(&r, a, "t.json", doc, strlen(doc), &root_v) == PCC_OK);
    EXPECT(strcmp(json_ptr_key(&r, "", "a/b~c"), "/a~1b~0c") == 0);
    EXPECT(strcmp(json_ptr_idx(&r, "/x", 3), "/x/3") == 0);
    pcc_json *arr = json_get(root_v, "a/b~c");
    int64_t x;
    pcc_quiet = true;
    EXPECT(json_int(&r, json_at(arr, 0), "/0", 0, 10, &x) == PCC_OK && x == 1);
    EXPECT(json_int(&r, json_at(arr, 1), "/1", 0, 10, &x) == PCC_ERR_INPUT); // 2.5 is not integral
    EXPECT(json_int(&r, json_at(arr, 2), "/2", 0, 10000, &x) == PCC_OK && x == 1000);
    EXPECT(json_int(&r, json_at(arr, 2), "/2", 0, 999, &x) == PCC_ERR_INPUT);
    json_close(&r);
    // Trailing content and truncation are syntax errors.
    EXPECT(json_open(&r, a, "t.json", "{} x", 4, &root_v) == PCC_ERR_INPUT);
    EXPECT(json_open(&r, a, "t.json", "{\"a\": ", 6, &root_v) == PCC_ERR_INPUT);
    // The length bound is respected: the same bytes, cut short, do not parse.
    EXPECT(json_open(&r, a, "t.json", "{\"a\": 1}", 7, &root_v) == PCC_ERR_INPUT);
    arena_free(a);
}

static const pcc_op *find_op(const pcc_graph *g, pcc_op_kind k, int nth) {
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == k && nth-- == 0) return &g->ops[o];
    return NULL;
}

static int count_ops(const pcc_graph *g, pcc_op_kind k, pcc_phase ph) {
    int n = 0;
    for (int o = 0; o < g->n_ops; o++) n += g->ops[o].kind == k && g->ops[o].phase == ph;
    return n;
}

static void test_mlp_autodiff(void) {
    pcc_arena *a = arena_init();
    pcc_graph *g = load(a, "mlp.json");
    EXPECT(g != NULL);
    if (!g) return;
    // Every parameter gets a gradient and one optimizer step; inputs get no gradient.
    int params = 0, opt = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].kind == PCC_T_PARAM) {
            params++;
            EXPECT(g->tensors[t].grad >= 0);
        }
        if (g->tensors[t].kind == PCC_T_INPUT) EXPECT(g->tensors[t].grad < 0);
    }
    for (int o = 0; o < g->n_ops; o++) opt += g->ops[o].phase == PCC_PHASE_OPT;
    EXPECT(params > 0 && opt == params);
    // Backward of each linear: one grad_x (except the first, whose input is data), one grad_w.
    int lin = count_ops(g, PCC_OP_LINEAR, PCC_PHASE_FWD);
    EXPECT(count_ops(g, PCC_OP_LINEAR_GRAD_W, PCC_PHASE_BWD) == lin);
    EXPECT(count_ops(g, PCC_OP_LINEAR_GRAD_X, PCC_PHASE_BWD) == lin - 1);
    // FLOPs of a linear: 2 * rows * in * out (+ bias adds).
    const pcc_op *l0 = find_op(g, PCC_OP_LINEAR, 0);
    const pcc_tensor *x = &g->tensors[l0->in[0]], *w = &g->tensors[l0->in[1]];
    double rows = (double)tensor_numel(g, x) / (double)g->dims[x->dims[x->rank - 1]].size;
    double mnk = rows * (double)g->dims[w->dims[0]].size * (double)g->dims[w->dims[1]].size;
    EXPECT(fabs(op_flops(g, l0) - (2 * mnk + (l0->nin > 2 ? mnk / (double)g->dims[w->dims[1]].size : 0))) < 1e-6);
    // The gradient of the weight costs what the forward costs (without the bias).
    const pcc_op *gw = find_op(g, PCC_OP_LINEAR_GRAD_W, count_ops(g, PCC_OP_LINEAR_GRAD_W, PCC_PHASE_BWD) - 1);
    EXPECT(fabs(op_flops(g, gw) - 2 * mnk) < 1e-6);
    arena_free(a);
}

static void test_gpt_blocks(void) {
    pcc_arena *a = arena_init();
    pcc_graph *g = load(a, "gpt-tiny.json");
    EXPECT(g != NULL);
    if (!g) return;
    // One forward block, its backward block (same repeat, reverse), its optimizer block.
    EXPECT(g->n_blocks == 3);
    EXPECT(g->blocks[1].fwd == 0 && g->blocks[2].fwd == 0);
    EXPECT(g->blocks[1].repeat == g->blocks[0].repeat && g->blocks[2].repeat == g->blocks[0].repeat);
    EXPECT(g->blocks[1].n_in == 1 && g->blocks[1].n_carry == 1 && g->blocks[1].n_out == 1);
    // Tied embeddings: the token table's gradient sums the embedding's and the lm head's.
    int wte = -1;
    for (int o = 0; o < g->n_fwd_ops; o++)
        if (g->ops[o].kind == PCC_OP_LINEAR && g->ops[o].block < 0) wte = g->ops[o].in[1];
    EXPECT(wte >= 0);
    if (wte >= 0) {
        int gp = g->tensors[wte].grad;
        EXPECT(gp >= 0 && g->tensors[gp].producer >= 0 && g->ops[g->tensors[gp].producer].kind == PCC_OP_ADD);
    }
    // Attention's backward: one op with three gradients, inside the backward block.
    const pcc_op *ag = find_op(g, PCC_OP_ATTENTION_GRAD, 0);
    EXPECT(ag && ag->nout == 3 && ag->block == 1);
    // Activations kept for backward are marked; parameters are not.
    int saved = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        saved += g->tensors[t].saved;
        if (g->tensors[t].kind == PCC_T_PARAM) EXPECT(!g->tensors[t].saved);
    }
    EXPECT(saved > 0);
    arena_free(a);
}

// The IR does not grow with a block's repeat count.
static void test_repeat_invariance(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/gpt-tiny.json", root);
    pcc_arena *a = arena_init();
    char *text;
    size_t len;
    EXPECT(file_read_all(a, path, &text, &len, 1 << 24) == PCC_OK);
    char *rep = strstr(text, "\"repeat\": 2");
    EXPECT(rep != NULL);
    if (!rep) return;
    char *big = arena_alloc(a, len + 16);
    size_t pre = (size_t)(rep - text);
    memcpy(big, text, pre);
    sprintf(big + pre, "\"repeat\": 960%s", rep + strlen("\"repeat\": 2"));
    pcc_graph *g1 = NULL, *g2 = NULL;
    EXPECT(load_text(a, text, &g1) == PCC_OK && load_text(a, big, &g2) == PCC_OK);
    if (!g1 || !g2) return;
    EXPECT(autodiff(g1) == PCC_OK && autodiff(g2) == PCC_OK);
    EXPECT(g1->n_ops == g2->n_ops && g1->n_tensors == g2->n_tensors);
    pcc_totals t1, t2;
    graph_totals(g1, &t1);
    graph_totals(g2, &t2);
    // Per-copy figures scale exactly with the repeat count.
    double per_copy1 = (t1.flops_fwd_matmul), per_copy2 = (t2.flops_fwd_matmul);
    EXPECT(per_copy2 > per_copy1 * 100);
    arena_free(a);
}

static void test_shape_messages(void) {
    // A matmul whose contraction dims disagree is refused (shape rule from the annotation).
    const char *m = "{\"version\":1,\"name\":\"t\",\"dims\":{\"B\":2,\"K\":3,\"J\":4,\"N\":5},"
                    "\"tensors\":{\"x\":{\"kind\":\"input\",\"shape\":[\"B\",\"K\"],\"data\":{\"kind\":\"normal\"}},"
                    "\"w\":{\"kind\":\"param\",\"shape\":[\"J\",\"N\"],\"init\":{\"kind\":\"zeros\"}},"
                    "\"y\":{\"shape\":[\"B\",\"N\"]},\"l\":{\"shape\":[]},\"t\":{\"kind\":\"input\",\"shape\":[\"B\",\"N\"],\"data\":{\"kind\":\"normal\"}}},"
                    "\"ops\":[{\"type\":\"matmul\",\"in\":[\"x\",\"w\"],\"out\":[\"y\"]},{\"type\":\"mse_loss\",\"in\":[\"y\",\"t\"],\"out\":[\"l\"]}],\"loss\":\"l\"}";
    pcc_arena *a = arena_init();
    pcc_graph *g;
    fprintf(stderr, "(an expected diagnostic follows)\n");
    EXPECT(load_text(a, m, &g) == PCC_ERR_INPUT);
    arena_free(a);
}

// No two tensors of a block (or of the top level) have one name after autodiff, even where a
// forward operator reads one tensor twice (mixtral-routed-tiny's concat(mul_7, mul_7): the
// split that is its gradient makes two gradients of mul_7).
static void test_grad_names_unique(void) {
    pcc_arena *a = arena_init();
    pcc_graph *g = load(a, "../tests/models/mixtral-routed-tiny.json");
    EXPECT(g != NULL);
    if (!g) return;
    int same = 0;
    for (int t = 0; t < g->n_tensors; t++)
        for (int u = t + 1; u < g->n_tensors; u++)
            if (g->tensors[t].block == g->tensors[u].block && strcmp(g->tensors[t].name, g->tensors[u].name) == 0) {
                if (same++ < 3) fprintf(stderr, "tensors %d and %d are both \"%s\"\n", t, u, g->tensors[t].name);
            }
    EXPECT(same == 0);
    arena_free(a);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    test_arena_symtab();
    test_json();
    test_mlp_autodiff();
    test_gpt_blocks();
    test_repeat_invariance();
    test_shape_messages();
    test_grad_names_unique();
    return test_summary();
}
