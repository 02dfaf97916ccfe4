/*
 * file.c: the output and input files of plancc, plandump and planrun, written and read safely.
 * Every file a tool writes (a plan, a checkpoint) goes through plan_out_open ... plan_out_commit;
 * every whole file a tool reads into memory (a plan's text form, a checkpoint) through
 * plan_file_read.
 *
 * Writing. A regular file (or a path that does not exist yet) is written to a temporary file
 * next to it (PATH.tmp.XXXXXX), flushed to the disk (fsync) and renamed over PATH, so that a
 * reader sees the old file or the whole new one, never a part, even across a crash. Anything
 * else that exists at PATH (a character device such as /dev/null or /dev/stdout, a FIFO, a
 * socket) is opened and written in place: renaming over it would replace the device node or
 * the FIFO by a regular file (it did, for `plancc -o /dev/null` run as root). A directory is
 * refused. While a temporary file exists its name is on a small table that a handler of
 * SIGINT, SIGTERM and SIGHUP reads: it removes them and then dies of the signal as it would
 * have, so an interrupted --save leaves no PATH.tmp.* behind. The handler is installed the first
 * time a temporary file is made, and only where the signal's disposition is still the default
 * (a program that handles the signal itself keeps its handler).
 *
 * plan_out_check answers early, before hours of work, whether plan_out_open will be able to
 * write PATH: its folder exists and is writable, and PATH is not a directory.
 *
 * Reading. plan_file_read reads a whole file of at most `max` bytes, whatever it is (a regular
 * file, a pipe, /dev/stdin), and refuses a directory and anything longer than `max` with a
 * message, so that `plandump --assemble /dev/zero` stops at the limit instead of growing memory
 * without bound.
 *
 * Limits: at most PLAN_OUT_MAX_TEMP temporary files at once in one process (more are refused);
 * a symbolic link to a regular file is replaced by the new file (rename's meaning); in-place
 * output to a device is not atomic (there is nothing to be atomic about).
 */
#define _GNU_SOURCE 1
#include "plan.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PLAN_OUT_MAX_TEMP 16

/* ---- the temporary files a signal removes ---- */

static char *volatile temp_names[PLAN_OUT_MAX_TEMP];
static volatile sig_atomic_t handlers_installed;

static void on_signal(int sig) {
    for (int i = 0; i < PLAN_OUT_MAX_TEMP; i++) {
        char *name = temp_names[i];
        if (name) unlink(name);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    if (handlers_installed) return;
    handlers_installed = 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static bool temp_register(char *name) {
    install_handlers();
    for (int i = 0; i < PLAN_OUT_MAX_TEMP; i++)
        if (!temp_names[i]) return __atomic_store_n(&temp_names[i], name, __ATOMIC_SEQ_CST), true;
    return false;
}

static void temp_forget(const char *name) {
    for (int i = 0; i < PLAN_OUT_MAX_TEMP; i++)
        if (temp_names[i] == name) __atomic_store_n(&temp_names[i], NULL, __ATOMIC_SEQ_CST);
}

/* ---- writing ---- */

// The folder of path ("." for a bare name), malloc'd; NULL when out of memory.
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

plan_status plan_out_check(const char *path, char *err, size_t err_n) {
    struct stat sb;
    if (!path || !*path) return plan_errorf(PLAN_ERR_IO, err, err_n, "an empty file name");
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: is a directory", path);
        if (!S_ISREG(sb.st_mode)) // written in place: it must let us write
            return access(path, W_OK) == 0 ? PLAN_OK
                                           : plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: %s", path, strerror(errno));
    }
    char *dir = folder_of(path);
    if (!dir) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    plan_status st = PLAN_OK;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: the folder %s does not exist", path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: the folder %s: %s", path, dir, strerror(errno));
    free(dir);
    return st;
}

plan_status plan_out_open(plan_out *o, const char *path, char *err, size_t err_n) {
    memset(o, 0, sizeof *o);
    o->path = path;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: is a directory", path);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { // a device, a FIFO: in place, never renamed over
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
            plan_status st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot open for writing: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            return st;
        }
        return PLAN_OK;
    }
    size_t len = strlen(path);
    o->tmp = malloc(len + sizeof(".tmp.XXXXXX"));
    if (!o->tmp) return plan_errorf(PLAN_ERR_IO, err, err_n, "out of memory");
    memcpy(o->tmp, path, len);
    memcpy(o->tmp + len, ".tmp.XXXXXX", sizeof(".tmp.XXXXXX"));
    int fd = mkostemp(o->tmp, O_CLOEXEC);
    if (fd < 0) {
        plan_status st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot create a temporary file next to it: %s", path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return st;
    }
    if (!temp_register(o->tmp) || fchmod(fd, 0644) != 0 || !(o->f = fdopen(fd, "wb"))) {
        plan_status st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot set up its temporary file %s", path, o->tmp);
        close(fd);
        plan_out_abort(o);
        return st;
    }
    return PLAN_OK;
}

plan_status plan_out_commit(plan_out *o, char *err, size_t err_n) {
    if (!o->f) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: not open", o->path ? o->path : "?");
    plan_status st = PLAN_OK;
    bool bad = fflush(o->f) != 0 || ferror(o->f);
    // fsync where it means something: a device or a FIFO refuses it (EINVAL, ENOTSUP, EROFS).
    if (!bad && fsync(fileno(o->f)) != 0 && o->tmp) bad = true;
    if (bad) st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: %s", o->path, strerror(errno));
    if (fclose(o->f) != 0 && !st) st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: %s", o->path, strerror(errno));
    o->f = NULL;
    if (!st && o->tmp && rename(o->tmp, o->path) != 0)
        st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot rename %s to it: %s", o->path, o->tmp, strerror(errno));
    if (!st && o->tmp) { // the rename itself reaches the disk with the folder
        char *dir = folder_of(o->path);
        int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) fsync(dfd), close(dfd);
        free(dir);
        temp_forget(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
    }
    if (st) plan_out_abort(o);
    return st;
}

void plan_out_abort(plan_out *o) {
    if (!o) return;
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (o->tmp) {
        unlink(o->tmp);
        temp_forget(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
    }
}

plan_status plan_out_write_file(const char *path, const void *data, size_t n, char *err, size_t err_n) {
    plan_out o;
    plan_status st = plan_out_open(&o, path, err, err_n);
    if (st) return st;
    if (n && fwrite(data, 1, n, o.f) != n) {
        st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot write: %s", path, strerror(errno));
        plan_out_abort(&o);
        return st;
    }
    return plan_out_commit(&o, err, err_n);
}

/* ---- reading ---- */

plan_status plan_file_read(const char *path, size_t max, uint8_t **out, size_t *n, char *err, size_t err_n) {
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
        plan_status st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot read: %s", path,
                                     S_ISDIR(sb.st_mode) ? "it is a directory" : strerror(errno));
        close(fd);
        return st;
    }
    if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) {
        close(fd);
        return plan_errorf(PLAN_ERR_IO, err, err_n, "%s: %llu bytes, more than the %zu this reads", path,
                           (unsigned long long)sb.st_size, max);
    }
    size_t cap = S_ISREG(sb.st_mode) ? (size_t)sb.st_size + 1 : 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    plan_status st = buf ? PLAN_OK : plan_errorf(PLAN_ERR_IO, err, err_n, "%s: out of memory", path);
    while (!st) {
        if (len == cap) {
            size_t more = cap > max / 2 ? max + 1 : 2 * cap;
            uint8_t *b = more > cap ? realloc(buf, more) : NULL;
            if (!b) { st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: out of memory", path); break; }
            buf = b, cap = more;
        }
        ssize_t k = read(fd, buf + len, cap - len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: cannot read: %s", path, strerror(errno));
        else if (k == 0) break;
        else len += (size_t)k;
        if (!st && len > max) st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: more than the %zu bytes this reads", path, max);
    }
    close(fd);
    if (!st && len == cap) { // room for the NUL that text readers want
        uint8_t *b = realloc(buf, cap + 1);
        if (!b) st = plan_errorf(PLAN_ERR_IO, err, err_n, "%s: out of memory", path);
        else buf = b;
    }
    if (st) return free(buf), st;
    buf[len] = 0;
    *out = buf;
    *n = len;
    return PLAN_OK;
}
