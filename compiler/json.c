/*
 * json.c: the only file that sees cJSON.
 *
 * It parses a whole document with a length bound (so a file with a NUL byte or no terminator is
 * still read exactly), turns a syntax error into FILE:LINE:COL, rejects trailing content, and
 * gives the loaders checked accessors that report "FILE:POINTER: expected ..., got ..." with the
 * RFC 6901 JSON Pointer of the node. The pcc_json handle is a cJSON node in disguise; callers
 * cannot reach into it. json_close frees the tree, so loaders copy what they keep into their
 * arena before they return.
 */
#include "plancc.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#define J(v) ((const cJSON *)(const void *)(v))

/* ---- strict syntax check ----
 *
 * cJSON is lenient (it treats every byte up to 0x20 as whitespace, accepts leading zeros, raw
 * control characters in strings, and drops the rest of a string after a NUL) and its error
 * position is sometimes one past the fault. So the document is first checked here, strictly by
 * RFC 8259, with the exact line:column of the first fault and a message that says what was
 * expected; cJSON then only ever parses valid JSON.
 */

#define JSON_MAX_DEPTH 512

typedef struct jscan {
    const char *text, *p, *end;
    int depth;
    const char *err_at;
    const char *open_at; // the innermost open bracket, for "not closed"
    char msg[160];
} jscan;

static bool js_fail(jscan *s, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool js_fail(jscan *s, const char *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    s->err_at = at;
    return false;
}

static void js_pos(const char *text, const char *at, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *q = text; q < at; q++) {
        if (*q == '\n') (*line)++, *col = 1;
        else (*col)++;
    }
}

static bool js_describe(jscan *s, const char *what) {
    if (s->p >= s->end) {
        if (s->open_at) {
            int l, c;
            js_pos(s->text, s->open_at, &l, &c);
            return js_fail(s, s->end, "unexpected end of the document (the %c opened at %d:%d is not closed)", *s->open_at, l, c);
        }
        return js_fail(s, s->end, "unexpected end of the document; expected %s", what);
    }
    unsigned char c = (unsigned char)*s->p;
    if (c == 0) return js_fail(s, s->p, "NUL byte in the document");
    if (c < 0x20) return js_fail(s, s->p, "control character U+%04X in the document", c);
    if (c == '/') return js_fail(s, s->p, "comments are not JSON; expected %s", what);
    if (c == '\'') return js_fail(s, s->p, "JSON strings use double quotes; expected %s", what);
    if (c >= 0x80) return js_fail(s, s->p, "unexpected non-ASCII character; expected %s", what);
    return js_fail(s, s->p, "unexpected '%c'; expected %s", c, what);
}

static void js_ws(jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static bool js_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool js_string(jscan *s) {
    const char *open = s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return true;
        }
        if (c == 0) return js_fail(s, s->p, "NUL byte in a string");
        if (c < 0x20) return js_fail(s, s->p, "control character U+%04X in a string (write it as an escape)", c);
        if (c == '\\') {
            const char *esc = s->p++;
            if (s->p >= s->end) break;
            char e = *s->p;
            if (e == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (s->p + i >= s->end || !js_hex(s->p[i])) return js_fail(s, esc, "\\u wants 4 hex digits");
                if (strncmp(s->p + 1, "0000", 4) == 0) return js_fail(s, esc, "\\u0000 (NUL) is not allowed in a string");
                s->p += 5;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || !e) return js_fail(s, esc, "invalid escape \\%c", e >= 0x20 && e < 0x7f ? e : '?');
        }
        s->p++;
    }
    int l, c;
    js_pos(s->text, open, &l, &c);
    return js_fail(s, s->end, "unexpected end of the document inside the string opened at %d:%d", l, c);
}

static bool js_number(jscan *s) {
    const char *q = s->p;
    if (q < s->end && *q == '-') q++;
    if (q >= s->end || *q < '0' || *q > '9') return js_describe(s, "a value");
    if (*q == '0' && q + 1 < s->end && q[1] >= '0' && q[1] <= '9') return js_fail(s, q, "numbers may not have leading zeros");
    while (q < s->end && *q >= '0' && *q <= '9') q++;
    if (q < s->end && *q == '.') {
        q++;
        if (q >= s->end || *q < '0' || *q > '9') return js_fail(s, q, "a digit must follow the decimal point");
        while (q < s->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < s->end && (*q == '+' || *q == '-')) q++;
        if (q >= s->end || *q < '0' || *q > '9') return js_fail(s, q, "a digit must follow the exponent");
        while (q < s->end && *q >= '0' && *q <= '9') q++;
    }
    s->p = q;
    return true;
}

static bool js_value(jscan *s);

static bool js_container(jscan *s) {
    bool obj = *s->p == '{';
    char close = obj ? '}' : ']';
    const char *saved_open = s->open_at;
    s->open_at = s->p;
    if (++s->depth > JSON_MAX_DEPTH) return js_fail(s, s->p, "nested deeper than %d levels", JSON_MAX_DEPTH);
    s->p++;
    js_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        s->open_at = saved_open;
        return true;
    }
    for (;;) {
        if (obj) {
            if (s->p >= s->end || *s->p != '"') return js_describe(s, "a string key");
            if (!js_string(s)) return false;
            js_ws(s);
            if (s->p >= s->end || *s->p != ':') return js_describe(s, "':' after the key");
            s->p++;
            js_ws(s);
        }
        if (!js_value(s)) return false;
        js_ws(s);
        if (s->p < s->end && *s->p == ',') {
            const char *comma = s->p++;
            js_ws(s);
            if (s->p < s->end && *s->p == close) return js_fail(s, comma, "trailing comma before '%c'", close);
            continue;
        }
        if (s->p < s->end && *s->p == close) {
            s->p++;
            s->depth--;
            s->open_at = saved_open;
            return true;
        }
        return js_describe(s, obj ? "',' or '}'" : "',' or ']'");
    }
}

static bool js_literal(jscan *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return js_describe(s, "a value");
    s->p += n;
    return true;
}

static bool js_value(jscan *s) {
    if (s->p >= s->end) return js_describe(s, "a value");
    switch (*s->p) {
    case '{': case '[': return js_container(s);
    case '"': return js_string(s);
    case 't': return js_literal(s, "true");
    case 'f': return js_literal(s, "false");
    case 'n': return js_literal(s, "null");
    default: return js_number(s);
    }
}

// Checks text[0..len) is one JSON document; on a fault fills *at and msg.
static bool json_syntax_ok(const char *text, size_t len, const char **at, char *msg, size_t msg_n) {
    jscan s = {.text = text, .p = text, .end = text + len};
    js_ws(&s);
    bool ok = js_value(&s);
    if (ok) {
        js_ws(&s);
        if (s.p < s.end) ok = *s.p == 0 ? js_fail(&s, s.p, "NUL byte in the document")
                                        : js_fail(&s, s.p, "content after the end of the JSON document");
    }
    if (!ok) {
        *at = s.err_at;
        snprintf(msg, msg_n, "%s", s.msg);
    }
    return ok;
}

pcc_status json_open(pcc_jreader *r, pcc_arena *a, const char *file, const char *text, size_t len,
                     pcc_json **root) {
    r->arena = a;
    r->file = file;
    r->root = NULL;
    *root = NULL;
    const char *at;
    char msg[160], where[64];
    int line, col;
    if (len == 0) return diag(file, "1:1", "syntax error: the file is empty");
    if (!json_syntax_ok(text, len, &at, msg, sizeof msg)) {
        js_pos(text, at, &line, &col);
        snprintf(where, sizeof where, "%d:%d", line, col);
        return diag(file, where, "syntax error: %s", msg);
    }
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) return diag(file, "1:1", "the JSON document could not be read (out of memory?)");
    r->root = doc;
    *root = (pcc_json *)(void *)doc;
    return PCC_OK;
}

static void cursors_reset(void);

void json_close(pcc_jreader *r) {
    cursors_reset();
    if (r && r->root) cJSON_Delete(r->root);
    if (r) r->root = NULL;
}

pcc_jtype json_type(const pcc_json *v) {
    const cJSON *j = J(v);
    if (!j) return PCC_J_INVALID;
    if (cJSON_IsNull(j)) return PCC_J_NULL;
    if (cJSON_IsBool(j)) return PCC_J_BOOL;
    if (cJSON_IsNumber(j)) return PCC_J_NUMBER;
    if (cJSON_IsString(j)) return PCC_J_STRING;
    if (cJSON_IsArray(j)) return PCC_J_ARRAY;
    if (cJSON_IsObject(j)) return PCC_J_OBJECT;
    return PCC_J_INVALID;
}

const char *json_type_name(pcc_jtype t) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string",
                                        "an array", "an object", "nothing"};
    return names[t];
}

// cJSON's arrays and objects are linked lists, so counting and indexing walk them. The loaders
// ask for the size and then for items 0, 1, 2, ... of a container, while walking nested
// containers in between; remembering the last position in each of the few containers in use
// makes that linear instead of quadratic (a 60,000-op model loads in milliseconds, not half a
// minute). The compiler is single-threaded.
enum { CURSORS = 16 };
static struct cursor {
    const cJSON *arr, *item;
    int i, size;
    unsigned long used; // for least-recently-used eviction: the outer loops' containers stay
} cursors[CURSORS];
static unsigned long cursor_clock;

static struct cursor *cursor_of(const cJSON *a) {
    struct cursor *lru = &cursors[0];
    for (int k = 0; k < CURSORS; k++) {
        if (cursors[k].arr == a) {
            cursors[k].used = ++cursor_clock;
            return &cursors[k];
        }
        if (cursors[k].used < lru->used) lru = &cursors[k];
    }
    *lru = (struct cursor){.arr = a, .item = NULL, .i = -1, .size = -1, .used = ++cursor_clock};
    return lru;
}

static void cursors_reset(void) { memset(cursors, 0, sizeof cursors); }

int json_size(const pcc_json *v) {
    struct cursor *c = cursor_of(J(v));
    if (c->size < 0) c->size = cJSON_GetArraySize(J(v));
    return c->size;
}

pcc_json *json_at(const pcc_json *arr, int i) {
    struct cursor *c = cursor_of(J(arr));
    if (c->item && i == c->i + 1) c->item = c->item->next;
    else if (!c->item || i != c->i) c->item = cJSON_GetArrayItem(J(arr), i);
    c->i = i;
    return (pcc_json *)(void *)c->item;
}

const char *json_key(const pcc_json *member) { return J(member)->string; }

pcc_json *json_get(const pcc_json *obj, const char *key) {
    // Exact, case-sensitive: a key "Dims" is an unknown key, not "dims".
    return (pcc_json *)(void *)cJSON_GetObjectItemCaseSensitive(J(obj), key);
}

const char *json_ptr_key(pcc_jreader *r, const char *ptr, const char *key) {
    size_t extra = 0;
    for (const char *p = key; *p; p++) extra += (*p == '~' || *p == '/');
    size_t n = strlen(ptr), k = strlen(key);
    char *s = arena_alloc(r->arena, n + 1 + k + extra + 1);
    memcpy(s, ptr, n);
    char *d = s + n;
    *d++ = '/';
    for (const char *p = key; *p; p++) {
        if (*p == '~') {
            *d++ = '~';
            *d++ = '0';
        } else if (*p == '/') {
            *d++ = '~';
            *d++ = '1';
        } else {
            *d++ = *p;
        }
    }
    *d = 0;
    return s;
}

const char *json_ptr_idx(pcc_jreader *r, const char *ptr, int i) {
    return arena_printf(r->arena, "%s/%d", ptr, i);
}

pcc_status json_expect(pcc_jreader *r, const pcc_json *v, const char *ptr, pcc_jtype t) {
    pcc_jtype got = json_type(v);
    if (got == t) return PCC_OK;
    return diag(r->file, ptr, "expected %s, got %s", json_type_name(t), json_type_name(got));
}

pcc_status json_num(pcc_jreader *r, const pcc_json *v, const char *ptr, double lo, double hi,
                    double *out) {
    pcc_status st = json_expect(r, v, ptr, PCC_J_NUMBER);
    if (st) return st;
    double d = J(v)->valuedouble;
    if (!isfinite(d)) return diag(r->file, ptr, "number is out of range");
    if (d < lo || d > hi) return diag(r->file, ptr, "%g is out of range [%g, %g]", d, lo, hi);
    *out = d;
    return PCC_OK;
}

pcc_status json_int(pcc_jreader *r, const pcc_json *v, const char *ptr, int64_t lo, int64_t hi,
                    int64_t *out) {
    pcc_jtype got = json_type(v);
    if (got != PCC_J_NUMBER)
        return diag(r->file, ptr, "expected an integer, got %s", json_type_name(got));
    double d = J(v)->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return diag(r->file, ptr, "expected an integer, got %g", d);
    if (d < (double)lo || d > (double)hi) {
        if (fabs(d) < 1e15)
            return diag(r->file, ptr, "integer %.0f is out of range [%lld, %lld]", d, (long long)lo, (long long)hi);
        return diag(r->file, ptr, "%g is out of range [%lld, %lld]", d, (long long)lo, (long long)hi);
    }
    *out = (int64_t)d;
    return PCC_OK;
}

pcc_status json_str(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out) {
    pcc_status st = json_expect(r, v, ptr, PCC_J_STRING);
    if (st) return st;
    *out = arena_strdup(r->arena, J(v)->valuestring);
    return PCC_OK;
}

pcc_status json_bool(pcc_jreader *r, const pcc_json *v, const char *ptr, bool *out) {
    pcc_status st = json_expect(r, v, ptr, PCC_J_BOOL);
    if (st) return st;
    *out = cJSON_IsTrue(J(v));
    return PCC_OK;
}

pcc_status json_name(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out) {
    pcc_status st = json_expect(r, v, ptr, PCC_J_STRING);
    if (st) return st;
    const char *s = J(v)->valuestring;
    size_t n = strlen(s);
    if (n == 0) return diag(r->file, ptr, "name is empty");
    if (n > PCC_MAX_NAME) return diag(r->file, ptr, "name is longer than %d characters", PCC_MAX_NAME);
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok) return diag(r->file, ptr, "name \"%s\" has a character outside [A-Za-z0-9_.:-]", s);
    }
    *out = arena_strdup(r->arena, s);
    return PCC_OK;
}

static bool in_list(const char *const *list, const char *s) {
    for (; list && *list; list++)
        if (strcmp(*list, s) == 0) return true;
    return false;
}

pcc_status json_keys(pcc_jreader *r, const pcc_json *obj, const char *ptr,
                     const char *const *allowed, const char *const *required) {
    pcc_status st = json_expect(r, obj, ptr, PCC_J_OBJECT);
    if (st) return st;
    int n = json_size(obj);
    pcc_symtab seen = {0};
    if (n > 16) symtab_init(&seen, r->arena, n);
    int i = 0;
    for (const cJSON *m = J(obj)->child; m; m = m->next, i++) {
        if (allowed && !in_list(allowed, m->string)) {
            if (allowed[0] && !allowed[1])
                return diag(r->file, json_ptr_key(r, ptr, m->string), "unknown key \"%s\" (the only key here is \"%s\")", m->string, allowed[0]);
            return diag(r->file, json_ptr_key(r, ptr, m->string), "unknown key \"%s\"", m->string);
        }
        bool dup = false;
        if (n > 16) {
            dup = !symtab_put(&seen, r->arena, m->string, i);
        } else {
            for (const cJSON *p = J(obj)->child; p != m; p = p->next)
                if (strcmp(p->string, m->string) == 0) dup = true;
        }
        if (dup) return diag(r->file, json_ptr_key(r, ptr, m->string), "duplicate key \"%s\"", m->string);
    }
    for (; required && *required; required++)
        if (!json_get(obj, *required))
            return diag(r->file, ptr, "missing required key \"%s\"", *required);
    return PCC_OK;
}
