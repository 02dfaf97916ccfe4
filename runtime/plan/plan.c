/*
 * plan.c: what every file of the plan library uses: the memory a plan owns and the library's
 * way of failing with a message.
 *
 * Memory. A plan that the library builds (plan_decode, plan_read, plan_parse) owns every array
 * and string it points to: each is a block from plan_alloc, zeroed and aligned for any type, on
 * a list that plan_free releases at once. The blocks are never freed one by one, so a parser
 * that grows an array leaves the old copy on the list until plan_free (the price of never
 * freeing a pointer another item may still hold); plan_free releases the blocks and zeroes
 * the plan.
 *
 * Errors. Every reader and checker returns a plan_status and writes its message into a buffer
 * the caller passes (plan_errorf); the library writes no diagnostics of its own (plan_print
 * writes the text form where it is told) and never exits.
 */
#include "plan.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

plan_status plan_errorf(plan_status st, char *err, size_t err_n, const char *fmt, ...) {
    if (err && err_n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_n, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- memory a plan owns: a list of blocks, each aligned for any type ---- */

typedef union plan_block {
    union plan_block *next;
    max_align_t align;
} plan_block;

void *plan_alloc(plan *p, size_t n) {
    if (!p || n > SIZE_MAX - sizeof(plan_block)) return NULL;
    plan_block *b = calloc(1, sizeof(plan_block) + n);
    if (!b) return NULL;
    b->next = p->owner;
    p->owner = b;
    return b + 1;
}

void *plan_grow(plan *p, void *arr, uint32_t n, uint32_t need, uint32_t *cap, size_t elem) {
    if (need <= *cap) return arr;
    uint64_t room = *cap > n ? *cap : n;
    while (room < need) room = room ? 2 * room : 8;
    if (room > UINT32_MAX || (elem && room > SIZE_MAX / elem)) return NULL;
    void *v = plan_alloc(p, (size_t)room * elem);
    if (!v) return NULL;
    if (n) memcpy(v, arr, (size_t)n * elem);
    *cap = (uint32_t)room;
    return v;
}

void plan_free(plan *p) {
    if (!p) return;
    plan_block *b = p->owner;
    while (b) {
        plan_block *next = b->next;
        free(b);
        b = next;
    }
    memset(p, 0, sizeof(*p));
}
