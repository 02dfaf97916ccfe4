/*
 * tests/forkserver.c: runs one tool (plancc or plandump, linked in as tool_main) once per
 * request, each run in a child forked from this one process. Under valgrind the corpora's
 * cases then share one start of the memory checker: its start-up (about half a second of CPU,
 * most of a rejected input's time under it) is paid once, not once a case. Each child is still
 * checked alone: valgrind follows a fork, and at the child's exit checks its leaks and exits with
 * --error-exitcode where it found an error, so a case fails exactly as it did run on its own.
 *
 * Protocol (tests/common.py's Forkserver speaks it), on standard input: a request is strings
 * each ended by a NUL byte, namely the file for the child's standard output, the file for its
 * standard error, the number of arguments in decimal, then the tool's arguments (argv[1]
 * onward; any may be empty). For each,
 * one line on standard output: "exit N PID" or "signal N PID" (PID the child's, by which
 * valgrind's reports name it: they go to the server's standard error, not the child's). End of input ends the server (exit 0).
 * The child's standard input is /dev/null; its working directory and environment are the
 * server's.
 *
 * A request whose output file is the empty string is a warm-up: the tool runs in the server
 * itself, its standard streams on /dev/null, and the reply is "warm N" (N its exit status).
 * Under valgrind a child's time goes mostly to translating the code it runs for the first time;
 * what the server has run, every later child inherits translated (a rejected plan under plandump:
 * 0.32 s a case, 0.1 s once warmed). Only for a run that leaves nothing behind: its heap all
 * freed (the leak check of every case proves that) and no state kept for the next run. plandump
 * keeps none; plancc keeps its warnings and its search's counters process-wide, so its warm-ups
 * (tests/run_reject.py) end in the loaders with no warning. getopt's own state, which a fresh
 * process starts without, is reset after each.
 *
 * The server allocates nothing on the heap and writes through no stdio buffer, so a child
 * inherits no allocation of its parent for the leak check to find, and no buffered output to
 * write twice (a warm-up's buffered output is flushed to /dev/null before the streams return).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int tool_main(int argc, char **argv);

#ifndef TOOL_NAME
#error "build with -DTOOL_NAME=\"plancc\" (the tool's argv[0])"
#endif

enum { MAX_BYTES = 1 << 16, MAX_ARGS = 256 };

static char req[MAX_BYTES];
static size_t have; // bytes of req read so far (the start of the next request onward)

static void die(const char *what) {
    char line[256];
    int n = snprintf(line, sizeof line, "forkserver: %s: %s\n", what, strerror(errno));
    if (write(2, line, (size_t)n) < 0) _exit(3);
    _exit(3);
}

// The length of the request at the start of req, or 0 where it is not all there yet; *argc is
// its argument count (refused past MAX_ARGS).
static size_t request_length(int *argc) {
    size_t strings = 0, want = 3;
    for (size_t i = 0, start = 0; i < have; i++) {
        if (req[i]) continue;
        if (++strings == 3) {
            char *end;
            long n = strtol(req + start, &end, 10);
            if (end == req + start || *end || n < 0 || n >= MAX_ARGS) {
                errno = EPROTO;
                die("a request's argument count");
            }
            *argc = (int)n, want = 3 + (size_t)n;
        }
        if (strings == want) return i + 1;
        start = i + 1;
    }
    return 0;
}

static void run_child(char **argv, int argc, const char *out, const char *err) {
    int in = open("/dev/null", O_RDONLY);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0) die("cannot open a child's files");
    if (dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) die("dup2");
    close(in), close(o), close(e);
    exit(tool_main(argc, argv));
}

// A warm-up (above): the tool in this process, its streams on /dev/null; its exit status.
static int warm_up(char **argv, int argc) {
    int saved[3], null = open("/dev/null", O_RDWR);
    if (null < 0) die("cannot open /dev/null");
    for (int fd = 0; fd < 3; fd++)
        if ((saved[fd] = dup(fd)) < 0 || dup2(null, fd) < 0) die("dup2");
    close(null);
    int status = tool_main(argc, argv);
    fflush(stdout), fflush(stderr);
    for (int fd = 0; fd < 3; fd++) {
        if (dup2(saved[fd], fd) < 0) die("dup2");
        close(saved[fd]);
    }
    optind = 0, opterr = 1; // GNU getopt starts afresh, as in a new process
    return status;
}

int main(void) {
    signal(SIGPIPE, SIG_DFL);
    for (;;) {
        size_t len;
        int nargs = 0;
        while (!(len = request_length(&nargs))) {
            if (have == sizeof req) {
                errno = E2BIG;
                die("a request over 64 KiB");
            }
            ssize_t n = read(0, req + have, sizeof req - have);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) die("read");
            if (n == 0) {
                if (have) {
                    errno = EPROTO;
                    die("input ends inside a request");
                }
                return 0;
            }
            have += (size_t)n;
        }
        static char *argv[MAX_ARGS + 1];
        char *out = req, *err = out + strlen(out) + 1, *s = err + strlen(err) + 1;
        s += strlen(s) + 1; // the count
        int argc = 0;
        argv[argc++] = TOOL_NAME;
        for (int k = 0; k < nargs; k++, s += strlen(s) + 1) argv[argc++] = s;
        argv[argc] = NULL;
        char line[48];
        int n;
        if (!*out) {
            n = snprintf(line, sizeof line, "warm %d\n", warm_up(argv, argc));
        } else {
            pid_t pid = fork();
            if (pid < 0) die("fork");
            if (pid == 0) run_child(argv, argc, out, err);
            int status;
            while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) die("waitpid");
            n = WIFSIGNALED(status) ? snprintf(line, sizeof line, "signal %d %ld\n", WTERMSIG(status), (long)pid)
                                    : snprintf(line, sizeof line, "exit %d %ld\n", WEXITSTATUS(status), (long)pid);
        }
        if (write(1, line, (size_t)n) != n) die("write");
        memmove(req, req + len, have - len);
        have -= len;
    }
}
