/*
 * cli.h: the command-line conventions plancc, plandump and planrun share (cli.c).
 *
 *   - One table of exit codes (CLI_EXIT_CODES, an X-macro): the same condition gives the same
 *     code in all three tools, and each tool's --help prints the table from here.
 *   - Long options are never abbreviated: getopt_long accepts any unambiguous prefix (`--clu`
 *     for `--cluster`), which makes an option added later break a command that used to work.
 *     cli_check_options runs before getopt_long and refuses anything that is not a whole name,
 *     with the closest name as a suggestion ("did you mean --cluster?").
 *   - Progress on stderr while long work runs, whether or not stderr is a terminal: a thread
 *     prints a line every few seconds (PLANCC_PROGRESS_S, default 5) naming the work and how
 *     far it is; -q turns it off.
 */
#ifndef PLANCC_CLI_H
#define PLANCC_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

// X(code, NAME, meaning): every exit code of the three tools.
#define CLI_EXIT_CODES(X)                                                                                   \
    X(0, OK, "success")                                                                                     \
    X(1, INTERNAL, "internal error (a bug: please report it)")                                              \
    X(2, INPUT, "invalid input or usage (a bad model, cluster, option or config file)")                     \
    X(3, INFEASIBLE, "infeasible: nothing fits (plancc says what would)")                                   \
    X(4, NOT_PLAN, "not a plan file (unreadable, bad magic, version or checksum, truncated, malformed)")    \
    X(5, CHECK, "the plan fails plan_check")                                                                \
    X(6, STALE, "stale plan (--model or --cluster differ from what it was compiled from)")                  \
    X(7, DIFFER, "--compare found a difference")                                                            \
    X(8, FILE, "unusable data, checkpoint or output file")                                                  \
    X(9, BACKEND, "the backend cannot run here (no GPU, built without it, a dtype it does not run)")        \
    X(10, LAUNCH, "inconsistent launch (launcher variables disagree, world size, rendezvous)")              \
    X(11, STEP, "a step failed (deadlock, timeout, kernel error, a dead peer)")                             \
    X(12, NONFINITE, "non-finite loss or gradient")                                                         \
    X(13, BACKGROUND, "unusable --background plan")                                                         \
    X(14, LIMIT, "beyond a limit of the tool (a plan too large to check or simulate)")

enum cli_exit {
#define CLI_EXIT_ENUM(code, name, text) CLI_EXIT_##name = code,
    CLI_EXIT_CODES(CLI_EXIT_ENUM)
#undef CLI_EXIT_ENUM
};

// Prints "Exit codes (the same in plancc, plandump and planrun):" and one line per code. Can't fail.
void cli_print_exit_codes(FILE *f);

// Checks argv the way getopt_long will read it (shortopts as getopt's, with ':' after an option
// that takes a value): every "--name" or "--name=value" must be exactly the name of one of
// longopts. Stops at "--". On a name that is not, prints "PROG: unknown option --x (did you mean
// --y?)" (or "PROG: --clu is not an option: options are not abbreviated; did you mean --cluster?")
// and returns -1; else 0.
int cli_check_options(const char *prog, int argc, char *const *argv, const char *shortopts, const struct option *longopts);

// The long option closest to `name` (without dashes): one that starts with it, or within an edit
// distance of about a third of its length; NULL when none is close.
const char *cli_suggest(const char *name, const struct option *longopts);
// The same over a NULL-terminated list of words.
const char *cli_suggest_word(const char *name, const char *const *words);

/* ---- progress ---- */

// Starts the progress thread of tool `prog` (nothing when quiet): every PLANCC_PROGRESS_S seconds
// (default 5; 0 turns it off) while some work is set, one line on stderr, "PROG: WORK, 12 s" or
// with a count "PROG: WORK: 40 of 100 steps, 12 s". Can't fail (without a thread: no progress).
void cli_progress_start(const char *prog, bool quiet);
// The work now running (copied; NULL: none, no lines) and its count (total 0: no count).
void cli_progress_work(const char *what, const char *unit, uint64_t total);
// How far the counted work is.
void cli_progress_count(uint64_t done);
// A note added to the next lines (copied; NULL: none), e.g. "loss 2.91".
void cli_progress_note(const char *note);
// Stops and joins the thread. Safe to call always.
void cli_progress_stop(void);

#endif
