/*
 * unit_plan.c: unit tests of the plan library (runtime/plan/): the hashes; for every plan in
 * tests/plans/, text -> plan -> bytes -> plan -> text gives the same text and the same bytes,
 * twice; every single-byte corruption of an encoded plan is refused (and every corruption with
 * its CRCs fixed up either is refused or decodes to a plan that encodes to the same bytes);
 * every truncation is refused, as are a wrong magic, version 5 and trailing bytes; a plan read
 * for one rank reads only that rank's program (a corrupted other program goes unnoticed, its
 * own does not); strings and doubles that need escapes, NaN payloads and -0 survive the text
 * form, as do the loss, the notes, block copies and layer bases; every initializer and data
 * source survives text and bytes at its offsets (byte 7, 80, 88 of a tensor's record), unused
 * numbers are written as zero and refused when not, and plan_validate refuses a param without an
 * initializer, an input without data, a source on another kind and numbers out of range, each
 * at its limit; shards: local shapes, expected
 * bytes, their text, and the rules plan_check applies to collectives and copies, kind by kind;
 * plan_check scales with long loops through its periodic expansion. The source root is argv[1].
 */
#include "plan.h"
#include "checker.h" // check_op_sums_away

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static const char *root;
static char err[1024];


// text without its comment lines (the printer writes one; the plans in tests/ have more).
static char *strip_comments(const char *text) {
    char *out = malloc(strlen(text) + 1), *o = out;
    for (const char *line = text; out && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
        const char *first = line + strspn(line, " ");
        if (*first != '#') memcpy(o, line, n), o += n;
        line += n;
    }
    if (out) *o = 0;
    return out;
}

static bool same_text(const char *a, const char *b) {
    char *x = a ? strip_comments(a) : NULL, *y = b ? strip_comments(b) : NULL;
    bool same = x && y && strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}

// plan_print into a malloc'd string.
static char *print_to_string(const plan *p, int only_rank) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    plan_print(f, p, only_rank);
    fclose(f);
    return buf;
}

static bool parse_file(const char *name, plan *p, char **text) {
    char path[1024];
    size_t n;
    snprintf(path, sizeof(path), "%s/tests/plans/%s", root, name);
    *text = test_slurp(path, &n);
    if (!*text) return false;
    return plan_parse(*text, n, path, p, err, sizeof(err)) == PLAN_OK;
}

static void test_hashes(void) {
    EXPECT(plan_crc32c(0, "123456789", 9) == 0xe3069283u);
    EXPECT(plan_crc32c(plan_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u);
    EXPECT(plan_crc32c(0, "", 0) == 0);
    EXPECT(plan_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    EXPECT(plan_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
}

// Text -> plan -> bytes -> plan -> text, and the bytes twice.
static void test_round_trip(const char *name) {
    plan p, q;
    char *text = NULL;
    bool ok = parse_file(name, &p, &text);
    EXPECT(ok);
    if (!ok) {
        fprintf(stderr, "     %s: %s\n", name, err);
        free(text);
        return;
    }
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    char *printed = print_to_string(&p, -1);
    EXPECT(same_text(printed, text));
    uint8_t *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    EXPECT(plan_encode(&p, &a, &na, err, sizeof(err)) == PLAN_OK);
    EXPECT(plan_encode(&p, &b, &nb, err, sizeof(err)) == PLAN_OK);
    EXPECT(na == nb && na % 8 == 0 && memcmp(a, b, na) == 0);
    EXPECT(plan_decode(a, na, -1, &q, err, sizeof(err)) == PLAN_OK);
    char *again = print_to_string(&q, -1);
    EXPECT(again && printed && strcmp(again, printed) == 0);
    EXPECT(plan_encode(&q, &c, &nc, err, sizeof(err)) == PLAN_OK);
    EXPECT(nc == na && memcmp(a, c, na) == 0);
    EXPECT(plan_check(&q, err, sizeof(err)) == PLAN_OK);
    plan_free(&p);
    plan_free(&q);
    free(a);
    free(b);
    free(c);
    free(printed);
    free(again);
    free(text);
}

static void test_all_good_plans(void) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/plans", root);
    DIR *d = opendir(dir);
    EXPECT(d != NULL);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 9 || strcmp(e->d_name + len - 9, ".plan.txt") != 0) continue;
        test_round_trip(e->d_name);
        n++;
    }
    if (d) closedir(d);
    EXPECT(n >= 3);
}

static bool encode_file(const char *name, uint8_t **bytes, size_t *n) {
    plan p;
    char *text = NULL;
    bool ok = parse_file(name, &p, &text) && plan_encode(&p, bytes, n, err, sizeof(err)) == PLAN_OK;
    plan_free(&p);
    free(text);
    return ok;
}

static void put32(uint8_t *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *d) { return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24; }
static uint64_t get64(const uint8_t *d) { return get32(d) | (uint64_t)get32(d + 4) << 32; }

// Recomputes every CRC of an encoded plan after a change.
static void fix_crcs(uint8_t *d, size_t n) {
    uint32_t count = get32(d + 24);
    for (uint32_t i = 0; i < count && 64 + 24 * (uint64_t)(i + 1) <= n; i++) {
        uint8_t *e = d + 64 + 24 * i;
        uint64_t off = get64(e + 8), bytes = get32(e + 16);
        if (off + bytes <= n) put32(e + 20, plan_crc32c(0, d + off, bytes));
    }
    if (64 + 24 * (uint64_t)count <= n) put32(d + 28, plan_crc32c(0, d + 64, 24 * (size_t)count));
    put32(d + 56, plan_crc32c(0, d, 56));
}

// Every byte flipped on its own: refused, with PLAN_ERR_FORMAT, by a full decode; a decode for
// one rank does not crash and refuses with FORMAT or reads on (if the byte lies in a section
// it does not read).
static void test_corruption(void) {
    uint8_t *good = NULL;
    size_t n = 0;
    EXPECT(encode_file("tp2pp2.plan.txt", &good, &n));
    if (!good) return;
    uint8_t *d = malloc(n);
    int refused = 0, rank_ok = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(d, good, n);
        d[i] ^= 0x5a;
        plan p;
        plan_status st = plan_decode(d, n, -1, &p, err, sizeof(err));
        refused += st == PLAN_ERR_FORMAT;
        plan_free(&p);
        st = plan_decode(d, n, (int)(i % 4), &p, err, sizeof(err));
        rank_ok += st == PLAN_OK || st == PLAN_ERR_FORMAT;
        plan_free(&p);
    }
    EXPECT(refused == (int)n);
    EXPECT(rank_ok == (int)n);
    free(d);
    free(good);
}

// Corruptions behind valid CRCs: the structural checks. Decode never crashes; whatever it
// accepts is canonical (encodes back to the same bytes) and passes plan_validate.
static void test_corruption_behind_crcs(void) {
    uint8_t *good = NULL;
    size_t n = 0;
    EXPECT(encode_file("tp2pp2.plan.txt", &good, &n));
    if (!good) return;
    uint8_t *d = malloc(n);
    static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x10};
    int bad_canon = 0, bad_status = 0, accepted = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t f = 0; f < sizeof(flips); f++) {
            memcpy(d, good, n);
            d[i] ^= flips[f];
            fix_crcs(d, n);
            plan p;
            plan_status st = plan_decode(d, n, -1, &p, err, sizeof(err));
            bad_status += st != PLAN_OK && st != PLAN_ERR_FORMAT;
            if (st == PLAN_OK) {
                uint8_t *e = NULL;
                size_t ne = 0;
                accepted++;
                bool canon = plan_encode(&p, &e, &ne, err, sizeof(err)) == PLAN_OK && ne == n && memcmp(e, d, n) == 0;
                if (!canon && !bad_canon++) fprintf(stderr, "     byte %zu ^ 0x%02x decodes but does not encode back\n", i, flips[f]);
                free(e);
            }
            plan_free(&p);
        }
    EXPECT(bad_status == 0);
    EXPECT(bad_canon == 0);
    EXPECT(accepted > 0); // some fields (sizes, offsets, hashes, doubles) take any value
    free(d);
    free(good);
}

static void test_truncation_magic_version(void) {
    uint8_t *good = NULL;
    size_t n = 0;
    EXPECT(encode_file("dp2.plan.txt", &good, &n));
    if (!good) return;
    plan p;
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        refused += plan_decode(good, len, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT;
        plan_free(&p);
    }
    EXPECT(refused == (int)n);
    EXPECT(plan_decode(good, n - 8, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "truncated: file is"));
    uint8_t *d = malloc(n + 8);
    memcpy(d, good, n);
    memset(d + n, 0, 8);
    EXPECT(plan_decode(d, n + 8, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "trailing bytes"));
    memcpy(d, good, n);
    d[0] = 'X';
    EXPECT(plan_decode(d, n, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "bad magic"));
    memcpy(d, good, n);
    put32(d + 8, 5);
    EXPECT(plan_decode(d, n, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strcmp(err, "version 5 (this reader knows 4)") == 0);
    fix_crcs(d, n);
    EXPECT(plan_decode(d, n, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "version 5"));
    memcpy(d, good, n);
    d[n - 60] ^= 1; // inside the last section: PROGRAM 0
    EXPECT(plan_decode(d, n, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "section 5 (PROGRAM 0): CRC mismatch"));
    free(d);
    free(good);
}

// One rank's read: its program only; another program's corruption goes unnoticed.
static void test_rank_read(void) {
    plan p, q;
    char *text = NULL;
    EXPECT(parse_file("tp2pp2.plan.txt", &p, &text));
    char path[] = "/tmp/unit-plan-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd >= 0) close(fd);
    EXPECT(plan_write(&p, path, err, sizeof(err)) == PLAN_OK);
    for (int r = 0; r < 4; r++) {
        EXPECT(plan_read(path, r, &q, err, sizeof(err)) == PLAN_OK);
        uint32_t k = q.ranks[r].program, other = 1 - k;
        EXPECT(q.n_programs == 2 && q.programs[k].name && q.programs[k].n_insns == p.programs[k].n_insns);
        EXPECT(!q.programs[other].name && q.programs[other].n_insns == 0 && q.programs[other].n_buffers == 0);
        EXPECT(plan_check(&q, err, sizeof(err)) == PLAN_OK);
        char *t = print_to_string(&q, r);
        EXPECT(t && strstr(t, "not loaded") && strstr(t, k ? "\"stage1\"" : "\"stage0\"") && !strstr(t, k ? "\"stage0\"" : "\"stage1\""));
        free(t);
        uint8_t *b = NULL;
        size_t nb = 0;
        EXPECT(plan_encode(&q, &b, &nb, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "not loaded"));
        free(b);
        plan_free(&q);
    }
    EXPECT(plan_read(path, 4, &q, err, sizeof(err)) == PLAN_OK && q.meta.world == 4);
    EXPECT(!q.programs[0].name && !q.programs[1].name);
    plan_free(&q);
    // corrupt the last byte of PROGRAM 1 (the file's last section)
    size_t n;
    char *bytes = test_slurp(path, &n);
    bytes[n - 1] ^= 0x40;
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    EXPECT(plan_read(path, 0, &q, err, sizeof(err)) == PLAN_OK);
    plan_free(&q);
    EXPECT(plan_read(path, 2, &q, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "section 6 (PROGRAM 1): CRC mismatch"));
    EXPECT(plan_read(path, -1, &q, err, sizeof(err)) == PLAN_ERR_FORMAT);
    EXPECT(plan_read("/nonexistent/x.plan", -1, &q, err, sizeof(err)) == PLAN_ERR_IO && strstr(err, "cannot open"));
    EXPECT(plan_read("/tmp", 0, &q, err, sizeof(err)) == PLAN_ERR_IO);
    EXPECT(plan_write(&p, "/nonexistent/dir/x.plan", err, sizeof(err)) == PLAN_ERR_IO);
    remove(path);
    free(bytes);
    plan_free(&p);
    free(text);
}

static void test_free(void) {
    plan z;
    memset(&z, 0, sizeof(z));
    plan_free(&z);
    plan_free(NULL);
    void *m = plan_alloc(&z, 100);
    EXPECT(m && ((unsigned char *)m)[99] == 0 && z.owner);
    plan_free(&z);
    EXPECT(!z.owner);
}

// plan_grow: the same array while its room holds the items asked for, else a copy with the items
// kept and the room doubled; an array left exactly full (room 0) grows from its count; past
// UINT32_MAX items it refuses.
static void test_grow(void) {
    plan z;
    memset(&z, 0, sizeof(z));
    uint32_t cap = 0, *a = NULL;
    for (uint32_t n = 0; n < 100; n++) {
        uint32_t *was = a, old = cap;
        a = plan_grow(&z, a, n, n + 1, &cap, sizeof *a);
        EXPECT(a && cap > n && (n < old ? a == was && cap == old : cap == (old ? 2 * old : 8)));
        a[n] = 7 * n;
    }
    bool kept = true;
    for (uint32_t n = 0; n < 100; n++) kept = kept && a[n] == 7 * n;
    EXPECT(kept && cap == 128);
    uint32_t exact = 0, *b = plan_grow(&z, a, 100, 103, &exact, sizeof *b);
    EXPECT(b && b != a && exact == 200 && b[99] == 693);
    uint32_t big = 1u << 31;
    EXPECT(!plan_grow(&z, b, 3, big + 1, &big, sizeof *b));
    plan_free(&z);
}

// Strings that need escapes and doubles that %g cannot show survive the text form exactly.
static void test_text_edges(void) {
    plan p, q;
    char *text = NULL;
    EXPECT(parse_file("single.plan.txt", &p, &text));
    p.meta.model_name = "quote \" back \\ nl \n tab \t cr \r ctl \x01 del \x7f high \xc3\xa9";
    p.meta.options = NULL;
    uint64_t nan_bits = 0x7ff8000000000123ull;
    double nan_payload;
    memcpy(&nan_payload, &nan_bits, sizeof(nan_payload));
    plan_attrs *a = &p.programs[0].attrs[1];
    double vals[8] = {0.1, -0.0, INFINITY, -INFINITY, nan_payload, 4.9e-324, 1.7976931348623157e308, 2.5};
    memcpy(a->f, vals, sizeof(vals));
    a->i[7] = INT64_MIN;
    a->perm[0] = -1;
    a->win[5] = INT32_MIN;
    p.meta.est_step_s = 1.0 / 3.0;
    p.meta.est_peak_bytes = 1e100;
    p.meta.notes = "line 1\nline \"2\"\ttab \x01";
    p.meta.loss = 2;
    p.tensors[1].copies = 3;
    p.programs[0].buffers[1].layer_base = 2;
    uint8_t *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    EXPECT(plan_encode(&p, &b1, &n1, err, sizeof(err)) == PLAN_OK);
    char *t1 = print_to_string(&p, -1);
    EXPECT(plan_parse(t1, strlen(t1), "edges", &q, err, sizeof(err)) == PLAN_OK);
    EXPECT(plan_encode(&q, &b2, &n2, err, sizeof(err)) == PLAN_OK);
    EXPECT(n1 == n2 && memcmp(b1, b2, n1) == 0);
    char *t2 = print_to_string(&q, -1);
    EXPECT(t2 && strcmp(t1, t2) == 0);
    EXPECT(strstr(t1, "nan:0x7ff8000000000123") && strstr(t1, "\\x01") && strstr(t1, "\\xc3\\xa9"));
    EXPECT(strstr(t1, "\nloss 2\nnotes \"line 1\\nline \\\"2\\\"\\ttab \\x01\"\n") && strstr(t1, "[16,8] copies 3 init normal 0 0.02\n") &&
           strstr(t1, " bytes 512 layer_base 2 persist\n"));
    EXPECT(q.meta.loss == 2 && q.meta.notes && strcmp(q.meta.notes, p.meta.notes) == 0 && q.tensors[1].copies == 3 &&
           q.programs[0].buffers[1].layer_base == 2);
    free(t1);
    free(t2);
    free(b1);
    free(b2);
    plan_free(&q);
    plan_free(&p);
    free(text);
}

// plan_shard_local_shape, plan_buffer_expected_bytes and plan_shard_text on a pp 2 x tp 3 mesh.
static void test_shard_geometry(void) {
    const char *text = "plan 4\nmesh pp 2 tp 3\ntensor 0 \"t\" f16 param [16,6] init zeros\ntensor 1 \"s\" f32 activation []\n"
                       "ranks 0-5 program 0\nprogram 0 \"p\" arena 0 streams 1 priority 0 events 0\n";
    plan p;
    EXPECT(plan_parse(text, strlen(text), "geometry", &p, err, sizeof(err)) == PLAN_OK);
    if (!p.tensors) return;
    int64_t l[PLAN_MAX_RANK];
    plan_shard s = {{0}};
    EXPECT(plan_shard_local_shape(&p, &p.tensors[0], s, l) && l[0] == 16 && l[1] == 6 && l[2] == 0);
    s.map[1] = PLAN_SHARD_D(1);
    EXPECT(plan_shard_local_shape(&p, &p.tensors[0], s, l) && l[0] == 16 && l[1] == 2);
    s.map[0] = PLAN_SHARD_D(0);
    EXPECT(plan_shard_local_shape(&p, &p.tensors[0], s, l) && l[0] == 8 && l[1] == 2);
    s.map[0] = PLAN_SHARD_V;
    EXPECT(plan_shard_local_shape(&p, &p.tensors[0], s, l) && l[0] == 16 && l[1] == 2);
    char buf[64];
    plan_shard_text(&p, s, buf, sizeof(buf));
    EXPECT(strcmp(buf, "pp=v tp=d1") == 0);
    plan_shard_text(&p, s, buf, 6);
    EXPECT(strcmp(buf, "pp=v ") == 0);
    plan_shard_text(&p, (plan_shard){{0}}, buf, sizeof(buf));
    EXPECT(buf[0] == 0);
    plan_buffer b = {.tensor = 0, .dtype = 1, .shard = s, .mb_slots = 1, .layer_slots = 1};
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 16 * 2 * 2);
    b.dtype = 0;
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 16 * 2 * 4);
    s.map[1] = PLAN_SHARD_D(0); // 16 rows in 3 pieces
    EXPECT(!plan_shard_local_shape(&p, &p.tensors[0], s, l) && l[0] == 0 && l[1] == 6);
    b.shard = s;
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 0);
    s.map[1] = PLAN_SHARD_D(2); // past the rank
    EXPECT(!plan_shard_local_shape(&p, &p.tensors[0], s, l));
    s = (plan_shard){{0, 0, PLAN_SHARD_V}}; // past the mesh
    EXPECT(!plan_shard_local_shape(&p, &p.tensors[0], s, l));
    plan_shard_text(&p, s, buf, sizeof(buf));
    EXPECT(strcmp(buf, "?2=v") == 0);
    b = (plan_buffer){.tensor = 1, .dtype = 0, .shard = {{PLAN_SHARD_V}}};
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 4);
    b.tensor = PLAN_NONE;
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 0);
    b.tensor = 7;
    EXPECT(plan_buffer_expected_bytes(&p, &b) == 0);
    plan_free(&p);
}

// plan_check on one instruction over two buffers of one [8,8] param on a dp 2 x tp 2 mesh, held
// with shards `in` and `out` (text words, "" for all R), each buffer's bytes its shard's.
// Group 0 spans tp, group 1 dp+tp.
static plan_status check_pair(const char *in, const char *out, const char *insn) {
    char text[1024];
    snprintf(text, sizeof(text),
             "plan 4\nmesh dp 2 tp 2\ntensor 0 \"t\" f32 param [8,8] init zeros\ntensor 1 \"u\" f32 param [8,8] init ones\n"
             "group 0 axes tp\ngroup 1 axes dp+tp\nranks 0-3 program 0\n"
             "program 0 \"p\" arena 1024 streams 1 priority 0 events 0\n"
             "  buffer 0 tensor 0 f32 at 0 bytes 1 persist%s%s\n  buffer 1 tensor 0 f32 at 512 bytes 1%s%s\n"
             "  buffer 2 tensor 1 f32 at 256 bytes 256\n  0: %s\n",
             *in ? " shard " : "", in, *out ? " shard " : "", out, insn);
    plan p;
    plan_status st = plan_parse(text, strlen(text), "pair", &p, err, sizeof(err));
    if (st) return st;
    for (int b = 0; b < 2; b++) p.programs[0].buffers[b].bytes = plan_buffer_expected_bytes(&p, &p.programs[0].buffers[b]);
    st = plan_check(&p, err, sizeof(err));
    plan_free(&p);
    return st;
}

static bool refused(plan_status st, const char *fragment) {
    bool ok = st == PLAN_ERR_INVALID && strstr(err, fragment);
    if (!ok) fprintf(stderr, "     status %d: %s\n", st, st ? err : "(ok)");
    return ok;
}

// "coll KIND s0 group G args 0 -> 1"
static const char *coll(const char *kind, int group) {
    static char insn[64];
    snprintf(insn, sizeof(insn), "coll %s s0 group %d args 0 -> 1", kind, group);
    return insn;
}

// The collectives' shard rules, kind by kind, and the in-place rules.
static void test_coll_shards(void) {
    EXPECT(check_pair("tp=v", "", coll("all_reduce", 0)) == PLAN_OK);
    EXPECT(check_pair("dp=d0 tp=v", "dp=d0", coll("all_reduce", 0)) == PLAN_OK);
    EXPECT(check_pair("dp=v tp=v", "", coll("all_reduce", 1)) == PLAN_OK);
    EXPECT(refused(check_pair("dp=d0 tp=v", "dp=d1", coll("all_reduce", 0)), "off the group's axes a collective keeps the shard, but on dp it goes d0 -> d1"));
    EXPECT(refused(check_pair("dp=v", "", coll("all_reduce", 1)), "all_reduce wants V -> R on each of the group's axes, but on tp it goes R -> R"));
    EXPECT(check_pair("tp=d0", "", coll("all_gather", 0)) == PLAN_OK);
    EXPECT(check_pair("tp=d1", "", coll("all_gather", 0)) == PLAN_OK);
    EXPECT(check_pair("dp=d0 tp=d1", "", coll("all_gather", 1)) == PLAN_OK);
    EXPECT(refused(check_pair("tp=d0", "tp=d1", coll("all_gather", 0)), "all_gather"));
    EXPECT(check_pair("tp=v", "tp=d1", coll("reduce_scatter", 0)) == PLAN_OK);
    EXPECT(check_pair("dp=v tp=v", "dp=d0 tp=d0", coll("reduce_scatter", 1)) == PLAN_OK);
    EXPECT(refused(check_pair("tp=d0", "tp=d1", coll("reduce_scatter", 0)), "in = out x ranks"));
    EXPECT(check_pair("tp=d0", "tp=d1", coll("all_to_all", 0)) == PLAN_OK);
    EXPECT(refused(check_pair("tp=d0", "tp=d0", coll("all_to_all", 0)), "all_to_all wants D(i) -> D(j), i != j"));
    EXPECT(refused(check_pair("tp=v", "tp=d0", coll("all_to_all", 0)), "all_to_all on group 0 (2 ranks) wants in = out"));
    EXPECT(check_pair("tp=d1", "tp=d1", coll("broadcast", 0)) == PLAN_OK);
    EXPECT(refused(check_pair("tp=v", "", coll("broadcast", 0)), "broadcast wants the same shard in and out"));
    // In place on R over the group passes the shard rule (layer 2); the data flow (layer 4) then
    // finds that a param at the start of the step holds no partial sums to add up.
    EXPECT(refused(check_pair("", "", "coll all_reduce s0 group 0 args 0 -> 0"), "holds no partial sums there"));
    EXPECT(refused(check_pair("dp=v", "", "coll all_reduce s0 group 0 args 0 -> 0"), "holds no partial sums there")); // dp is off the group
    EXPECT(refused(check_pair("tp=v", "", "coll all_reduce s0 group 0 args 0 -> 0"), "whose shard is tp=v: an in-place all_reduce"));
    EXPECT(refused(check_pair("", "", "coll broadcast s0 group 0 args 0 -> 0"), "only all_reduce runs in place"));
    EXPECT(refused(check_pair("", "", "coll all_reduce s0 group 0 args 0 -> 2"), "in holds tensor 0 \"t\", out tensor 1 \"u\""));
}

// The copy rules: R -> a piece, splits that extend src's in mesh order, no piece -> R.
static void test_copy_shards(void) {
    const char *copy = "copy s0 args 0 -> 1";
    EXPECT(check_pair("", "", copy) == PLAN_OK);
    EXPECT(check_pair("", "dp=d0 tp=d0", copy) == PLAN_OK);
    EXPECT(check_pair("dp=d0", "dp=d0 tp=d0", copy) == PLAN_OK);
    EXPECT(check_pair("", "tp=v", copy) == PLAN_OK);
    EXPECT(check_pair("tp=d1", "dp=d0 tp=d1", copy) == PLAN_OK);
    EXPECT(refused(check_pair("tp=d0", "dp=d0 tp=d0", copy), "dimension 0 is split over tp in src but dp+tp in dst"));
    EXPECT(refused(check_pair("tp=v", "", copy), "but on tp it goes v -> R"));
    EXPECT(refused(check_pair("dp=d0", "dp=d1", copy), "but on dp it goes d0 -> d1"));
    EXPECT(refused(check_pair("", "", "copy s0 args 0 -> 2"), "hold different tensors: a copy keeps its tensor"));
}

// The same plan with 20000 micro-batches: the periodic expansion keeps the data-flow check
// fast, the communication check walks every message, and a missing last receive is found.
static void test_long_loops(void) {
    char path[1024];
    size_t n;
    snprintf(path, sizeof(path), "%s/tests/plans/tp2pp2.plan.txt", root);
    char *text = test_slurp(path, &n);
    EXPECT(text != NULL);
    if (!text) return;
    char *big = malloc(n + 64);
    const char *subs[][2] = {{"micro_batches 4 ", "micro_batches 20000 "}, {"loop mb 3 body", "loop mb 19999 body"},
                             {"mb+3 pp +1 args 4", "mb+19999 pp +1 args 4"}, {"mb+3 args 4,0", "mb+19999 args 4,0"},
                             {"loop mb 4 body", "loop mb 20000 body"}};
    strcpy(big, text);
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char *at = strstr(big, subs[i][0]);
        EXPECT(at != NULL);
        if (!at) continue;
        size_t lo = strlen(subs[i][0]), ln = strlen(subs[i][1]);
        memmove(at + ln, at + lo, strlen(at + lo) + 1);
        memcpy(at, subs[i][1], ln);
    }
    plan p;
    bool parsed = plan_parse(big, strlen(big), "big", &p, err, sizeof(err)) == PLAN_OK;
    EXPECT(parsed);
    if (!parsed) {
        fprintf(stderr, "     %s\n", err);
        free(big);
        free(text);
        return;
    }
    clock_t t0 = clock();
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    // A figure, not an assertion: speed targets live in benchmarks, not in tests.
    printf("plan_check of a 20,000-micro-batch plan: %.3f s\n", s);
    p.programs[1].insns[0].a = 19999; // stage 1 runs one micro-batch fewer
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_ERR_INVALID && strstr(err, "unmatched send") && strstr(err, "message 20000"));
    plan_free(&p);
    free(big);
    free(text);
}

// plan_encode refuses what plan_validate refuses, with the validator's message.
static void test_encode_refuses(void) {
    plan p;
    char *text = NULL;
    EXPECT(parse_file("dp2.plan.txt", &p, &text));
    p.programs[0].insns[11].a = 7;
    uint8_t *b = NULL;
    size_t n = 0;
    EXPECT(plan_encode(&p, &b, &n, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "group 7 out of range") && !b);
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_ERR_INVALID && strstr(err, "group 7 out of range"));
    plan_free(&p);
    free(text);
}

/* ---- tensors' sources ---- */

// A one-rank plan of the given tensor lines (no programs to speak of: one empty program).
static plan_status parse_tensors(const char *tensors, plan *p) {
    char text[2048];
    snprintf(text, sizeof(text), "plan 4\nmesh dp 1\n%sranks 0 program 0\nprogram 0 \"p\" arena 0 streams 1 priority 0 events 0\n",
             tensors);
    return plan_parse(text, strlen(text), "sources", p, err, sizeof(err));
}

static const char *const source_lines =
    "tensor 0 \"a\" f32 param [2] init zeros\n"
    "tensor 1 \"b\" f32 param [2] init ones\n"
    "tensor 2 \"c\" f32 param [2] init normal -0 1e-300\n"
    "tensor 3 \"d\" f32 param [2] copies 3 init uniform -0.1 0.30000000000000004\n"
    "tensor 4 \"e\" f32 input [2] data normal\n"
    "tensor 5 \"f\" f32 input [2] data binary\n"
    "tensor 6 \"g\" i32 input [2] data randint 2147483648\n"
    "tensor 7 \"h\" i32 input [2] data tokens 50257\n"
    "tensor 8 \"i\" i32 input [2] data targets 1\n"
    "tensor 9 \"j\" i32 input [2] data arange\n"
    "tensor 10 \"k\" f32 activation [2]\n"
    "tensor 11 \"l\" f32 state [2]\n";

// The offset of section `entry` of an encoded plan (its table entry's offset field).
static size_t section_at(const uint8_t *d, uint32_t entry) { return (size_t)get64(d + 64 + 24 * entry + 8); }

// The names, and how many numbers each source takes.
static void test_source_names(void) {
    EXPECT(strcmp(plan_init_name(PLAN_INIT_NONE), "none") == 0 && strcmp(plan_init_name(PLAN_INIT_UNIFORM), "uniform") == 0);
    EXPECT(plan_init_name(PLAN_INIT_UNIFORM + 1) == NULL && plan_data_name(PLAN_DATA_TEACHER + 1) == NULL);
    EXPECT(strcmp(plan_data_name(PLAN_DATA_TEACHER), "teacher") == 0 && plan_source_args(PLAN_T_INPUT, PLAN_DATA_TEACHER) == 2);
    EXPECT(strcmp(plan_data_name(PLAN_DATA_NONE), "none") == 0 && strcmp(plan_data_name(PLAN_DATA_TARGETS), "targets") == 0);
    EXPECT(plan_source_args(PLAN_T_PARAM, PLAN_INIT_NORMAL) == 2 && plan_source_args(PLAN_T_PARAM, PLAN_INIT_UNIFORM) == 2);
    EXPECT(plan_source_args(PLAN_T_PARAM, PLAN_INIT_ONES) == 0 && plan_source_args(PLAN_T_PARAM, 99) == 0);
    EXPECT(plan_source_args(PLAN_T_INPUT, PLAN_DATA_RANDINT) == 1 && plan_source_args(PLAN_T_INPUT, PLAN_DATA_ARANGE) == 0);
    EXPECT(plan_source_args(PLAN_T_INPUT, PLAN_INIT_NORMAL) == 1); // 3 is randint for an input
    EXPECT(plan_source_args(PLAN_T_ACTIVATION, PLAN_INIT_NORMAL) == 2);
}

// The f64 at byte `at` of an encoded plan.
static double f64_at(const uint8_t *d) {
    uint64_t bits = get64(d);
    double x;
    memcpy(&x, &bits, sizeof(x));
    return x;
}

// Every source through text and bytes: the same text back, the same bytes, the fields at their
// offsets in the 96-byte record, and the numbers a source does not take written as zero.
static void test_source_round_trip(void) {
    plan p, q;
    bool parsed = parse_tensors(source_lines, &p) == PLAN_OK;
    EXPECT(parsed);
    if (!parsed) {
        fprintf(stderr, "     %s\n", err);
        return;
    }
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_OK);
    EXPECT(p.tensors[2].source == PLAN_INIT_NORMAL && signbit(p.tensors[2].a) && p.tensors[2].b == 1e-300);
    EXPECT(p.tensors[6].source == PLAN_DATA_RANDINT && p.tensors[6].a == 2147483648.0 && p.tensors[6].b == 0);
    EXPECT(p.tensors[9].source == PLAN_DATA_ARANGE && p.tensors[10].source == 0);
    char *t1 = print_to_string(&p, -1), *t2 = NULL;
    EXPECT(t1 && strstr(t1, source_lines));
    p.tensors[0].a = 5, p.tensors[5].b = 7, p.tensors[6].b = 9; // unused: written as zero
    uint8_t *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    EXPECT(plan_encode(&p, &b1, &n1, err, sizeof(err)) == PLAN_OK);
    const uint8_t *rec = b1 ? b1 + section_at(b1, 2) + 8 : NULL; // TENSORS: count, reserved, 96-byte records
    EXPECT(rec && get32(rec - 8) == 12);
    EXPECT(rec && rec[3 * 96 + 5] == PLAN_T_PARAM && rec[3 * 96 + 7] == PLAN_INIT_UNIFORM && get32(rec + 3 * 96 + 8) == 3);
    EXPECT(rec && f64_at(rec + 3 * 96 + 80) == -0.1 && f64_at(rec + 3 * 96 + 88) == 0.30000000000000004);
    EXPECT(rec && rec[6 * 96 + 7] == PLAN_DATA_RANDINT && f64_at(rec + 6 * 96 + 80) == 2147483648.0);
    EXPECT(rec && !get64(rec + 0 * 96 + 80) && !get64(rec + 5 * 96 + 88) && !get64(rec + 6 * 96 + 88));
    EXPECT(rec && rec[10 * 96 + 7] == 0 && rec[11 * 96 + 7] == 0);
    EXPECT(b1 && plan_decode(b1, n1, -1, &q, err, sizeof(err)) == PLAN_OK);
    t2 = print_to_string(&q, -1);
    EXPECT(t1 && t2 && strcmp(t1, t2) == 0);
    EXPECT(plan_encode(&q, &b2, &n2, err, sizeof(err)) == PLAN_OK && n2 == n1 && b1 && memcmp(b1, b2, n1) == 0);
    plan_free(&q);
    plan_free(&p);
    free(b1);
    free(b2);
    free(t1);
    free(t2);
}

// A number a source does not take that is not zero (-0 included) is not canonical: refused.
static void test_source_canonical(void) {
    plan p;
    uint8_t *good = NULL;
    size_t n = 0;
    EXPECT(parse_tensors(source_lines, &p) == PLAN_OK && plan_encode(&p, &good, &n, err, sizeof(err)) == PLAN_OK);
    plan_free(&p);
    if (!good) return;
    static const struct { uint32_t tensor, at; uint64_t bits; const char *msg; } cases[] = {
        {0, 80, 0x3ff0000000000000ull, "tensor 0: a (bytes 80..87) is not zero, but its source takes 0 numbers"},
        {6, 88, 0x8000000000000000ull, "tensor 6: b (bytes 88..95) is not zero, but its source takes 1 number"},
        {10, 80, 1, "tensor 10: a (bytes 80..87) is not zero"},
    };
    uint8_t *d = malloc(n);
    for (size_t i = 0; d && i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(d, good, n);
        uint8_t *r = d + section_at(d, 2) + 8 + 96 * cases[i].tensor + cases[i].at;
        put32(r, (uint32_t)cases[i].bits);
        put32(r + 4, (uint32_t)(cases[i].bits >> 32));
        fix_crcs(d, n);
        EXPECT(plan_decode(d, n, -1, &p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, cases[i].msg));
        plan_free(&p);
    }
    free(d);
    free(good);
}

// plan_validate's rules, each just past its limit (refused) and at it (accepted).
static void test_source_validate(void) {
    static const struct { const char *line, *msg; } cases[] = {
        {"tensor 0 \"w\" f32 param [2]", "tensor 0 \"w\": a param needs an initializer (init zeros, ones, normal or uniform)"},
        {"tensor 0 \"x\" f32 input [2]", "tensor 0 \"x\": an input needs a data source"},
        {"tensor 0 \"h\" f32 activation [2] init ones", "tensor 0 \"h\" (activation): only a param takes an init and only an input data, but its source is 2"},
        {"tensor 0 \"g\" f32 grad [2] init zeros", "tensor 0 \"g\" (grad): only a param"},
        {"tensor 0 \"s\" f32 state [2] init zeros", "tensor 0 \"s\" (state): only a param"},
        {"tensor 0 \"w\" f32 param [2] init normal 0 -1e-300", "init normal wants a finite mean and a finite std >= 0, but has mean 0, std -1e-300"},
        {"tensor 0 \"w\" f32 param [2] init normal 0 inf", "init normal wants a finite mean"},
        {"tensor 0 \"w\" f32 param [2] init normal -inf 1", "init normal wants a finite mean"},
        {"tensor 0 \"w\" f32 param [2] init normal 0 nan:0x7ff8000000000000", "init normal wants a finite mean"},
        {"tensor 0 \"w\" f32 param [2] init uniform 1 -1", "init uniform wants finite low < high, but has low 1, high -1"},
        {"tensor 0 \"w\" f32 param [2] init uniform -inf 0", "init uniform wants finite low < high"},
        {"tensor 0 \"x\" i32 input [2] data randint 0", "data randint wants an integral high (the exclusive bound) from 1 to 2^31, but has 0"},
        {"tensor 0 \"x\" i32 input [2] data tokens 2147483649", "data tokens wants an integral high"},
        {"tensor 0 \"x\" i32 input [2] data targets 2.5", "data targets wants an integral high"},
        {"tensor 0 \"x\" i32 input [2] data randint -inf", "data randint wants an integral high"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char line[256];
        snprintf(line, sizeof(line), "%s\n", cases[i].line);
        plan p;
        bool parsed = parse_tensors(line, &p) == PLAN_OK;
        EXPECT(parsed);
        if (!parsed) continue;
        bool ok = plan_validate(&p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, cases[i].msg);
        if (!ok) fprintf(stderr, "     %s: %s\n", cases[i].line, err);
        EXPECT(ok);
        EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_ERR_INVALID && strstr(err, cases[i].msg));
        plan_free(&p);
    }
    plan p;
    EXPECT(parse_tensors("tensor 0 \"w\" f32 param [2] init normal 1e308 0\ntensor 1 \"x\" i32 input [2] data randint 1\n"
                         "tensor 2 \"u\" f32 param [2] init uniform -1e308 -1e307\n", &p) == PLAN_OK);
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_OK);
    p.tensors[1].source = PLAN_DATA_TEACHER + 1;
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "tensor 1 \"x\": data 8 unknown"));
    p.tensors[1].source = PLAN_DATA_TEACHER, p.tensors[1].a = 2; // teacher labels are floats
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "data teacher fills a float tensor"));
    p.tensors[1].dtype = 0, p.tensors[1].a = -1;
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "data teacher wants a finite scale >= 0"));
    p.tensors[1].a = 2, p.tensors[1].b = -1;
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_OK);
    p.tensors[1].dtype = 3, p.tensors[1].a = 1, p.tensors[1].b = 0;
    p.tensors[1].source = PLAN_DATA_RANDINT;
    p.tensors[0].source = PLAN_INIT_UNIFORM + 1;
    EXPECT(plan_validate(&p, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "tensor 0 \"w\": init 5 unknown"));
    plan_free(&p);
}

// The text form's syntax for sources: the names and the numbers each takes, nothing else.
static void test_source_syntax(void) {
    static const struct { const char *line, *msg; } cases[] = {
        {"tensor 0 \"w\" f32 param [2] init gaussian 0 1", "sources:3: init: unknown name 'gaussian'"},
        {"tensor 0 \"w\" f32 param [2] init none", "sources:3: init: unknown name 'none'"},
        {"tensor 0 \"x\" f32 input [2] data none", "sources:3: data: unknown name 'none'"},
        {"tensor 0 \"w\" f32 param [2] init normal 0", "sources:3: init normal std: expected a number, found the end of the line"},
        {"tensor 0 \"w\" f32 param [2] init uniform x 1", "sources:3: init uniform low: expected a number, found 'x'"},
        {"tensor 0 \"w\" f32 param [2] init zeros 1", "sources:3: unexpected '1'"},
        {"tensor 0 \"x\" i32 input [2] data randint", "sources:3: data high: expected a number, found the end of the line"},
        {"tensor 0 \"x\" f32 input [2] data normal 1", "sources:3: unexpected '1'"},
        {"tensor 0 \"x\" f32 input [2] init zeros", "sources:3: init: an input takes 'data NAME', not 'init'"},
        {"tensor 0 \"w\" f32 param [2] data normal", "sources:3: data: only an input takes 'data' (the param's source is written 'init NAME')"},
        {"tensor 0 \"w\" f32 param [2] init zeros copies 2", "sources:3: unexpected 'copies'"},
        {"tensor 0 \"w\" f32 param [2] init ones init ones", "sources:3: unexpected 'init'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char line[256];
        snprintf(line, sizeof(line), "%s\n", cases[i].line);
        plan p;
        bool ok = parse_tensors(line, &p) == PLAN_ERR_FORMAT && strstr(err, cases[i].msg);
        if (!ok) fprintf(stderr, "     %s: %s\n", cases[i].line, err);
        EXPECT(ok);
        plan_free(&p);
    }
}

// The operator code of a name in runtime/ops.def.
static uint32_t op_code(const char *name) {
    for (uint32_t k = 0; plan_op_name(k); k++)
        if (!strcmp(plan_op_name(k), name)) return k;
    return UINT32_MAX;
}

// Which split dimensions leave partial sums (plan_check's partial-sum rule), read off the
// operators' annotations: a reduction letter that the output lacks.
static void test_sums_away(void) {
    uint32_t lin = op_code("linear"), gw = op_code("linear_grad_w"), gx = op_code("linear_grad_x"), rs = op_code("reduce_sum");
    uint32_t relu = op_code("relu"), cat = op_code("concat"), lnw = op_code("layernorm_grad_w"), emb = op_code("embedding_grad");
    EXPECT(!check_op_sums_away(lin, 0, 2, 0, 2, 0));  // linear's batch: kept
    EXPECT(check_op_sums_away(lin, 0, 2, 1, 2, 0));   // its k+: summed (row-parallel)
    EXPECT(check_op_sums_away(lin, 1, 2, 1, 2, 0));   // the weight's k+
    EXPECT(!check_op_sums_away(lin, 1, 2, 0, 2, 0));  // the weight's n: kept
    EXPECT(check_op_sums_away(gw, 0, 3, 0, 2, 0) && check_op_sums_away(gw, 0, 3, 1, 2, 0)); // *b+ over two leading dims
    EXPECT(!check_op_sums_away(gw, 0, 3, 2, 2, 0));   // n: kept
    EXPECT(check_op_sums_away(gx, 0, 2, 1, 2, 0) && !check_op_sums_away(gx, 0, 2, 0, 2, 0));
    EXPECT(check_op_sums_away(rs, 0, 3, 0, 1, 0) && check_op_sums_away(rs, 0, 3, 1, 1, 0) && !check_op_sums_away(rs, 0, 3, 2, 1, 0));
    EXPECT(!check_op_sums_away(relu, 0, 2, 0, 2, 0) && !check_op_sums_away(cat, 0, 2, 0, 2, 0));
    EXPECT(check_op_sums_away(lnw, 0, 3, 1, 1, 0) && check_op_sums_away(lnw, 0, 3, 1, 1, 1) && !check_op_sums_away(lnw, 0, 3, 2, 1, 0));
    EXPECT(check_op_sums_away(emb, 1, 2, 0, 2, 0));  // the ids' batch: a table's gradient sums over it
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    test_hashes();
    test_all_good_plans();
    test_corruption();
    test_corruption_behind_crcs();
    test_truncation_magic_version();
    test_rank_read();
    test_free();
    test_grow();
    test_text_edges();
    test_shard_geometry();
    test_coll_shards();
    test_copy_shards();
    test_long_loops();
    test_encode_refuses();
    test_source_names();
    test_sums_away();
    test_source_round_trip();
    test_source_canonical();
    test_source_validate();
    test_source_syntax();
    return test_summary();
}
