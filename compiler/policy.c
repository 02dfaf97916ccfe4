/*
 * policy.c: user policies (--policy FILE): nnScaler's op-trans and op-assign written down as
 * constraints that phase 2 completes.
 *
 * A policy (schemas/policy.schema.json, docs/policy.md) is a JSON object with three optional
 * parts:
 *   - "mesh": any of dp, tp, pp, micro_batches, zero, virtual_stages, recompute, schedule - the
 *     template's options. Pinned keys are fixed; absent ones are the command line's, or searched
 *     by --auto (bestfirst.c over search.c's configurations; policy_config_ok drops those that
 *     break a pin) when dp, tp and pp are not all known, or defaulted as the template does.
 *   - "stages": the number of layers (graph_layers: top-level operators and block copies) in
 *     each pipeline stage, in order (pp x virtual_stages entries): unequal stages.
 *   - "rules": each selects forward operators - "ops", a glob (fnmatch) over operator names;
 *     "params", a glob over the names of the parameters the operator reads; "type", the
 *     operator's name in runtime/ops.def - all given selectors must hold. An operator's name is
 *     the model's "name" for it, else the name of its first output, prefixed with "BLOCK." inside
 *     a repeated block ("layer.q"); imported models name operators and parameters as PyTorch did.
 *     For the operators it selects a rule pins "split" (the annotation letter split over the tp
 *     group, or "replicate"), "recompute" (true/false, block operators only: phase 3 recomputes
 *     inside blocks) and "stage" (top-level operators only: a block's operators share their
 *     copy's stage, which "stages" gives; "all" interlaces the operator: on every stage, its
 *     split over pp x tp, check_interlaced). The first rule that selects an operator holds it;
 *     later rules do not add to it (a firewall's order, so a specific rule goes before a
 *     general one), and a rule that holds no operator is refused (a typo would otherwise pass).
 *
 * How the pins act (search.c's hooks, kept small): tp_candidates drops the candidates a split or
 * recompute pin refuses (policy_keeps, policy_recompute; a split of the batch letter is allowed
 * for that operator even where the batch is dp's; a recompute pin on an operator phase 1 offers
 * no recompute of is refused, since phase 3 would not keep the inputs its recompute reads, and so
 * is a recompute:false pin where the mesh recomputes every block operator, for the same reason);
 * make() takes the recompute pin over the mesh's --recompute and cuts stages with policy_stages; space_enumerate drops --auto's configurations
 * that break a mesh pin, a division or the stages (policy_config_ok). Everything the policy
 * leaves open the ILP chooses as always; phase 3, the memory planner and plan_check run as
 * always. With a group of one device (tp 1) a split pin has nothing to split and holds trivially.
 *
 * Errors: policy_read refuses what is not a policy (unknown keys, wrong types, ranges, a mesh
 * key the command line gives otherwise), policy_resolve what does not fit the model (a rule
 * that selects nothing, a letter the operator lacks or may not split, recompute or stage on the
 * wrong kind of operator, contradictory stage pins) and, with the template's mesh, what does
 * not fit the mesh (a split that does not divide, a stage out of range, stage counts that do
 * not add up): "plancc: FILE:/pointer: message", exit 2. A policy that leaves no feasible plan
 * ends in exit 3, the driver naming the policy. Order constraints (op-order) are not part of a
 * policy: plancc's schedule is a pipeline template (pipeline.c) over contiguous stages, with no
 * per-operator order to constrain.
 */
#include "plancc.h"
#include "policy.h"

#include <fnmatch.h>
#include <string.h>

#define POLICY_MAX_BYTES ((size_t)1 << 20)
#define POLICY_MAX_RULES 4096

static const char *const mesh_keys[PCC_POL_KEYS] = {"dp", "tp", "pp", "micro_batches", "zero", "virtual_stages", "recompute",
                                                    "schedule", "tp2"};

/* ---- reading ---- */

// A mesh value: an integer in its range, or recompute's and schedule's words.
static pcc_status read_mesh_value(pcc_jreader *r, const pcc_json *v, const char *ptr, int key, int *out) {
    static const char *const rc[] = {"none", "full", "auto"};
    if (key == PCC_POL_RC || key == PCC_POL_SCHED) {
        const char *s;
        pcc_status st = json_str(r, v, ptr, &s);
        if (st) return st;
        for (int i = 0; key == PCC_POL_RC && i < 3; i++)
            if (!strcmp(s, rc[i])) return *out = i, PCC_OK;
        if (key == PCC_POL_SCHED && !strcmp(s, "gpipe")) return *out = PCC_PIPE_GPIPE, PCC_OK;
        if (key == PCC_POL_SCHED && !strcmp(s, "1f1b")) return *out = PCC_PIPE_1F1B, PCC_OK;
        return diag(r->file, ptr, key == PCC_POL_RC ? "recompute is none, full or auto, got \"%s\"" : "schedule is gpipe or 1f1b, got \"%s\"", s);
    }
    int64_t x;
    pcc_status st = json_int(r, v, ptr, key == PCC_POL_ZERO ? 0 : key == PCC_POL_TQ ? 2 : 1, key == PCC_POL_ZERO ? 3 : 1 << 24, &x);
    *out = (int)x;
    return st;
}

static pcc_status read_mesh(pcc_jreader *r, const pcc_json *m, pcc_policy *p) {
    static const char *const keys[] = {"dp", "tp", "pp", "micro_batches", "zero", "virtual_stages", "recompute", "schedule", "tp2", NULL};
    pcc_status st = json_expect(r, m, "/mesh", PCC_J_OBJECT);
    if (!st) st = json_keys(r, m, "/mesh", keys, NULL);
    for (int k = 0; k < PCC_POL_KEYS && !st; k++) {
        const pcc_json *v = json_get(m, mesh_keys[k]);
        if (!v) continue;
        p->mesh_ptr[k] = json_ptr_key(r, "/mesh", mesh_keys[k]);
        st = read_mesh_value(r, v, p->mesh_ptr[k], k, &p->mesh[k]);
    }
    return st;
}

static pcc_status read_stages(pcc_jreader *r, const pcc_json *v, pcc_policy *p) {
    p->stages_ptr = "/stages";
    pcc_status st = json_expect(r, v, "/stages", PCC_J_ARRAY);
    if (st) return st;
    p->n_stages = json_size(v);
    if (p->n_stages == 0) return diag(r->file, "/stages", "gives no stage: leave it out, or give each stage's layer count");
    p->stages = arena_alloc(r->arena, sizeof(int) * (size_t)p->n_stages);
    for (int i = 0; i < p->n_stages && !st; i++) {
        int64_t x;
        st = json_int(r, json_at(v, i), json_ptr_idx(r, "/stages", i), 1, 1 << 24, &x);
        p->stages[i] = (int)x;
    }
    return st;
}

// A glob selector: a non-empty string.
static pcc_status read_glob(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out) {
    pcc_status st = json_str(r, v, ptr, out);
    if (!st && !**out) return diag(r->file, ptr, "an empty pattern selects nothing");
    return st;
}

static pcc_status read_rule_pins(pcc_jreader *r, const pcc_json *v, const char *ptr, pcc_policy_rule *u) {
    const pcc_json *x;
    pcc_status st = PCC_OK;
    if ((x = json_get(v, "split"))) {
        u->split_ptr = json_ptr_key(r, ptr, "split");
        st = json_str(r, x, u->split_ptr, &u->split);
        if (!st && !*u->split) return diag(r->file, u->split_ptr, "names no letter (\"replicate\" keeps the operator whole)");
        if (!st && !strcmp(u->split, "replicate")) u->split = "";
    }
    if (!st && (x = json_get(v, "split2"))) {
        u->split2_ptr = json_ptr_key(r, ptr, "split2");
        st = json_str(r, x, u->split2_ptr, &u->split2);
        if (!st && (!*u->split2 || !u->split || !*u->split))
            return diag(r->file, u->split2_ptr, "names the letter over a 2-D tp group's second axis (--tp2): it wants a letter, "
                        "and \"split\" the letter over the first");
    }
    if (!st && (x = json_get(v, "recompute"))) {
        bool b = false;
        u->recompute_ptr = json_ptr_key(r, ptr, "recompute");
        st = json_bool(r, x, u->recompute_ptr, &b);
        u->recompute = b;
    }
    if (!st && (x = json_get(v, "stage"))) {
        int64_t s;
        const char *all;
        u->stage_ptr = json_ptr_key(r, ptr, "stage");
        if (json_type(x) == PCC_J_STRING) {
            if (!(st = json_str(r, x, u->stage_ptr, &all)) && strcmp(all, "all"))
                return diag(r->file, u->stage_ptr, "is \"%s\": a stage is a number, or \"all\" (interlaced: on every stage)", all);
            u->all_stages = true;
        } else {
            st = json_int(r, x, u->stage_ptr, 0, 1 << 24, &s);
            u->stage = (int)s;
        }
    }
    if (!st && (x = json_get(v, "coshard"))) {
        int64_t k;
        u->coshard_ptr = json_ptr_key(r, ptr, "coshard");
        st = json_int(r, x, u->coshard_ptr, 2, 1024, &k);
        u->coshard = (int)k;
    }
    if (!st && (x = json_get(v, "coshard_letter"))) {
        const char *lp = json_ptr_key(r, ptr, "coshard_letter");
        st = json_str(r, x, lp, &u->coshard_letter);
        if (!st && !*u->coshard_letter) return diag(r->file, lp, "names no letter");
        if (!st && !u->coshard) return diag(r->file, lp, "gives a letter but no \"coshard\" ways");
    }
    return st;
}

static pcc_status read_rule(pcc_jreader *r, const pcc_json *v, const char *ptr, pcc_policy_rule *u) {
    static const char *const keys[] = {"ops", "params", "type", "split", "split2", "recompute", "stage", "coshard", "coshard_letter", "note", NULL};
    *u = (pcc_policy_rule){.ptr = ptr, .kind = -1, .recompute = -1, .stage = -1};
    pcc_status st = json_expect(r, v, ptr, PCC_J_OBJECT);
    if (!st) st = json_keys(r, v, ptr, keys, NULL);
    const pcc_json *x;
    const char *note;
    if (!st && (x = json_get(v, "note"))) st = json_str(r, x, json_ptr_key(r, ptr, "note"), &note);
    if (!st && (x = json_get(v, "ops"))) st = read_glob(r, x, json_ptr_key(r, ptr, "ops"), &u->ops);
    if (!st && (x = json_get(v, "params"))) st = read_glob(r, x, json_ptr_key(r, ptr, "params"), &u->params);
    if (!st && (x = json_get(v, "type"))) {
        const char *tp = json_ptr_key(r, ptr, "type"), *name;
        if (!(st = json_str(r, x, tp, &name)) && (u->kind = op_lookup(name)) < 0)
            return diag(r->file, tp, "unknown operator type \"%s\" (runtime/ops.def names them)", name);
    }
    if (!st) st = read_rule_pins(r, v, ptr, u);
    if (st) return st;
    if (!u->ops && !u->params && u->kind < 0)
        return diag(r->file, ptr, "selects no operator: give \"ops\" (a name pattern), \"params\" or \"type\"");
    if (!u->split && u->recompute < 0 && u->stage < 0 && !u->all_stages && !u->coshard)
        return diag(r->file, ptr, "pins nothing: give \"split\", \"recompute\", \"stage\" or \"coshard\"");
    return PCC_OK;
}

static pcc_status read_root(pcc_jreader *r, const pcc_json *root, pcc_policy *p) {
    static const char *const keys[] = {"version", "description", "mesh", "stages", "rules", NULL};
    static const char *const req[] = {"version", NULL};
    pcc_status st = json_expect(r, root, "", PCC_J_OBJECT);
    if (!st) st = json_keys(r, root, "", keys, req);
    int64_t ver;
    const char *text;
    if (!st) st = json_int(r, json_get(root, "version"), "/version", 1, 1, &ver);
    if (!st && json_get(root, "description")) st = json_str(r, json_get(root, "description"), "/description", &text);
    if (!st && json_get(root, "mesh")) st = read_mesh(r, json_get(root, "mesh"), p);
    if (!st && json_get(root, "stages")) st = read_stages(r, json_get(root, "stages"), p);
    const pcc_json *rules = json_get(root, "rules");
    if (st || !rules) return st;
    if ((st = json_expect(r, rules, "/rules", PCC_J_ARRAY))) return st;
    p->n_rules = json_size(rules);
    if (p->n_rules > POLICY_MAX_RULES) return diag(r->file, "/rules", "has %d rules, at most %d", p->n_rules, POLICY_MAX_RULES);
    p->rules = arena_alloc(r->arena, sizeof(pcc_policy_rule) * (size_t)(p->n_rules + 1));
    for (int i = 0; i < p->n_rules && !st; i++) {
        st = read_rule(r, json_at(rules, i), json_ptr_idx(r, "/rules", i), &p->rules[i]);
        p->pins_stage |= !st && p->rules[i].stage >= 0;
        p->coshards |= !st && p->rules[i].coshard > 0;
        p->interlaces |= !st && p->rules[i].all_stages;
    }
    return st;
}

/* ---- the mesh onto the options ---- */

// The command line's value of mesh key k, or -1 when it leaves it to the defaults.
static int given(const pcc_options *o, int k) {
    const pcc_search_opts *s = &o->search;
    switch (k) {
    case PCC_POL_DP: return s->dp ? s->dp : -1;
    case PCC_POL_TP: return s->tp ? s->tp : -1;
    case PCC_POL_PP: return s->pp ? s->pp : -1;
    case PCC_POL_MB: return o->batch.micro_batches_given ? o->batch.micro_batches : -1;
    case PCC_POL_ZERO: return s->zero ? s->zero : -1;
    case PCC_POL_VS: return s->virtual_stages ? s->virtual_stages : -1;
    case PCC_POL_RC: return s->recompute != PCC_RECOMPUTE_AUTO ? (int)s->recompute : -1;
    case PCC_POL_TQ: return s->tq > 1 ? s->tq : -1;
    default: return s->schedule ? (int)s->schedule : -1;
    }
}

static void set(pcc_options *o, int k, int v) {
    pcc_search_opts *s = &o->search;
    switch (k) {
    case PCC_POL_DP: s->dp = v; break;
    case PCC_POL_TP: s->tp = v; break;
    case PCC_POL_PP: s->pp = v; break;
    case PCC_POL_MB: o->batch.micro_batches = v, o->batch.micro_batches_given = true; break;
    case PCC_POL_ZERO: s->zero = v; break;
    case PCC_POL_VS: s->virtual_stages = v; break;
    case PCC_POL_RC: s->recompute = (pcc_recompute)v; break;
    case PCC_POL_TQ: s->tq = v; break;
    default: s->schedule = (pcc_pipe_sched)v; break;
    }
}

// The mesh's pins onto the options: a key the command line gives must agree. With dp, tp and pp
// all known the compile is the template's; else --auto searches what is open (the pinned
// dp and tp stay in the policy, for policy_config_ok; --auto reads pp from the options).
static pcc_status apply_mesh(pcc_policy *p, pcc_options *o) {
    for (int k = 0; k < PCC_POL_KEYS; k++) {
        if (p->mesh[k] < 0) continue;
        int g = given(o, k);
        if (g >= 0 && g != p->mesh[k])
            return diag(p->file, p->mesh_ptr[k], "pins %s, but the command line (or --config) gives another value: leave one out",
                        mesh_keys[k]);
        set(o, k, p->mesh[k]);
    }
    bool known = o->search.dp && o->search.tp && o->search.pp;
    if (known && o->search.auto_mesh) o->search.auto_mesh = false;
    if (p->mesh[PCC_POL_TQ] > 1 && (!known || o->search.tp % o->search.tq || o->search.tp < 2 * o->search.tq))
        return diag(p->file, p->mesh_ptr[PCC_POL_TQ], "cuts the tp group into tp/%d x %d: it wants dp, tp and pp known (a template), "
                    "tp a multiple of %d, at least %d", o->search.tq, o->search.tq, o->search.tq, 2 * o->search.tq);
    if (o->search.sequence_parallel && (!known || o->search.tp < 2))
        return diag(p->file, "/mesh", "with --sequence-parallel, which splits the norms, residual adds and dropout along the sequence "
                    "over the tp group, wants dp, tp and pp known (a template) and tp 2 or more");
    if (o->search.auto_mesh) o->search.dp = o->search.tp = 0;
    o->batch.dp = o->search.dp;
    return PCC_OK;
}

pcc_status policy_read(pcc_arena *a, pcc_options *o) {
    if (!o->policy) return PCC_OK;
    if (o->burst || o->check) {
        fprintf(stderr, "plancc: --policy pins phase 2's choices: it does not go with %s\n", o->burst ? "--burst (a phase 2 of its own)"
                                                                                              : "--check (no plan)");
        return PCC_ERR_INPUT;
    }
    char *text;
    size_t len;
    pcc_status st = file_read_all(a, o->policy, &text, &len, POLICY_MAX_BYTES);
    if (st) return st;
    pcc_policy *p = arena_alloc(a, sizeof *p);
    p->file = arena_strdup(a, o->policy);
    for (int k = 0; k < PCC_POL_KEYS; k++) p->mesh[k] = -1;
    char err[256];
    if (plan_file_hash(o->policy, &p->hash, err, sizeof err)) p->hash = 0;
    pcc_jreader r;
    pcc_json *root;
    if ((st = json_open(&r, a, p->file, text, len, &root))) return st;
    st = read_root(&r, root, p);
    json_close(&r);
    if (!st) st = apply_mesh(p, o);
    if (!st) o->search.policy = p;
    return st;
}

const char *policy_option(pcc_arena *a, const pcc_policy *p) {
    return p ? arena_printf(a, " --policy %016llx", (unsigned long long)p->hash) : "";
}

/* ---- the rules against the model ---- */

// Op's name for the rules: the model's "name", else its first output's, "BLOCK." inside a block.
static const char *op_name(pcc_arena *a, const pcc_graph *g, const pcc_op *op) {
    const char *base = op->label ? op->label : op->nout ? g->tensors[op->out[0]].name : pcc_ops[op->kind].name;
    return op->block >= 0 ? arena_printf(a, "%s.%s", g->blocks[op->block].name, base) : base;
}

static bool selects(pcc_arena *a, const pcc_graph *g, const pcc_policy_rule *u, const pcc_op *op) {
    if (u->kind >= 0 && (int)op->kind != u->kind) return false;
    if (u->ops && fnmatch(u->ops, op_name(a, g, op), 0) != 0) return false;
    if (!u->params) return true;
    for (int i = 0; i < op->nin; i++) {
        const pcc_tensor *t = &g->tensors[op->in[i]];
        if (t->kind == PCC_T_PARAM && fnmatch(u->params, t->name, 0) == 0) return true;
    }
    return false;
}

// The letters of op, "b, s, h" into buf (for the messages).
static const char *letters_str(const pcc_letter *l, int n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k + 24 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s%s", i ? ", " : "", l[i].name, l[i].nosplit ? " (unsplittable)" : "");
    return buf;
}

// The dimension op's letter `name` binds, -1 if none.
static int letter_dim(const pcc_graph *g, const pcc_op *op, const char *name) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++)
        if (!strcmp(l[i].name, name)) return l[i].dim;
    return -1;
}

// The letter of op a split pin (split, at ptr) names, or a diagnostic.
static pcc_status check_split(const pcc_policy *p, const pcc_graph *g, const char *split, const char *ptr, const pcc_op *op,
                              const char *name) {
    if (!split || !*split) return PCC_OK;
    pcc_letter l[PCC_MAX_LETTERS];
    char buf[512];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++) {
        if (strcmp(l[i].name, split)) continue;
        if (l[i].nosplit || l[i].dim < 0)
            return diag(p->file, ptr, "operator %s (%s, %s:%s) may not split its letter \"%s\" (its annotation marks it)",
                        name, pcc_ops[op->kind].name, g->file, op->ptr, split);
        return PCC_OK;
    }
    return diag(p->file, ptr, "operator %s (%s, %s:%s) has no letter \"%s\"; its letters: %s", name, pcc_ops[op->kind].name,
                g->file, op->ptr, split, letters_str(l, n, buf, sizeof buf));
}

// Rule u on op (it holds it): its pins against what the op is.
static pcc_status check_pins(const pcc_policy *p, const pcc_graph *g, const pcc_policy_rule *u, const pcc_op *op, const char *name) {
    pcc_status st = check_split(p, g, u->split, u->split_ptr, op, name);
    if (!st) st = check_split(p, g, u->split2, u->split2_ptr, op, name);
    if (st) return st;
    int d1 = u->split2 ? letter_dim(g, op, u->split) : -1;
    if (d1 >= 0 && d1 == letter_dim(g, op, u->split2))
        return diag(p->file, u->split2_ptr, "operator %s (%s:%s): letters \"%s\" and \"%s\" are one dimension, %s; a split over "
                    "two axes cuts two dimensions (one letter over both axes: leave split2 out)", name, g->file, op->ptr, u->split,
                    u->split2, g->dims[d1].name);
    if (u->recompute == 1 && op->block < 0)
        return diag(p->file, u->recompute_ptr, "operator %s (%s:%s) is outside the repeated blocks, and phase 3 recomputes inside "
                    "blocks only", name, g->file, op->ptr);
    if (u->stage >= 0 && op->block >= 0)
        return diag(p->file, u->stage_ptr, "operator %s (%s:%s) is inside repeated block \"%s\", whose copies are layers of their "
                    "own: give the stages' layer counts in /stages", name, g->file, op->ptr, g->blocks[op->block].name);
    if (u->all_stages && op->block >= 0)
        return diag(p->file, u->stage_ptr, "operator %s (%s:%s) is inside repeated block \"%s\": only a top-level operator runs on "
                    "every stage (interlaced)", name, g->file, op->ptr, g->blocks[op->block].name);
    return PCC_OK;
}

// Stage pins of the top-level operators, in layer order, must not go back (stages are
// contiguous runs of layers in order; pipeline.c's schedules assume so).
static pcc_status check_stage_order(const pcc_policy *p, const pcc_layer *L, int nl) {
    int last = -1;
    const char *last_ptr = NULL;
    for (int i = 0; i < nl; i++) {
        int r = L[i].op >= 0 ? p->rule[L[i].op] : -1;
        if (r < 0 || p->rules[r].stage < 0) continue;
        if (p->rules[r].stage < last)
            return diag(p->file, p->rules[r].stage_ptr, "pins stage %d after a layer that %s pins to stage %d: stages are "
                        "contiguous runs of layers in order, so these pins contradict each other", p->rules[r].stage, last_ptr, last);
        last = p->rules[r].stage, last_ptr = p->rules[r].stage_ptr;
    }
    return PCC_OK;
}

// The stages' layers under /stages: chunk of each layer into out (nl of them).
static void stages_given(const pcc_policy *p, int nl, int *out) {
    int s = 0, left = p->stages[0];
    for (int i = 0; i < nl; i++) {
        while (left == 0 && s + 1 < p->n_stages) left = p->stages[++s];
        out[i] = s, left--;
    }
}

// /stages against the layers and a pipeline of `chunks` stages (pp x virtual stages); 0 chunks:
// the layers only. Also the top-level stage pins against it.
static pcc_status check_stages(const pcc_policy *p, const pcc_graph *g, const pcc_layer *L, int nl, int chunks) {
    if (p->stages) {
        int sum = 0;
        for (int i = 0; i < p->n_stages; i++) sum += p->stages[i];
        if (sum != nl)
            return diag(p->file, p->stages_ptr, "holds %d layers, but %s has %d (top-level operators and block copies, in order)",
                        sum, g->file, nl);
        if (chunks && p->n_stages != chunks)
            return diag(p->file, p->stages_ptr, "gives %d stages, but the mesh has %d (pp x virtual stages)", p->n_stages, chunks);
    }
    int *given = p->stages ? arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1)) : NULL;
    if (given) stages_given(p, nl, given);
    for (int i = 0; i < nl; i++) {
        int r = L[i].op >= 0 ? p->rule[L[i].op] : -1;
        if (r < 0 || p->rules[r].stage < 0) continue;
        const pcc_policy_rule *u = &p->rules[r];
        if (chunks && u->stage >= chunks)
            return diag(p->file, u->stage_ptr, "stage %d is out of range: the mesh has %d stages (pp x virtual stages), 0 to %d",
                        u->stage, chunks, chunks - 1);
        if (given && given[i] != u->stage)
            return diag(p->file, u->stage_ptr, "pins stage %d, but /stages puts that layer (layer %d) in stage %d: the pins "
                        "contradict each other", u->stage, i, given[i]);
    }
    // Interlaced operators run on every stage, apart from the passes: each stage needs a layer of
    // its own besides them (layout.c's interlace).
    for (int k = 0; given && p->interlaces && k < p->n_stages; k++) {
        bool own = false;
        for (int i = 0; i < nl && !own; i++) own = given[i] == k && (L[i].op < 0 || !policy_interlaced(p, L[i].op));
        if (!own)
            return diag(p->file, arena_printf(g->arena, "%s/%d", p->stages_ptr, k), "gives stage %d only interlaced operators "
                        "(\"stage\": \"all\"), which run apart from the pipeline's passes: every stage needs a layer of its own", k);
    }
    return PCC_OK;
}

// Whether op's pinned split (rule u) leaves whole pieces over tp devices (the batch letter over
// dp x tp: dp splits it too).
static bool split_divides(const pcc_graph *g, const pcc_op *op, const pcc_policy_rule *u, int dp, int tp, int pp, int bdim) {
    if (u->all_stages && pp > 1) tp *= pp; // interlaced: its letter over pp x tp
    if (!u->split || !*u->split || tp <= 1) return true;
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++) {
        if (strcmp(l[i].name, u->split) || l[i].dim < 0) continue;
        int64_t ways = (int64_t)tp * (l[i].dim == bdim && dp > 1 ? dp : 1);
        return g->dims[l[i].dim].size % (ways * l[i].grain) == 0;
    }
    return true;
}

// The template's mesh against the pins: every split divides, the stages fit pp x V.
static pcc_status check_template(const pcc_policy *p, const pcc_graph *g, const pcc_search_opts *o, const pcc_layer *L, int nl) {
    int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1, bdim = graph_batch_dim(g);
    int chunks = pp * (pp > 1 && o->virtual_stages > 1 ? o->virtual_stages : 1);
    for (int i = 0; i < g->n_fwd_ops; i++) {
        const pcc_policy_rule *u = p->rule[i] >= 0 ? &p->rules[p->rule[i]] : NULL;
        if (u && u->split2 && o->tq <= 1)
            return diag(p->file, u->split2_ptr, "splits a second letter over a 2-D tp group's second axis: it needs --tp2");
        if (u && !u->split2 && !split_divides(g, &g->ops[i], u, dp, tp, pp, bdim))
            return diag(p->file, u->split_ptr ? u->split_ptr : u->stage_ptr, "operator %s (%s:%s): %s %d%s does not divide letter \"%s\" into whole pieces",
                        op_name(g->arena, g, &g->ops[i]), g->file, g->ops[i].ptr, u->all_stages && pp > 1 ? "pp x tp" : "tp",
                        u->all_stages && pp > 1 ? pp * tp : tp, dp > 1 ? " (x dp, on the batch)" : "", u->split);
    }
    pcc_status st = check_stages(p, g, L, nl, chunks);
    if (st) return st;
    int *chunk = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    double *w = arena_alloc(g->arena, sizeof(double) * (size_t)(nl + 1));
    if (p->pins_stage && policy_stages(p, L, w, nl, chunks, chunk) < 0)
        return diag(p->file, "/rules", "the stage pins leave a stage of the %d without a layer: every stage needs one", chunks);
    return PCC_OK;
}

// Interlaced operators ("stage": "all"; layout.c's interlace) run in phases around the pipeline's passes:
// before the forward passes (reading only inputs, parameters and one another), between them and
// the backward passes (reading a stage's forward output too), and their backward after. The mesh
// options they go with, the parameters they share with a stage's operators (none), and the order
// of those phases against the stages' forward passes (a stage may not read what an interlaced
// operator makes from a stage's output).
static pcc_status check_interlaced(const pcc_policy *p, const pcc_graph *g, const pcc_search_opts *o) {
    if (!p->interlaces) return PCC_OK;
    const pcc_policy_rule *first = NULL;
    for (int r = 0; r < p->n_rules && !first; r++)
        if (p->rules[r].all_stages) first = &p->rules[r];
    const char *mesh = o->virtual_stages > 1 ? "no interleaving (virtual_stages 1)" : o->cp > 1 ? "no context parallelism (--cp)"
                     : o->tq > 1 ? "one tp axis (no tp2)" : o->bg_dense ? "the all-reduce in the step (no --sync background)" : NULL;
    if (mesh)
        return diag(p->file, first->stage_ptr, "interlaces an operator (on every stage, in phases around the pipeline's passes), which "
                    "plancc plans with %s", mesh);
    int nl, staged = 0;
    const pcc_layer *L = graph_layers(g, &nl);
    for (int l = 0; l < nl; l++) staged += L[l].op < 0 || !policy_interlaced(p, L[l].op);
    if (o->pp > staged)
        return diag(p->file, first->stage_ptr, "interlaces operators that leave %d layers of %s to the pipeline's %d stages: every "
                    "stage needs one (fewer stages)", staged, g->file, o->pp);
    int8_t *il = arena_alloc(g->arena, (size_t)(g->n_tensors + 1)); // per param: its first reader 1 staged, 2 interlaced
    int *by = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1)), *tm = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int i = 0; i < g->n_fwd_ops; i++) {
        const pcc_op *op = &g->ops[i];
        bool x = policy_interlaced(p, i);
        int m = 0;
        if (op->block >= 0 && i == g->blocks[op->block].first_op) { // a block reads its bindings
            const pcc_block *bl = &g->blocks[op->block];
            for (int k = 0; k < bl->n_in; k++) {
                int t = bl->in[k].outer, pr = g->tensors[t].producer;
                if (tm[t] == 3)
                    return diag(p->file, pr >= 0 && p->rule[pr] >= 0 ? p->rules[p->rule[pr]].stage_ptr : first->stage_ptr,
                                "interlaces operator %s (%s:%s), which reads a stage's output and so runs after the stages' forward "
                                "passes, but repeated block \"%s\" reads what it makes (\"%s\")", pr >= 0 ? op_name(g->arena, g, &g->ops[pr]) : "?",
                                g->file, pr >= 0 ? g->ops[pr].ptr : "?", bl->name, g->tensors[t].name);
            }
            for (int k = 0; k < bl->n_out; k++) tm[bl->out[k].outer] = 2; // made by a stage
            for (int k = 0; k < bl->n_acc; k++) tm[bl->acc[k].outer] = 2;
        }
        for (int k = 0; k < op->nin; k++) {
            int t = op->in[k];
            if (g->tensors[t].kind == PCC_T_PARAM) {
                if (!il[t]) il[t] = x ? 2 : 1, by[t] = i;
                if (il[t] != (x ? 2 : 1)) {
                    int j = x ? by[t] : i, xi = x ? i : by[t];
                    return diag(p->file, p->rules[p->rule[xi]].stage_ptr, "interlaces operator %s (%s:%s), which reads parameter \"%s\", "
                                "as does operator %s (%s:%s) of a stage: a parameter lives on every stage (interlaced) or on one; "
                                "interlace both, or neither", op_name(g->arena, g, &g->ops[xi]), g->file, g->ops[xi].ptr,
                                g->tensors[t].name, op_name(g->arena, g, &g->ops[j]), g->file, g->ops[j].ptr);
                }
            }
            if (tm[t] > m) m = tm[t];
            if (!x && tm[t] == 3) {
                int pr = g->tensors[t].producer;
                return diag(p->file, pr >= 0 && p->rule[pr] >= 0 ? p->rules[p->rule[pr]].stage_ptr : first->stage_ptr,
                            "interlaces operator %s (%s:%s), which reads a stage's output and so runs after the stages' forward "
                            "passes, but operator %s (%s:%s) of a stage reads what it makes (\"%s\"): interlace that one too",
                            pr >= 0 ? op_name(g->arena, g, &g->ops[pr]) : "?", g->file, pr >= 0 ? g->ops[pr].ptr : "?",
                            op_name(g->arena, g, op), g->file, op->ptr, g->tensors[t].name);
            }
        }
        int clock = x ? (m <= 1 ? 1 : 3) : 2; // 1: before the forward passes, 2: a stage's, 3: after them
        for (int k = 0; k < op->nout; k++) tm[op->out[k]] = clock;
    }
    return PCC_OK;
}

pcc_status policy_resolve(const pcc_options *opt, const pcc_graph *g) {
    pcc_policy *p = (pcc_policy *)opt->search.policy; // policy.c's own: binding the rules is part of reading it
    const pcc_search_opts *o = &opt->search;
    if (!p) return PCC_OK;
    int nl;
    const pcc_layer *L = graph_layers(g, &nl);
    p->rule = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_fwd_ops + 1));
    for (int i = 0; i < g->n_fwd_ops; i++) {
        p->rule[i] = -1;
        for (int r = 0; r < p->n_rules && p->rule[i] < 0; r++)
            if (selects(g->arena, g, &p->rules[r], &g->ops[i])) p->rule[i] = r, p->rules[r].matched++;
        if (p->rule[i] < 0) continue;
        pcc_status st = check_pins(p, g, &p->rules[p->rule[i]], &g->ops[i], op_name(g->arena, g, &g->ops[i]));
        if (st) return st;
    }
    for (int r = 0; r < p->n_rules; r++)
        if (!p->rules[r].matched)
            return diag(p->file, p->rules[r].ptr, "selects no operator of %s%s", g->file,
                        r > 0 ? " (or only operators an earlier rule holds: the first rule that selects an operator holds it)" : "");
    pcc_status st = check_stage_order(p, L, nl);
    if (!st) st = check_interlaced(p, g, o);
    if (!st) st = check_stages(p, g, L, nl, 0);
    if (!st && !o->auto_mesh) st = check_template(p, g, o, L, nl);
    return st;
}

int policy_coshard(const pcc_policy *p, const pcc_graph *g, const pcc_op *op, const char **letter, const char **ptr) {
    for (int r = 0; p && r < p->n_rules; r++) {
        if (!selects(g->arena, g, &p->rules[r], op)) continue;
        *letter = p->rules[r].coshard_letter, *ptr = p->rules[r].coshard_ptr;
        return p->rules[r].coshard;
    }
    return 0;
}

/* ---- the pins, for the search ---- */

bool policy_keeps(const pcc_policy *p, int op, const pcc_cand *cd, int tp) {
    if (!p || p->rule[op] < 0 || tp <= 1) return true;
    const pcc_policy_rule *u = &p->rules[p->rule[op]];
    if (!u->split) return true;
    if (u->split2) return cd->dim2 >= 0 && !strcmp(cd->letter, u->split) && !strcmp(cd->letter2, u->split2);
    return *u->split ? cd->dim >= 0 && cd->dim2 < 0 && !strcmp(cd->letter, u->split) : cd->dim < 0;
}

int policy_recompute(const pcc_policy *p, int op) { return p && p->rule[op] >= 0 ? p->rules[p->rule[op]].recompute : -1; }

bool policy_interlaced(const pcc_policy *p, int op) { return p && p->rule[op] >= 0 && p->rules[p->rule[op]].all_stages; }

const char *policy_split_letter(const pcc_policy *p, int op) {
    const char *l = p && p->rule[op] >= 0 ? p->rules[p->rule[op]].split : NULL;
    return l && *l ? l : NULL;
}

bool policy_splits(const pcc_policy *p, int op, const char *bname) {
    const pcc_policy_rule *u = p && p->rule[op] >= 0 ? &p->rules[p->rule[op]] : NULL;
    return u && ((u->split && !strcmp(u->split, bname)) || (u->split2 && !strcmp(u->split2, bname)));
}

// The balanced cut of n layers (weights w) into K stages that keeps pinned layers (pin >= 0) in
// their stage: a dynamic program over (stage, last layer) for the smallest largest stage. False
// when none exists.
static bool cut_pinned(pcc_arena *a, const int *pin, const double *w, int n, int K, int *chunk) {
    size_t cells = (size_t)K * (size_t)(n + 1);
    double *f = arena_alloc(a, sizeof(double) * cells), *pre = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
    int *from = arena_alloc(a, sizeof(int) * cells);
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + w[i] + 1; // a layer of 0 FLOPs still counts a little
    for (size_t c = 0; c < cells; c++) f[c] = -1;                // -1: no cut
    for (int s = 0; s < K; s++)
        for (int i = s + 1; i <= n; i++)
            for (int j = i - 1; j >= s; j--) { // stage s holds layers j .. i-1
                if (pin[j] >= 0 && pin[j] != s) break;
                double prev = s == 0 ? (j == 0 ? 0 : -1) : f[(size_t)(s - 1) * (size_t)(n + 1) + (size_t)j];
                if (prev < 0) continue;
                double m = pre[i] - pre[j] > prev ? pre[i] - pre[j] : prev;
                double *cell = &f[(size_t)s * (size_t)(n + 1) + (size_t)i];
                if (*cell < 0 || m < *cell) *cell = m, from[(size_t)s * (size_t)(n + 1) + (size_t)i] = j;
            }
    if (f[(size_t)(K - 1) * (size_t)(n + 1) + (size_t)n] < 0) return false;
    for (int s = K - 1, i = n; s >= 0; s--) {
        int j = from[(size_t)s * (size_t)(n + 1) + (size_t)i];
        for (int l = j; l < i; l++) chunk[l] = s;
        i = j;
    }
    return true;
}

int policy_stages(const pcc_policy *p, const pcc_layer *L, const double *flops, int nl, int chunks, int *chunk) {
    if (!p || (!p->stages && !p->pins_stage)) return 0;
    if (p->stages) {
        if (p->n_stages != chunks) return -1;
        stages_given(p, nl, chunk);
        return 1;
    }
    pcc_arena *a = arena_init(); // scratch: --auto cuts many configurations
    int *pin = arena_alloc(a, sizeof(int) * (size_t)(nl + 1));
    for (int i = 0; i < nl; i++) {
        int r = L[i].op >= 0 ? p->rule[L[i].op] : -1;
        pin[i] = r >= 0 ? p->rules[r].stage : -1;
        if (pin[i] >= chunks) pin[i] = -2; // out of range: no cut
    }
    bool ok = true;
    for (int i = 0; i < nl; i++) ok &= pin[i] != -2;
    ok = ok && cut_pinned(a, pin, flops, nl, chunks, chunk);
    arena_free(a);
    return ok ? 1 : -1;
}

bool policy_config_ok(const pcc_policy *p, const pcc_graph *g, const pcc_config *k, const pcc_layer *L, const double *flops, int nl) {
    if (!p) return true;
    int pins[PCC_POL_KEYS] = {k->dp, k->tp, k->pp, -1, k->zero, k->v, (int)k->rc, -1, k->tq > 1 ? k->tq : -1};
    for (int i = 0; i < PCC_POL_KEYS; i++)
        if (p->mesh[i] >= 0 && pins[i] >= 0 && p->mesh[i] != pins[i]) return false;
    if (p->interlaces && (k->v > 1 || k->cp > 1 || k->tq > 1)) return false; // check_interlaced's mesh
    int bdim = graph_batch_dim(g);
    for (int i = 0; i < g->n_fwd_ops; i++)
        if (p->rule[i] >= 0 && !split_divides(g, &g->ops[i], &p->rules[p->rule[i]], k->dp, k->tp, k->pp, bdim)) return false;
    int *chunk = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    return policy_stages(p, L, flops, nl, k->pp * k->v, chunk) >= 0;
}

pcc_status policy_bare(const pcc_policy *p, const pcc_graph *g, const pcc_op_cands *oc, bool full, bool quiet) {
    if (quiet) return PCC_ERR_INFEASIBLE;
    int op = oc->op, tp = 1;
    bool has_rc = false;
    for (int k = 0; k < oc->n; k++) has_rc |= oc->c[k].recompute, tp = oc->c[k].ways > tp ? oc->c[k].ways : tp;
    const pcc_policy_rule *u = &p->rules[p->rule[op]];
    if (u->recompute == 0 && full)
        return diag(p->file, u->recompute_ptr, "operator %s (%s:%s): the plan recomputes every block operator (recompute full, "
                    "or the template's last resort when nothing fits without it), and one kept out would leave the recomputed "
                    "operators after it reading what nothing keeps", op_name(g->arena, g, &g->ops[op]), g->file, g->ops[op].ptr);
    if (u->recompute == 1 && !has_rc && !full)
        return diag(p->file, u->recompute_ptr, "operator %s (%s:%s) has no recompute candidate in phase 1 (the backward pass keeps "
                    "none of its outputs, or recomputing it needs inputs nothing keeps): only --recompute full recomputes it, "
                    "with the whole block", op_name(g->arena, g, &g->ops[op]), g->file, g->ops[op].ptr);
    return diag(p->file, u->split_ptr ? u->split_ptr : u->recompute_ptr ? u->recompute_ptr : u->ptr,
                "operator %s (%s:%s) has no candidate over a tp group of %d that keeps this pin together with the mesh's "
                "options (phase 1's candidates: plancc --check MODEL --cluster C -d t)", op_name(g->arena, g, &g->ops[op]), g->file,
                g->ops[op].ptr, tp);
}

const char *policy_cause(const pcc_policy *p, int op, const char *cause) {
    if (!p || p->rule[op] < 0 || (!p->rules[p->rule[op]].split && p->rules[p->rule[op]].recompute < 0)) return cause;
    return p->rules[p->rule[op]].ptr; // the rule that pinned its split or recompute: "/rules/2"
}

pcc_status policy_blame(const pcc_options *o, pcc_status st) {
    const pcc_policy *p = o->search.policy;
    if (st == PCC_ERR_INFEASIBLE && p && !o->quiet)
        fprintf(stderr, "plancc: %s: nothing feasible under this policy: its pins leave no plan that fits (loosen a pin, or leave a "
                        "mesh key open for the search)\n", p->file);
    return st;
}
