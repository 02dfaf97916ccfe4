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
#include <string.h>

#define J(v) ((const cJSON *)(const void *)(v))

pcc_status json_open(pcc_jreader *r, pcc_arena *a, const char *file, const char *text, size_t len,
                     pcc_json **root) {
    r->arena = a;
    r->file = file;
    r->root = NULL;
    *root = NULL;
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!end) end = text;
    const char *stop = text + len;
    bool trailing = false;
    if (doc) {
        while (end < stop && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
        if (end < stop) {
            cJSON_Delete(doc);
            doc = NULL;
            trailing = true;
        }
    }
    if (!doc) {
        if (end > stop) end = stop;
        int line = 1, col = 1;
        for (const char *p = text; p < end; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        char where[64];
        snprintf(where, sizeof where, "%d:%d", line, col);
        if (len == 0) return diag(file, "1:1", "syntax error: the file is empty");
        if (end < stop && end > text && memchr(text, 0, (size_t)(end - text + 1)))
            return diag(file, where, "syntax error: NUL byte in the document");
        if (trailing) return diag(file, where, "syntax error: content after the end of the JSON document");
        // A document that ends inside a string or with brackets open was cut short; say so,
        // and where the innermost open bracket began, rather than blame its last token.
        enum { MAXD = 1024 };
        static int open_l[MAXD], open_c[MAXD];
        int depth = 0, l = 1, c = 1;
        bool in_str = false, esc = false;
        for (const char *p = text; p < stop; p++) {
            if (in_str) {
                if (esc) esc = false;
                else if (*p == '\\') esc = true;
                else if (*p == '"') in_str = false;
            } else if (*p == '"') {
                in_str = true;
            } else if (*p == '{' || *p == '[') {
                if (depth < MAXD) open_l[depth] = l, open_c[depth] = c;
                depth++;
            } else if ((*p == '}' || *p == ']') && depth > 0) {
                depth--;
            }
            if (*p == '\n') l++, c = 1;
            else c++;
        }
        int open_line = depth > 0 && depth <= MAXD ? open_l[depth - 1] : 0;
        int open_col = depth > 0 && depth <= MAXD ? open_c[depth - 1] : 0;
        if (in_str || depth > 0) {
            char at[64];
            snprintf(at, sizeof at, "%d:%d", l, c);
            if (in_str) return diag(file, at, "syntax error: unexpected end of the document inside a string");
            return diag(file, at, "syntax error: unexpected end of the document (the bracket opened at %d:%d is not closed)",
                        open_line, open_col);
        }
        return diag(file, where, "syntax error: invalid JSON here");
    }
    r->root = doc;
    *root = (pcc_json *)(void *)doc;
    return PCC_OK;
}

void json_close(pcc_jreader *r) {
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

int json_size(const pcc_json *v) { return cJSON_GetArraySize(J(v)); }

pcc_json *json_at(const pcc_json *arr, int i) {
    return (pcc_json *)(void *)cJSON_GetArrayItem(J(arr), i);
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
    if (d < (double)lo || d > (double)hi)
        return diag(r->file, ptr, "integer %.0f is out of range [%lld, %lld]", d, (long long)lo,
                    (long long)hi);
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
