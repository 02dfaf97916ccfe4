/*
 * glpk.c: the only file that sees GLPK: a mixed-integer program (mip_*) and its solve.
 *
 * A small builder for mixed-integer programs (named columns and rows, a sparse matrix kept in
 * the arena) and one solve call. The program plancc solves, the intra-operator ILP, is built in
 * ilp.c; this file knows nothing of operators, only of columns, rows and GLPK. GLPK's own
 * terminal output is off; its parameters are checked here before the call, because GLPK aborts
 * the process on a bad one; every return code and glp_mip_status is mapped to a result status.
 * During branch and bound a callback keeps the incumbent and the best bound for the progress
 * line (below). `dump_lp` writes the model in CPLEX LP text (glp_write_lp) before solving.
 *
 * The progress line also lives here, since the ILP is what can take long: one line on stderr,
 * redrawn in place, with the compile's phase (progress_phase, from the driver) and, during a
 * solve, the ILP's size, incumbent, bound and gap. It is drawn only when stderr is a terminal
 * (and plancc is not -q), and not before a quarter of a second has passed, so fast compiles and
 * every output a test compares stay as they are.
 *
 * GLPK is deterministic for the same model built in the same order, and this file adds no
 * randomness, so the same problem gives the same solution.
 */
#include "plancc.h"

#include <glpk.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

struct pcc_mip {
    pcc_arena *arena;
    const char **col_names, **row_names;
    int *col_kind;              // 0 binary, 1 continuous
    double *col_lo, *col_hi, *col_cost;
    int n_cols, cap_cols;
    int *row_sense;
    double *row_rhs;
    int n_rows, cap_rows;
    int *ia, *ja;               // 1-based, as glp_load_matrix wants (index 0 unused)
    double *ar;
    int n_nz, cap_nz;
};

pcc_mip *mip_init(pcc_arena *a) {
    pcc_mip *p = arena_alloc(a, sizeof *p);
    p->arena = a;
    return p;
}

static int grow_cols(pcc_mip *p) {
    if (p->n_cols == p->cap_cols) {
        int cap = p->cap_cols ? 2 * p->cap_cols : 64;
        size_t o = (size_t)p->cap_cols, n = (size_t)cap;
        p->col_names = arena_realloc(p->arena, p->col_names, o * sizeof(char *), n * sizeof(char *));
        p->col_kind = arena_realloc(p->arena, p->col_kind, o * sizeof(int), n * sizeof(int));
        p->col_lo = arena_realloc(p->arena, p->col_lo, o * sizeof(double), n * sizeof(double));
        p->col_hi = arena_realloc(p->arena, p->col_hi, o * sizeof(double), n * sizeof(double));
        p->col_cost = arena_realloc(p->arena, p->col_cost, o * sizeof(double), n * sizeof(double));
        p->cap_cols = cap;
    }
    return p->n_cols++;
}

int mip_add_col(pcc_mip *p, const char *name, bool binary, double lo, double hi, double cost) {
    int c = grow_cols(p);
    p->col_names[c] = name;
    p->col_kind[c] = binary ? 0 : 1;
    p->col_lo[c] = binary ? 0 : lo;
    p->col_hi[c] = binary ? 1 : hi;
    p->col_cost[c] = cost;
    return c;
}

int mip_add_row(pcc_mip *p, const char *name, pcc_mip_sense sense, double rhs) {
    if (p->n_rows == p->cap_rows) {
        int cap = p->cap_rows ? 2 * p->cap_rows : 64;
        size_t o = (size_t)p->cap_rows, n = (size_t)cap;
        p->row_names = arena_realloc(p->arena, p->row_names, o * sizeof(char *), n * sizeof(char *));
        p->row_sense = arena_realloc(p->arena, p->row_sense, o * sizeof(int), n * sizeof(int));
        p->row_rhs = arena_realloc(p->arena, p->row_rhs, o * sizeof(double), n * sizeof(double));
        p->cap_rows = cap;
    }
    p->row_names[p->n_rows] = name;
    p->row_sense[p->n_rows] = (int)sense;
    p->row_rhs[p->n_rows] = rhs;
    return p->n_rows++;
}

void mip_set(pcc_mip *p, int row, int col, double coef) {
    PCC_ASSERT(row >= 0 && row < p->n_rows && col >= 0 && col < p->n_cols);
    if (p->n_nz + 1 >= p->cap_nz) {
        int cap = p->cap_nz ? 2 * p->cap_nz : 256;
        size_t o = (size_t)p->cap_nz, n = (size_t)cap;
        p->ia = arena_realloc(p->arena, p->ia, o * sizeof(int), n * sizeof(int));
        p->ja = arena_realloc(p->arena, p->ja, o * sizeof(int), n * sizeof(int));
        p->ar = arena_realloc(p->arena, p->ar, o * sizeof(double), n * sizeof(double));
        p->cap_nz = cap;
    }
    p->n_nz++;
    p->ia[p->n_nz] = row + 1;
    p->ja[p->n_nz] = col + 1;
    p->ar[p->n_nz] = coef;
}

int mip_cols(const pcc_mip *p) { return p->n_cols; }
int mip_rows(const pcc_mip *p) { return p->n_rows; }

/* ---- the progress line ---- */

#define PROGRESS_DELAY_S 0.25   // nothing is drawn before this: a fast compile shows nothing
#define PROGRESS_PERIOD_S 0.1   // redraws at most this often (a new phase redraws at once)

static struct {
    bool on, drawn;
    double start, last;
    char phase[128], detail[128];
} line;

void progress_init(bool on) {
    memset(&line, 0, sizeof line);
    line.on = on && isatty(2);
    line.start = clock_s();
}

static void progress_draw(bool now) {
    double t = clock_s();
    if (!line.on || t - line.start < PROGRESS_DELAY_S || (!now && t - line.last < PROGRESS_PERIOD_S)) return;
    line.last = t;
    line.drawn = true;
    // Carriage return and erase-to-end-of-line (ECMA-48 EL), so a shorter line leaves no tail.
    fprintf(stderr, "\r\033[K%s: %.1f s, %s%s%s", pcc_progname, t - line.start, line.phase, line.detail[0] ? ": " : "",
            line.detail);
    fflush(stderr);
}

void progress_phase(const char *fmt, ...) {
    if (!line.on) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line.phase, sizeof line.phase, fmt, ap);
    va_end(ap);
    line.detail[0] = 0;
    progress_draw(true);
}

void progress_clear(void) {
    if (line.drawn) fputs("\r\033[K", stderr), fflush(stderr);
    line.drawn = false;
}

void progress_done(void) {
    progress_clear();
    line.on = false;
}

/* ---- solving ---- */

typedef struct progress {
    bool show;                  // this solve updates the progress line
    int rows, cols;
    double incumbent, bound;
} progress;

static void on_tree(glp_tree *T, void *info) {
    progress *pr = info;
    int reason = glp_ios_reason(T);
    if (reason != GLP_IBINGO && reason != GLP_ISELECT && reason != GLP_IBRANCH) return;
    int best = glp_ios_best_node(T);
    if (best) pr->bound = glp_ios_node_bound(T, best);
    if (reason == GLP_IBINGO) pr->incumbent = glp_mip_obj_val(glp_ios_get_prob(T));
    if (!pr->show) return;
    if (isnan(pr->incumbent))
        snprintf(line.detail, sizeof line.detail, "ILP %d x %d, bound %.6g s, no incumbent yet", pr->rows, pr->cols, pr->bound);
    else
        snprintf(line.detail, sizeof line.detail, "ILP %d x %d, incumbent %.6g s, bound %.6g s, gap %.2f%%", pr->rows,
                 pr->cols, pr->incumbent, pr->bound, 100 * glp_ios_mip_gap(T));
    progress_draw(false);
}

static glp_prob *build(const pcc_mip *p) {
    glp_prob *P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    if (p->n_rows) glp_add_rows(P, p->n_rows);
    if (p->n_cols) glp_add_cols(P, p->n_cols);
    for (int r = 0; r < p->n_rows; r++) {
        int type = p->row_sense[r] == PCC_MIP_EQ ? GLP_FX : p->row_sense[r] == PCC_MIP_LE ? GLP_UP : GLP_LO;
        glp_set_row_name(P, r + 1, p->row_names[r]);
        glp_set_row_bnds(P, r + 1, type, p->row_rhs[r], p->row_rhs[r]);
    }
    for (int c = 0; c < p->n_cols; c++) {
        glp_set_col_name(P, c + 1, p->col_names[c]);
        glp_set_col_kind(P, c + 1, p->col_kind[c] == 0 ? GLP_BV : GLP_CV);
        if (p->col_kind[c] != 0) glp_set_col_bnds(P, c + 1, p->col_hi[c] > p->col_lo[c] ? GLP_DB : GLP_FX, p->col_lo[c], p->col_hi[c]);
        glp_set_obj_coef(P, c + 1, p->col_cost[c]);
    }
    if (p->n_nz) glp_load_matrix(P, p->n_nz, p->ia, p->ja, p->ar);
    return P;
}

static pcc_mip_status map_status(int ret, int mip_status) {
    if (mip_status == GLP_OPT) return PCC_MIP_OPTIMAL;
    if (mip_status == GLP_NOFEAS) return PCC_MIP_INFEASIBLE;
    if (mip_status == GLP_FEAS) return ret == 0 || ret == GLP_EMIPGAP ? PCC_MIP_GAP : PCC_MIP_TIME_LIMIT;
    if (ret == GLP_ENOPFS) return PCC_MIP_INFEASIBLE;
    if (ret == GLP_ETMLIM) return PCC_MIP_NO_SOLUTION;
    return PCC_MIP_ERROR;
}

pcc_status mip_solve(pcc_mip *p, const pcc_mip_opts *o, pcc_mip_result *r) {
    memset(r, 0, sizeof *r);
    r->rows = p->n_rows, r->cols = p->n_cols, r->nonzeros = p->n_nz;
    // GLPK aborts the process on a bad parameter: check them here.
    if (!(o->time_limit_s > 0) || o->time_limit_s > 1e6 || !(o->mip_gap >= 0) || o->mip_gap >= 1) {
        fprintf(stderr, "%s: bad ILP parameters: time limit %g s, MIP gap %g\n", pcc_progname, o->time_limit_s, o->mip_gap);
        return PCC_ERR_INPUT;
    }
    glp_term_out(GLP_OFF);
    glp_prob *P = build(p);
    if (o->dump_lp && glp_write_lp(P, NULL, o->dump_lp) != 0) {
        glp_delete_prob(P);
        fprintf(stderr, "%s: %s: cannot write the ILP\n", pcc_progname, o->dump_lp);
        return PCC_ERR_INPUT;
    }
    // A solve shows on the driver's progress line; one called on its own (o->progress, as -d s
    // does before the driver has a line) starts a line of its own.
    bool own = o->progress && !line.on;
    if (own) progress_init(true), progress_phase("phase 2: the intra-operator ILP");
    progress pr = {.show = line.on, .rows = p->n_rows, .cols = p->n_cols, .incumbent = NAN, .bound = NAN};
    double start = clock_s();
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON;
    parm.tm_lim = (int)(o->time_limit_s * 1000);
    parm.mip_gap = o->mip_gap;
    parm.cb_func = on_tree;
    parm.cb_info = &pr;
    int ret = glp_intopt(P, &parm);
    r->seconds = clock_s() - start;
    line.detail[0] = 0;
    if (own) progress_done();
    r->status = map_status(ret, glp_mip_status(P));
    if (r->status == PCC_MIP_OPTIMAL || r->status == PCC_MIP_GAP || r->status == PCC_MIP_TIME_LIMIT) {
        r->objective = glp_mip_obj_val(P);
        r->bound = r->status == PCC_MIP_OPTIMAL || isnan(pr.bound) ? r->objective : fmin(pr.bound, r->objective);
        r->gap = r->objective > 0 ? (r->objective - r->bound) / r->objective : 0;
        r->x = arena_alloc(p->arena, sizeof(double) * (size_t)(p->n_cols + 1));
        for (int c = 0; c < p->n_cols; c++) r->x[c] = glp_mip_col_val(P, c + 1);
    }
    glp_delete_prob(P);
    glp_free_env();
    return PCC_OK;
}

const char *mip_status_name(pcc_mip_status s) {
    static const char *const names[] = {"optimal", "within the MIP gap", "stopped by the time limit",
                                        "infeasible", "no solution within the time limit", "solver error"};
    return names[s];
}
