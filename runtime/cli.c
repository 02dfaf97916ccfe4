/*
 * cli.c: what the command lines of plancc, plandump and planrun share (cli.h): the exit-code
 * table, whole long option names with a suggestion for a misspelt one, and a progress thread.
 *
 * Option names. getopt_long takes any unambiguous prefix of a long option. A prefix that works
 * today stops working the day an option with the same beginning is added (`--micro-batch` was
 * `--micro-batches` until `--micro-batch-size` came), so the three tools accept whole names
 * only. cli_check_options walks argv as getopt_long will (an option that takes a value skips
 * the next word unless written --name=value; a cluster of short options stops at the first that
 * takes a value) and refuses a name that is not one of the tool's, suggesting the closest.
 * "Closest" is the name that starts with what was typed (an abbreviation), else the smallest
 * Levenshtein distance within a third of the longer word (at least 2), ties to the first.
 *
 * Progress. Long work (planrun's steps, plandump's simulation) sets what it is doing and how far
 * it is; a thread wakes every PLANCC_PROGRESS_S seconds and prints one line on stderr when some
 * work is set. A thread rather than prints in the loops: a single step or simulation can itself
 * take minutes, and the line still comes. Lines go to stderr whether or not it is a terminal (a
 * job piped to a file shows it is alive in its log); -q starts no thread.
 */
#include "cli.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_print_exit_codes(FILE *f) {
    fprintf(f, "Exit codes (the same in plancc, plandump and planrun):\n");
#define CLI_EXIT_LINE(code, name, text) fprintf(f, "  %2d  %s\n", code, text);
    CLI_EXIT_CODES(CLI_EXIT_LINE)
#undef CLI_EXIT_LINE
}

/* ---- option names ---- */

// Levenshtein distance of a and b (each at most 63 characters; longer ones count as far).
static int distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 1000;
    int row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            if (up + 1 < best) best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

// The closest of n words got(i) to name; NULL when none is close.
static const char *closest(const char *name, const char *(*got)(const void *, int), const void *list) {
    size_t n = strlen(name);
    if (!n) return NULL;
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; got(list, i); i++) {
        const char *w = got(list, i);
        if (!strncmp(w, name, n)) return w; // an abbreviation of w
    }
    for (int i = 0; got(list, i); i++) {
        const char *w = got(list, i);
        size_t nw = strlen(w), longer = nw > n ? nw : n;
        int d = distance(name, w), limit = (int)(longer / 3) > 2 ? (int)(longer / 3) : 2;
        if (d <= limit && d < best_d) best = w, best_d = d;
    }
    return best;
}

static const char *longopt_at(const void *list, int i) { return ((const struct option *)list)[i].name; }
static const char *word_at(const void *list, int i) { return ((const char *const *)list)[i]; }

const char *cli_suggest(const char *name, const struct option *longopts) { return closest(name, longopt_at, longopts); }
const char *cli_suggest_word(const char *name, const char *const *words) { return closest(name, word_at, words); }

// The long option named exactly by arg (after "--", up to '='), or NULL.
static const struct option *find_long(const char *arg, const struct option *longopts, size_t *len) {
    const char *eq = strchr(arg, '=');
    *len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (const struct option *o = longopts; o->name; o++)
        if (strlen(o->name) == *len && !strncmp(o->name, arg, *len)) return o;
    return NULL;
}

static int unknown_long(const char *prog, const char *arg, size_t len, const struct option *longopts) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(len < 100 ? len : 100), arg);
    const char *s = cli_suggest(name, longopts);
    if (s && !strncmp(s, name, strlen(name)))
        fprintf(stderr, "%s: --%s is not an option: options are not abbreviated; did you mean --%s? (see %s --help)\n", prog, name,
                s, prog);
    else if (s)
        fprintf(stderr, "%s: unknown option --%s (did you mean --%s? see %s --help)\n", prog, name, s, prog);
    else
        fprintf(stderr, "%s: unknown option --%s (see %s --help)\n", prog, name, prog);
    return -1;
}

int cli_check_options(const char *prog, int argc, char *const *argv, const char *shortopts, const struct option *longopts) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) return 0;
        if (a[0] != '-' || !a[1]) continue; // an operand
        if (a[1] == '-') {
            size_t len;
            const struct option *o = find_long(a + 2, longopts, &len);
            if (!o) return unknown_long(prog, a + 2, len, longopts);
            if (o->has_arg == required_argument && !strchr(a, '=')) i++;
            continue;
        }
        for (const char *c = a + 1; *c; c++) { // a cluster of short options: getopt reports unknown ones itself
            const char *s = *c != ':' ? strchr(shortopts, *c) : NULL;
            if (s && s[1] == ':') {
                if (!c[1]) i++;
                break;
            }
        }
    }
    return 0;
}

/* ---- progress ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool started, stop;
    const char *prog;
    double every_s;
    char what[160], unit[32], note[96];
    uint64_t total, done;
    double since;   // when the work began
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void progress_line(void) {
    char count[96] = "";
    if (P.total) snprintf(count, sizeof count, ": %llu of %llu %s", (unsigned long long)P.done, (unsigned long long)P.total, P.unit);
    fprintf(stderr, "%s: %s%s, %.0f s%s%s\n", P.prog, P.what, count, mono_s() - P.since, P.note[0] ? ", " : "", P.note);
    fflush(stderr);
}

static void *progress_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&P.mu);
    while (!P.stop) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        double whole = (double)(long)P.every_s;
        t.tv_sec += (time_t)whole;
        t.tv_nsec += (long)((P.every_s - whole) * 1e9);
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&P.cv, &P.mu, &t);
        if (!P.stop && P.what[0] && mono_s() - P.since >= P.every_s * 0.999) progress_line();
    }
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

void cli_progress_start(const char *prog, bool quiet) {
    if (quiet || P.started) return;
    const char *e = getenv("PLANCC_PROGRESS_S");
    char *end;
    double every = e && *e ? strtod(e, &end) : 5;
    if (e && *e && (*end || !(every >= 0) || every > 86400)) every = 5;
    if (every == 0) return;
    P.prog = prog, P.every_s = every, P.stop = false;
    P.started = pthread_create(&P.th, NULL, progress_main, NULL) == 0;
}

void cli_progress_work(const char *what, const char *unit, uint64_t total) {
    pthread_mutex_lock(&P.mu);
    snprintf(P.what, sizeof P.what, "%s", what ? what : "");
    snprintf(P.unit, sizeof P.unit, "%s", unit ? unit : "");
    P.total = total, P.done = 0, P.note[0] = 0;
    P.since = mono_s();
    pthread_mutex_unlock(&P.mu);
}

void cli_progress_count(uint64_t done) {
    pthread_mutex_lock(&P.mu);
    P.done = done;
    pthread_mutex_unlock(&P.mu);
}

void cli_progress_note(const char *note) {
    pthread_mutex_lock(&P.mu);
    snprintf(P.note, sizeof P.note, "%s", note ? note : "");
    pthread_mutex_unlock(&P.mu);
}

void cli_progress_stop(void) {
    if (!P.started) return;
    pthread_mutex_lock(&P.mu);
    P.stop = true;
    pthread_cond_signal(&P.cv);
    pthread_mutex_unlock(&P.mu);
    pthread_join(P.th, NULL);
    P.started = false;
}
