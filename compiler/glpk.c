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
 * The progress line also lives here, since the ILP is what can take long: the compile's phase
 * (progress_phase: the search's candidates, best so far and bound) and, during a solve, the
 * ILP's size, incumbent, bound and gap (a bound only once one exists). On a terminal it is one
 * line redrawn in place, not before a quarter of a second has passed; elsewhere (a log, a CI
 * job) a whole line every five seconds, the first after five, so fast compiles and every output
 * a test compares stay as they are. -q turns it off.
 *
 * Every program solved is remembered for the rest of the process (the memo below): the same
 * program again gets the same answer without GLPK. A row marked relaxable (ilp.c's memory row)
 * is left out first: the optimum without it, when it keeps the row, is the answer, and that
 * program serves every budget of the search. GLPK is deterministic for the same model built in
 * the same order, and this file adds no randomness, so the same problem gives the same solution.
 */
#include "plancc.h"

#include <glpk.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>
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
    int relax_row;              // a row the solve tries without first (-1: none; mip_relax_row)
};

pcc_mip *mip_init(pcc_arena *a) {
    pcc_mip *p = calloc(1, sizeof *p);
    PCC_ASSERT(p);
    p->arena = a;
    p->relax_row = -1;
    return p;
}

// realloc, the new part zeroed; the builder's arrays live on the heap until mip_free (a search
// builds thousands of programs, and an arena would keep every one).
static void *grow(void *v, size_t old, size_t n) {
    char *x = realloc(v, n);
    PCC_ASSERT(x);
    if (n > old) memset(x + old, 0, n - old);
    return x;
}

void mip_free(pcc_mip *p) {
    if (!p) return;
    free(p->col_names), free(p->col_kind), free(p->col_lo), free(p->col_hi), free(p->col_cost);
    free(p->row_names), free(p->row_sense), free(p->row_rhs), free(p->ia), free(p->ja), free(p->ar);
    free(p);
}

static int grow_cols(pcc_mip *p) {
    if (p->n_cols == p->cap_cols) {
        int cap = p->cap_cols ? 2 * p->cap_cols : 64;
        size_t o = (size_t)p->cap_cols, n = (size_t)cap;
        p->col_names = grow(p->col_names, o * sizeof(char *), n * sizeof(char *));
        p->col_kind = grow(p->col_kind, o * sizeof(int), n * sizeof(int));
        p->col_lo = grow(p->col_lo, o * sizeof(double), n * sizeof(double));
        p->col_hi = grow(p->col_hi, o * sizeof(double), n * sizeof(double));
        p->col_cost = grow(p->col_cost, o * sizeof(double), n * sizeof(double));
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
        p->row_names = grow(p->row_names, o * sizeof(char *), n * sizeof(char *));
        p->row_sense = grow(p->row_sense, o * sizeof(int), n * sizeof(int));
        p->row_rhs = grow(p->row_rhs, o * sizeof(double), n * sizeof(double));
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
        p->ia = grow(p->ia, o * sizeof(int), n * sizeof(int));
        p->ja = grow(p->ja, o * sizeof(int), n * sizeof(int));
        p->ar = grow(p->ar, o * sizeof(double), n * sizeof(double));
        p->cap_nz = cap;
    }
    p->n_nz++;
    p->ia[p->n_nz] = row + 1;
    p->ja[p->n_nz] = col + 1;
    p->ar[p->n_nz] = coef;
}

void mip_relax_row(pcc_mip *p, int row) {
    PCC_ASSERT(row >= 0 && row < p->n_rows);
    p->relax_row = row;
}

int mip_cols(const pcc_mip *p) { return p->n_cols; }
int mip_rows(const pcc_mip *p) { return p->n_rows; }

/* ---- the progress line ---- */

#define PROGRESS_DELAY_S 0.25   // on a terminal, nothing is drawn before this: a fast compile shows nothing
#define PROGRESS_PERIOD_S 0.1   // ... and it is redrawn at most this often (a new phase redraws at once)
#define PROGRESS_LINE_S 5.0     // elsewhere (a log, a pipe) a whole line this often, the first after as long

static struct {
    bool on, tty, drawn;
    double start, last;
    char phase[160], detail[128];
} line;

void progress_init(bool on) {
    memset(&line, 0, sizeof line);
    line.on = on;
    line.tty = isatty(2);
    line.start = line.last = clock_s();
}

static void progress_draw(bool now) {
    double t = clock_s();
    if (!line.on) return;
    if (!line.tty) { // a line of its own every few seconds, so a log shows a long compile moving
        if (t - line.last < PROGRESS_LINE_S) return;
        line.last = t;
        fprintf(stderr, "%s: %.0f s: %s%s%s\n", pcc_progname, t - line.start, line.phase, line.detail[0] ? ": " : "",
                line.detail);
        fflush(stderr);
        return;
    }
    if (t - line.start < PROGRESS_DELAY_S || (!now && t - line.last < PROGRESS_PERIOD_S)) return;
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
    double *start;              // a first incumbent to give GLPK (fix_and_solve's), 1-based; NULL: none
} progress;

static void on_tree(glp_tree *T, void *info) {
    progress *pr = info;
    int reason = glp_ios_reason(T);
    if (reason == GLP_IHEUR && pr->start) {
        glp_ios_heur_sol(T, pr->start);
        free(pr->start), pr->start = NULL;
        return;
    }
    if (reason != GLP_IBINGO && reason != GLP_ISELECT && reason != GLP_IBRANCH) return;
    int best = glp_ios_best_node(T);
    if (best) pr->bound = glp_ios_node_bound(T, best);
    if (!isfinite(pr->bound)) pr->bound = NAN; // GLPK's -DBL_MAX before the relaxation has one
    // The incumbent, however it was found: by the search (GLP_IBINGO), or given (fix_and_solve's
    // start, which GLPK takes without a GLP_IBINGO) or by a heuristic.
    glp_prob *P = glp_ios_get_prob(T);
    if (glp_mip_status(P) == GLP_FEAS || glp_mip_status(P) == GLP_OPT) pr->incumbent = glp_mip_obj_val(P);
    if (!pr->show) return;
    if (isnan(pr->incumbent) && isnan(pr->bound))
        snprintf(line.detail, sizeof line.detail, "ILP %d x %d, no incumbent or bound yet", pr->rows, pr->cols);
    else if (isnan(pr->incumbent))
        snprintf(line.detail, sizeof line.detail, "ILP %d x %d, bound %.6g s, no incumbent yet", pr->rows, pr->cols, pr->bound);
    else
        snprintf(line.detail, sizeof line.detail, "ILP %d x %d, incumbent %.6g s, bound %.6g s, gap %.2f%%", pr->rows,
                 pr->cols, pr->incumbent, pr->bound, 100 * glp_ios_mip_gap(T));
    progress_draw(false);
}

// The program as GLPK takes it, without row `skip` (-1: every row).
static glp_prob *build(const pcc_mip *p, int skip) {
    glp_prob *P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    int nr = p->n_rows - (skip >= 0);
    if (nr) glp_add_rows(P, nr);
    if (p->n_cols) glp_add_cols(P, p->n_cols);
    for (int r = 0, k = 0; r < p->n_rows; r++) {
        if (r == skip) continue;
        int type = p->row_sense[r] == PCC_MIP_EQ ? GLP_FX : p->row_sense[r] == PCC_MIP_LE ? GLP_UP : GLP_LO;
        if (p->row_names[r]) glp_set_row_name(P, k + 1, p->row_names[r]);
        glp_set_row_bnds(P, ++k, type, p->row_rhs[r], p->row_rhs[r]);
    }
    for (int c = 0; c < p->n_cols; c++) {
        if (p->col_names[c]) glp_set_col_name(P, c + 1, p->col_names[c]);
        glp_set_col_kind(P, c + 1, p->col_kind[c] == 0 ? GLP_BV : GLP_CV);
        if (p->col_kind[c] != 0) glp_set_col_bnds(P, c + 1, p->col_hi[c] > p->col_lo[c] ? GLP_DB : GLP_FX, p->col_lo[c], p->col_hi[c]);
        glp_set_obj_coef(P, c + 1, p->col_cost[c]);
    }
    if (skip < 0) {
        if (p->n_nz) glp_load_matrix(P, p->n_nz, p->ia, p->ja, p->ar);
        return P;
    }
    int *ia = malloc(sizeof(int) * (size_t)(p->n_nz + 1)), *ja = malloc(sizeof(int) * (size_t)(p->n_nz + 1)), n = 0;
    double *ar = malloc(sizeof(double) * (size_t)(p->n_nz + 1));
    PCC_ASSERT(ia && ja && ar);
    for (int k = 1; k <= p->n_nz; k++) {
        if (p->ia[k] == skip + 1) continue;
        n++;
        ia[n] = p->ia[k] > skip + 1 ? p->ia[k] - 1 : p->ia[k], ja[n] = p->ja[k], ar[n] = p->ar[k];
    }
    if (n) glp_load_matrix(P, n, ia, ja, ar);
    free(ia), free(ja), free(ar);
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

/* ---- the memo: every distinct program solved once ----
 *
 * A program is known by two 64-bit hashes of everything GLPK is given (columns with their kinds,
 * bounds and costs, rows with their senses and right-hand sides, every coefficient, the MIP gap),
 * built in the builder's order, which is deterministic. A solve that ended on its own (optimal,
 * within the gap, infeasible) is kept, with its columns' values, for the rest of the process; one
 * stopped by a time limit is not (another limit could end elsewhere). The memo lives outside the
 * arenas, since the driver plans every micro-batch count in an arena of its own. */

#define MEMO_MAX 16384           // programs kept; past this, solves are no longer remembered

typedef struct memo_entry {
    uint64_t h1, h2;
    int n_cols;
    pcc_mip_result r;            // r.x malloc'd
} memo_entry;

static struct {
    memo_entry *v;
    int n, cap;                  // entries; slots (a power of two, open addressing on h1)
} memo;

static pcc_ilp_counts counts;

static void mix(uint64_t *h1, uint64_t *h2, uint64_t w) {
    *h1 = (*h1 ^ w) * 0x100000001b3ull;
    *h1 ^= *h1 >> 29;
    *h2 = (*h2 + w) * 0x9e3779b97f4a7c15ull;
    *h2 ^= *h2 >> 31;
}

static uint64_t bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static void program_key(const pcc_mip *p, const pcc_mip_opts *o, int skip, uint64_t *h1, uint64_t *h2) {
    *h1 = 0xcbf29ce484222325ull, *h2 = 0x2545f4914f6cdd1dull;
    mix(h1, h2, (uint64_t)p->n_cols), mix(h1, h2, (uint64_t)(p->n_rows - (skip >= 0))), mix(h1, h2, bits(o->mip_gap));
    for (int c = 0; c < p->n_cols; c++) {
        mix(h1, h2, (uint64_t)p->col_kind[c]), mix(h1, h2, bits(p->col_lo[c]));
        mix(h1, h2, bits(p->col_hi[c])), mix(h1, h2, bits(p->col_cost[c]));
    }
    for (int r = 0; r < p->n_rows; r++)
        if (r != skip) mix(h1, h2, (uint64_t)p->row_sense[r]), mix(h1, h2, bits(p->row_rhs[r]));
    for (int k = 1; k <= p->n_nz; k++) {
        if (p->ia[k] == skip + 1) continue;
        int row = skip >= 0 && p->ia[k] > skip + 1 ? p->ia[k] - 1 : p->ia[k];
        mix(h1, h2, (uint64_t)row << 32 | (uint32_t)p->ja[k]), mix(h1, h2, bits(p->ar[k]));
    }
}

static memo_entry *memo_find(uint64_t h1, uint64_t h2) {
    for (int i = memo.cap ? (int)(h1 & (uint64_t)(memo.cap - 1)) : 0; memo.cap && memo.v[i].n_cols >= 0; i = (i + 1) & (memo.cap - 1))
        if (memo.v[i].h1 == h1 && memo.v[i].h2 == h2) return &memo.v[i];
    return NULL;
}

static void memo_put(uint64_t h1, uint64_t h2, int n_cols, const pcc_mip_result *r) {
    if (memo.n >= MEMO_MAX) return;
    if (2 * (memo.n + 1) > memo.cap) { // grow: rehash into twice the slots
        memo_entry *old = memo.v;
        int oc = memo.cap;
        memo.cap = oc ? 2 * oc : 256;
        memo.v = malloc(sizeof(memo_entry) * (size_t)memo.cap);
        PCC_ASSERT(memo.v);
        for (int i = 0; i < memo.cap; i++) memo.v[i].n_cols = -1;
        for (int i = 0; i < oc; i++) {
            if (old[i].n_cols < 0) continue;
            int j = (int)(old[i].h1 & (uint64_t)(memo.cap - 1));
            while (memo.v[j].n_cols >= 0) j = (j + 1) & (memo.cap - 1);
            memo.v[j] = old[i];
        }
        free(old);
    }
    int j = (int)(h1 & (uint64_t)(memo.cap - 1));
    while (memo.v[j].n_cols >= 0) j = (j + 1) & (memo.cap - 1);
    memo_entry *e = &memo.v[j];
    *e = (memo_entry){.h1 = h1, .h2 = h2, .n_cols = n_cols, .r = *r};
    e->r.x = NULL;
    if (r->x) {
        e->r.x = malloc(sizeof(double) * (size_t)(n_cols + 1));
        PCC_ASSERT(e->r.x);
        memcpy(e->r.x, r->x, sizeof(double) * (size_t)n_cols);
    }
    memo.n++;
}

void mip_memo_free(void) {
    for (int i = 0; i < memo.cap; i++)
        if (memo.v[i].n_cols >= 0) free(memo.v[i].r.x);
    free(memo.v);
    memset(&memo, 0, sizeof memo);
}

const pcc_ilp_counts *mip_counts(void) { return &counts; }

/* ---- solving ---- */

static bool has_solution(const pcc_mip_result *r) {
    return r->status == PCC_MIP_OPTIMAL || r->status == PCC_MIP_GAP || r->status == PCC_MIP_TIME_LIMIT;
}

// Fix and solve: the program's relaxation, its integral columns fixed where the relaxation put
// them, and GLPK's search on the few left free. Its answer is feasible for the whole program,
// and the relaxation bounds the whole program's optimum: within the MIP gap of that bound, the
// answer stands (returned, *bound set); otherwise it is the whole search's first incumbent
// (*start). The search's programs have near-integral relaxations, and GLPK's own first
// incumbents can be poor: on the Evoformer's hardest program it stopped 0.32% above the bound
// after 20 s, where this finds an answer 0.0004% above it in 0.4 s; on LLaMA-2-7B's, whose
// memory rows leave gaps of 1-4%, the first incumbent halves the search. *lp_solved: P holds
// its relaxation's optimal basis (GLPK's search may start from it without its presolver).
static glp_prob *fix_and_solve(glp_prob *P, const glp_iocp *parm, double *bound, double **start, bool *lp_solved) {
    glp_smcp lp;
    glp_init_smcp(&lp);
    lp.msg_lev = GLP_MSG_OFF, lp.presolve = GLP_ON, lp.tm_lim = parm->tm_lim;
    *lp_solved = glp_simplex(P, &lp) == 0 && glp_get_status(P) == GLP_OPT;
    if (!*lp_solved) return NULL;
    double lo = glp_get_obj_val(P);
    int n = glp_get_num_cols(P);
    glp_prob *F = glp_create_prob();
    glp_copy_prob(F, P, GLP_OFF);
    for (int j = 1; j <= n; j++) {
        double v = glp_get_col_prim(P, j);
        if (glp_get_col_kind(P, j) == GLP_BV && (v < 1e-9 || v > 1 - 1e-9)) glp_set_col_bnds(F, j, GLP_FX, round(v), round(v));
    }
    glp_iocp fp = *parm;
    fp.cb_func = NULL, fp.mip_gap = 0;
    int ret = glp_intopt(F, &fp);
    double hi = glp_mip_obj_val(F);
    bool found = (ret == 0 || ret == GLP_EMIPGAP) && glp_mip_status(F) == GLP_OPT;
    if (found && hi - lo <= parm->mip_gap * fabs(hi) + 1e-12 * fabs(hi)) {
        *bound = fmin(lo, hi);
        return F;
    }
    if (found) {
        *start = malloc(sizeof(double) * (size_t)(n + 1));
        for (int j = 1; *start && j <= n; j++) (*start)[j] = glp_mip_col_val(F, j);
    }
    glp_delete_prob(F);
    return NULL;
}

// GLPK on the program without row `skip` (-1: all of it).
static void glpk_solve(pcc_mip *p, const pcc_mip_opts *o, int skip, pcc_mip_result *r) {
    glp_term_out(GLP_OFF);
    glp_prob *P = build(p, skip);
    progress pr = {.show = line.on, .rows = p->n_rows - (skip >= 0), .cols = p->n_cols, .incumbent = NAN, .bound = NAN};
    double start = clock_s();
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON;
    // Backtrack by the best projection: on the memory-bound programs of the search it closes the
    // gap two to four times sooner than the best local bound (GLPK's default), measured on
    // LLaMA-2-7B's hard solves.
    parm.bt_tech = GLP_BT_BPH;
    // Branch on the first fractional column, not by Driebeek and Tomlin's heuristic (GLPK's
    // default), which evaluates a row of the simplex tableau for every fractional column at every
    // node: on the search's large programs that was most of the solve. tools/bench_compile.py's
    // real models, CPU seconds: LLaMA-2-7B 12.1 -> 8.2, the Evoformer 7.9 -> 6.6, the same plans;
    // the small programs of the models group lose up to 1 s (megatron-7.5b on 8 GPUs 0.5 -> 1.5).
    parm.br_tech = GLP_BR_FFV;
    parm.tm_lim = (int)fmax(1, o->time_limit_s * 1000);
    parm.mip_gap = o->mip_gap;
    parm.cb_func = on_tree;
    parm.cb_info = &pr;
    double fixed_bound = NAN;
    bool lp_solved;
    glp_prob *F = fix_and_solve(P, &parm, &fixed_bound, &pr.start, &lp_solved);
    if (F) glp_delete_prob(P), P = F, pr.bound = fixed_bound;
    if (lp_solved) parm.presolve = GLP_OFF; // (it needs the basis fix_and_solve left; a start needs it off)
    parm.tm_lim = (int)fmax(1, parm.tm_lim - 1000 * (clock_s() - start)); // the time limit is the solve's, both parts
    int ret = F ? 0 : glp_intopt(P, &parm);
    free(pr.start);
    r->seconds = clock_s() - start;
    line.detail[0] = 0;
    r->status = map_status(ret, glp_mip_status(P));
    if (F && fixed_bound < glp_mip_obj_val(P)) r->status = PCC_MIP_GAP;
    if (has_solution(r)) {
        r->objective = glp_mip_obj_val(P);
        r->bound = r->status == PCC_MIP_OPTIMAL || isnan(pr.bound) ? r->objective : fmin(pr.bound, r->objective);
        r->gap = r->objective > 0 ? (r->objective - r->bound) / r->objective : 0;
        r->x = arena_alloc(p->arena, sizeof(double) * (size_t)(p->n_cols + 1));
        for (int c = 0; c < p->n_cols; c++) r->x[c] = glp_mip_col_val(P, c + 1);
    }
    glp_delete_prob(P);
    glp_free_env();
    counts.solves++, counts.seconds += r->seconds;
}

// The program without row `skip` (-1: all of it), from the memo or GLPK.
static void solve_one(pcc_mip *p, const pcc_mip_opts *o, int skip, pcc_mip_result *r) {
    uint64_t h1, h2;
    program_key(p, o, skip, &h1, &h2);
    memo_entry *e = memo_find(h1, h2);
    if (e && e->n_cols == p->n_cols) {
        *r = e->r;
        r->seconds = 0, r->reused = true;
        if (e->r.x) {
            r->x = arena_alloc(p->arena, sizeof(double) * (size_t)(p->n_cols + 1));
            memcpy(r->x, e->r.x, sizeof(double) * (size_t)p->n_cols);
        }
        counts.reused++;
        return;
    }
    glpk_solve(p, o, skip, r);
    if (r->status == PCC_MIP_OPTIMAL || r->status == PCC_MIP_GAP || r->status == PCC_MIP_INFEASIBLE) memo_put(h1, h2, p->n_cols, r);
}

// Whether x satisfies row `row` (within rounding).
static bool row_holds(const pcc_mip *p, int row, const double *x) {
    double lhs = 0, rhs = p->row_rhs[row];
    for (int k = 1; k <= p->n_nz; k++)
        if (p->ia[k] == row + 1) lhs += p->ar[k] * x[p->ja[k] - 1];
    double tol = 1e-9 * (fabs(rhs) + 1);
    return p->row_sense[row] == PCC_MIP_LE ? lhs <= rhs + tol : p->row_sense[row] == PCC_MIP_GE ? lhs >= rhs - tol : fabs(lhs - rhs) <= tol;
}

pcc_status mip_solve(pcc_mip *p, const pcc_mip_opts *o, pcc_mip_result *r) {
    memset(r, 0, sizeof *r);
    r->rows = p->n_rows, r->cols = p->n_cols, r->nonzeros = p->n_nz;
    // GLPK aborts the process on a bad parameter: check them here.
    if (!(o->time_limit_s > 0) || o->time_limit_s > 1e6 || !(o->mip_gap >= 0) || o->mip_gap >= 1) {
        fprintf(stderr, "%s: bad ILP parameters: time limit %g s, MIP gap %g\n", pcc_progname, o->time_limit_s, o->mip_gap);
        return PCC_ERR_INPUT;
    }
    if (o->dump_lp) {
        glp_term_out(GLP_OFF);
        glp_prob *P = build(p, -1);
        int bad = glp_write_lp(P, NULL, o->dump_lp);
        glp_delete_prob(P);
        glp_free_env();
        if (bad) {
            fprintf(stderr, "%s: %s: cannot write the ILP\n", pcc_progname, o->dump_lp);
            return PCC_ERR_INPUT;
        }
    }
    // A solve shows on the driver's progress line; one called on its own (o->progress, as -d s
    // does before the driver has a line) starts a line of its own.
    bool own = o->progress && !line.on;
    if (own) progress_init(true), progress_phase("phase 2: the intra-operator ILP");
    // The program without its relaxable row first: when its optimum satisfies the row, it is the
    // optimum of the whole program too (a row only takes solutions away), and the same program
    // without the row serves every budget (the memo keeps it).
    bool done = false;
    if (p->relax_row >= 0) {
        pcc_mip_result r0;
        memset(&r0, 0, sizeof r0);
        solve_one(p, o, p->relax_row, &r0);
        bool holds = has_solution(&r0) && r0.status != PCC_MIP_TIME_LIMIT && row_holds(p, p->relax_row, r0.x);
        if (holds || r0.status == PCC_MIP_INFEASIBLE || o->relax_only) {
            *r = r0, r->relaxed = true, done = true;
            r->row_violated = !holds && has_solution(&r0);
        }
    }
    if (!done) solve_one(p, o, -1, r);
    r->rows = p->n_rows, r->cols = p->n_cols, r->nonzeros = p->n_nz;
    if (r->relaxed) counts.relaxed++;
    if (own) progress_done();
    return PCC_OK;
}

const char *mip_status_name(pcc_mip_status s) {
    static const char *const names[] = {"optimal", "within the MIP gap", "stopped by the time limit",
                                        "infeasible", "no solution within the time limit", "solver error"};
    return names[s];
}
