/*
 * unit_files.c: runtime/plan/file.c, the output files of plancc, plandump and planrun and the
 * whole-file reader.
 *   - a regular file is replaced whole (temporary file + rename), an abort leaves it as it was
 *     and no temporary file behind;
 *   - a FIFO and a character device (a pseudo-terminal) are written in place and stay what they
 *     are (renaming over them replaced /dev/null by a regular file, run as root);
 *   - a directory is refused, early (plan_out_check) and on open;
 *   - SIGTERM and SIGINT while a temporary file exists remove it, and the process still dies of
 *     the signal;
 *   - plan_file_read refuses a directory and input past its limit (/dev/zero), reads a pipe.
 * Each fails without its part of file.c (the old writer renamed over anything, the old readers
 * grew without bound or aborted on a directory).
 */
#define _GNU_SOURCE 1
#include "plan.h"
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static char *at(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

// Files in dir whose name starts with prefix.
static int count_prefix(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

static void test_regular(void) {
    char err[512];
    EXPECT(plan_out_write_file(at("a.out"), "old", 3, err, sizeof err) == PLAN_OK);
    EXPECT(plan_out_write_file(at("a.out"), "new bytes", 9, err, sizeof err) == PLAN_OK);
    size_t n = 0;
    char *s = test_slurp(at("a.out"), &n);
    EXPECT(s && n == 9 && !memcmp(s, "new bytes", 9));
    free(s);
    plan_out o;
    EXPECT(plan_out_open(&o, at("a.out"), err, sizeof err) == PLAN_OK && o.tmp);
    fputs("half", o.f);
    plan_out_abort(&o);
    s = test_slurp(at("a.out"), &n);
    EXPECT(s && n == 9); // untouched
    free(s);
    EXPECT(count_prefix("a.out.tmp") == 0);
    EXPECT(plan_out_check(at("a.out"), err, sizeof err) == PLAN_OK);
    EXPECT(plan_out_check(at("no/such/folder/x"), err, sizeof err) == PLAN_ERR_IO && strstr(err, "does not exist"));
    EXPECT(plan_out_check(dir, err, sizeof err) == PLAN_ERR_IO && strstr(err, "is a directory"));
    EXPECT(plan_out_open(&o, dir, err, sizeof err) == PLAN_ERR_IO && strstr(err, "is a directory"));
}

static void test_fifo(void) {
    char err[512];
    const char *fifo = at("fifo");
    EXPECT(mkfifo(fifo, 0600) == 0);
    pid_t pid = fork();
    if (pid == 0) { // the reader: counts what arrives
        int fd = open(fifo, O_RDONLY);
        char buf[64];
        ssize_t k, n = 0;
        while ((k = read(fd, buf, sizeof buf)) > 0) n += k;
        _exit(n == 11 ? 0 : 1);
    }
    EXPECT(plan_out_write_file(fifo, "hello fifo\n", 11, err, sizeof err) == PLAN_OK);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat sb;
    EXPECT(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode)); // still a FIFO, not renamed over
    EXPECT(count_prefix("fifo.tmp") == 0);
}

static void test_char_device(void) {
    char err[512], name[128];
    int m, s;
    if (openpty(&m, &s, name, NULL, NULL) != 0) {
        printf("no pseudo-terminal here: the character-device case is skipped\n");
        return;
    }
    EXPECT(plan_out_check(name, err, sizeof err) == PLAN_OK);
    EXPECT(plan_out_write_file(name, "x", 1, err, sizeof err) == PLAN_OK);
    struct stat sb;
    EXPECT(stat(name, &sb) == 0 && S_ISCHR(sb.st_mode));
    char c = 0;
    EXPECT(read(m, &c, 1) == 1 && c == 'x');
    close(m), close(s);
}

// A child opens a temporary file and is killed by sig: the file is gone, the child died of sig.
static void test_signal(int sig) {
    pid_t pid = fork();
    if (pid == 0) {
        plan_out o;
        char err[512];
        if (plan_out_open(&o, at("sig.out"), err, sizeof err) || !o.tmp) _exit(3);
        fputs("partial", o.f);
        fflush(o.f);
        kill(getpid(), sig);
        _exit(4); // not reached: the handler re-raises with the default action
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == sig);
    EXPECT(count_prefix("sig.out") == 0);
}

static void test_read(void) {
    char err[512];
    uint8_t *buf;
    size_t n;
    EXPECT(plan_file_read("/dev/zero", 1 << 20, &buf, &n, err, sizeof err) == PLAN_ERR_IO && strstr(err, "more than") && !buf);
    EXPECT(plan_file_read(dir, 1 << 20, &buf, &n, err, sizeof err) == PLAN_ERR_IO && strstr(err, "directory"));
    EXPECT(plan_file_read(at("nothing"), 1 << 20, &buf, &n, err, sizeof err) == PLAN_ERR_IO && strstr(err, "cannot open"));
    EXPECT(plan_file_read(at("a.out"), 4, &buf, &n, err, sizeof err) == PLAN_ERR_IO && strstr(err, "more than"));
    EXPECT(plan_file_read(at("a.out"), 9, &buf, &n, err, sizeof err) == PLAN_OK && n == 9 && buf[9] == 0);
    free(buf);
    int fds[2];
    EXPECT(pipe(fds) == 0);
    EXPECT(write(fds[1], "piped", 5) == 5);
    close(fds[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
    EXPECT(plan_file_read(path, 100, &buf, &n, err, sizeof err) == PLAN_OK && n == 5 && !memcmp(buf, "piped", 5));
    free(buf);
    close(fds[0]);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/unit_files.XXXXXX");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    test_regular();
    test_fifo();
    test_char_device();
    test_signal(SIGTERM);
    test_signal(SIGINT);
    test_read();
    unlink(at("a.out")), unlink(at("fifo")), rmdir(dir);
    return test_summary();
}
