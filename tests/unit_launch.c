/*
 * unit_launch.c: planrun's launch (runtime/launch.c), which needs no GPU: rank discovery from
 * flags and environment variables in the documented order, and the rendezvous over TCP and
 * through a file between real processes (fork) exchanging a 128-byte blob, the size of an
 * ncclUniqueId; then the errors: a bad port, a port in use, a rank that never comes (rank 0 names
 * it), no rank 0, a world-size mismatch, a stale or foreign rendezvous file.
 */
#define _GNU_SOURCE 1
#include "rt.h"
#include "test.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a fake environment ---- */

static const char *const *fake_env; // NAME, VALUE, NAME, VALUE, ..., NULL

static const char *fake_get(const char *name) {
    for (const char *const *e = fake_env; e && *e; e += 2)
        if (!strcmp(e[0], name)) return e[1];
    return NULL;
}

static int discover(rt_launch *l, int fr, int fw, int fl, const char *const *env, char *err, size_t n) {
    fake_env = env;
    return rt_launch_discover(l, fr, fw, fl, fake_get, err, n);
}

static void discovery_order(void) {
    char err[512] = "";
    rt_launch l;
    // Nothing: no launcher.
    static const char *const none[] = {NULL};
    EXPECT(discover(&l, -1, -1, -1, none, err, sizeof err) == 0 && !l.launched && l.rank == -1);
    // torchrun's variables.
    static const char *const torch[] = {"RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "MASTER_ADDR", "node7",
                                        "MASTER_PORT", "29500", NULL};
    EXPECT(discover(&l, -1, -1, -1, torch, err, sizeof err) == 0);
    EXPECT(l.launched && l.rank == 3 && l.world == 8 && l.local_rank == 1 && !l.by_mpi);
    EXPECT(!strcmp(l.rank_from, "RANK") && !strcmp(l.world_from, "WORLD_SIZE") && !strcmp(l.local_from, "LOCAL_RANK"));
    EXPECT(!strcmp(l.master_addr, "node7") && l.master_port == 29500);
    char d[256];
    rt_launch_describe(&l, d, sizeof d);
    EXPECT(strstr(d, "rank 3 (RANK)") && strstr(d, "world size 8 (WORLD_SIZE)") && strstr(d, "local rank 1 (LOCAL_RANK)"));
    // Flags win over everything, each number on its own.
    EXPECT(discover(&l, 5, -1, -1, torch, err, sizeof err) == 0 && l.rank == 5 && !strcmp(l.rank_from, "--rank") &&
           l.world == 8 && !strcmp(l.world_from, "WORLD_SIZE"));
    EXPECT(discover(&l, 0, 2, 0, torch, err, sizeof err) == 0 && l.world == 2 && !strcmp(l.local_from, "--local-rank"));
    // torchrun before OpenMPI before SLURM.
    static const char *const all[] = {"SLURM_PROCID", "6", "SLURM_NTASKS", "16", "SLURM_LOCALID", "2",
                                      "OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "12", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                                      "RANK", "4", "WORLD_SIZE", "10", NULL};
    EXPECT(discover(&l, -1, -1, -1, all, err, sizeof err) == -1 && strstr(err, "WORLD_SIZE=10 but OMPI_COMM_WORLD_SIZE=12"));
    // ... which must agree where both say a number: then torchrun's names are the ones shown.
    static const char *const both[] = {"SLURM_PROCID", "6", "SLURM_NTASKS", "16", "SLURM_LOCALID", "2",
                                       "OMPI_COMM_WORLD_RANK", "4", "OMPI_COMM_WORLD_SIZE", "10", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                                       "RANK", "4", "WORLD_SIZE", "10", NULL};
    EXPECT(discover(&l, -1, -1, -1, both, err, sizeof err) == 0 && l.rank == 4 && l.world == 10 && !strcmp(l.rank_from, "RANK"));
    EXPECT(l.local_rank == 1 && !strcmp(l.local_from, "OMPI_COMM_WORLD_LOCAL_RANK")); // no LOCAL_RANK: the next source
    static const char *const ranks_differ[] = {"OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "10", "RANK", "4", "WORLD_SIZE",
                                               "10", NULL};
    EXPECT(discover(&l, -1, -1, -1, ranks_differ, err, sizeof err) == -1 && strstr(err, "RANK=4 but OMPI_COMM_WORLD_RANK=5"));
    EXPECT(discover(&l, 4, -1, -1, ranks_differ, err, sizeof err) == 0 && l.rank == 4); // a flag decides
    static const char *const mpi_slurm[] = {"SLURM_PROCID", "6", "SLURM_NTASKS", "16", "SLURM_LOCALID", "2",
                                            "OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "12", NULL};
    EXPECT(discover(&l, -1, -1, -1, mpi_slurm, err, sizeof err) == 0 && l.rank == 5 && l.world == 12 && l.by_mpi);
    EXPECT(l.local_rank == 2 && !strcmp(l.local_from, "SLURM_LOCALID"));
    static const char *const slurm[] = {"SLURM_PROCID", "6", "SLURM_NTASKS", "16", "SLURM_LOCALID", "2", NULL};
    EXPECT(discover(&l, -1, -1, -1, slurm, err, sizeof err) == 0 && l.rank == 6 && l.world == 16 && l.local_rank == 2 &&
           !strcmp(l.rank_from, "SLURM_PROCID") && !l.by_mpi);
    // A missing local rank: 0 in a world of one, else the rank.
    static const char *const nolocal[] = {"RANK", "2", "WORLD_SIZE", "4", NULL};
    EXPECT(discover(&l, -1, -1, -1, nolocal, err, sizeof err) == 0 && l.local_rank == 2 && strstr(l.local_from, "assumed"));
    EXPECT(discover(&l, 0, 1, -1, none, err, sizeof err) == 0 && l.local_rank == 0 && !strcmp(l.local_from, "default"));
}

static void discovery_errors(void) {
    char err[512] = "";
    rt_launch l;
    static const char *const bad_rank[] = {"RANK", "two", "WORLD_SIZE", "4", NULL};
    EXPECT(discover(&l, -1, -1, -1, bad_rank, err, sizeof err) == -1 && strstr(err, "RANK=\"two\""));
    static const char *const neg[] = {"RANK", "-1", "WORLD_SIZE", "4", NULL};
    EXPECT(discover(&l, -1, -1, -1, neg, err, sizeof err) == -1 && strstr(err, "RANK"));
    static const char *const zero_world[] = {"RANK", "0", "WORLD_SIZE", "0", NULL};
    EXPECT(discover(&l, -1, -1, -1, zero_world, err, sizeof err) == -1 && strstr(err, "WORLD_SIZE"));
    static const char *const no_world[] = {"RANK", "1", NULL};
    EXPECT(discover(&l, -1, -1, -1, no_world, err, sizeof err) == -1 && strstr(err, "no world size"));
    static const char *const no_rank[] = {"SLURM_NTASKS", "4", NULL};
    EXPECT(discover(&l, -1, -1, -1, no_rank, err, sizeof err) == -1 && strstr(err, "no rank") && strstr(err, "SLURM_NTASKS"));
    static const char *const beyond[] = {"RANK", "4", "WORLD_SIZE", "4", NULL};
    EXPECT(discover(&l, -1, -1, -1, beyond, err, sizeof err) == -1 && strstr(err, "rank 4") && strstr(err, "world size 4"));
    static const char *const bad_port[] = {"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "70000", NULL};
    EXPECT(discover(&l, -1, -1, -1, bad_port, err, sizeof err) == -1 && strstr(err, "MASTER_PORT=\"70000\""));
    static const char *const local_only[] = {"LOCAL_RANK", "1", NULL};
    EXPECT(discover(&l, -1, -1, -1, local_only, err, sizeof err) == -1 && strstr(err, "local rank"));
    static const char *const none[] = {NULL};
    EXPECT(discover(&l, 3, 2, -1, none, err, sizeof err) == -1 && strstr(err, "--rank"));
}

static void choosing(void) {
    char err[512] = "";
    rt_launch l;
    rt_rendezvous r;
    static const char *const torch[] = {"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "1234", NULL};
    EXPECT(discover(&l, -1, -1, -1, torch, err, sizeof err) == 0);
    EXPECT(rt_rendezvous_choose(&r, NULL, &l, err, sizeof err) == 0 && r.kind == RT_RDV_TCP && r.port == 1234 &&
           !strcmp(r.host, "10.0.0.1"));
    EXPECT(rt_rendezvous_choose(&r, "file:/shared/x.id", &l, err, sizeof err) == 0 && r.kind == RT_RDV_FILE &&
           !strcmp(r.path, "/shared/x.id"));
    EXPECT(rt_rendezvous_choose(&r, "tcp:[::1]:99", &l, err, sizeof err) == 0 && r.kind == RT_RDV_TCP && !strcmp(r.host, "::1") &&
           r.port == 99);
    EXPECT(rt_rendezvous_choose(&r, "tcp:host:0", &l, err, sizeof err) == -1 && strstr(err, "port"));
    EXPECT(rt_rendezvous_choose(&r, "tcp:host", &l, err, sizeof err) == -1 && strstr(err, "HOST:PORT"));
    EXPECT(rt_rendezvous_choose(&r, "carrier-pigeon", &l, err, sizeof err) == -1 && strstr(err, "carrier-pigeon"));
    static const char *const bare[] = {"RANK", "1", "WORLD_SIZE", "2", NULL};
    EXPECT(discover(&l, -1, -1, -1, bare, err, sizeof err) == 0);
    EXPECT(rt_rendezvous_choose(&r, NULL, &l, err, sizeof err) == -1 && strstr(err, "MASTER_ADDR"));
    static const char *const one[] = {"RANK", "0", "WORLD_SIZE", "1", NULL};
    EXPECT(discover(&l, -1, -1, -1, one, err, sizeof err) == 0);
    EXPECT(rt_rendezvous_choose(&r, NULL, &l, err, sizeof err) == 0 && r.kind == RT_RDV_NONE);
}

/* ---- rendezvous between processes ---- */

// A port that was free a moment ago.
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return 0;
    int port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void fill_blob(uint8_t *b, int seed) {
    for (int i = 0; i < 128; i++) b[i] = (uint8_t)(i * 7 + seed * 13 + 1);
}

// Runs the rendezvous as `rank` of `world` (claiming world `says` in its hello) in a child
// process. The child exits 0 when it got rank 0's blob, 2 on an error whose message holds
// `needle`, 1 otherwise.
static pid_t child(const rt_rendezvous *r, int rank, int says, double timeout_s, const char *needle) {
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    uint8_t blob[128] = {0}, want[128];
    fill_blob(want, 1);
    char err[512] = "";
    int rc = rt_rendezvous_run(r, rank, says, blob, sizeof blob, timeout_s, err, sizeof err);
    if (rc == 0) _exit(memcmp(blob, want, sizeof blob) ? 1 : 0);
    if (needle && strstr(err, needle)) _exit(2);
    fprintf(stderr, "rank %d: %s\n", rank, err);
    _exit(1);
}

static int reap(pid_t pid) {
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static int serve(const rt_rendezvous *r, int world, double timeout_s, char *err, size_t n) {
    uint8_t blob[128];
    fill_blob(blob, 1);
    return rt_rendezvous_run(r, 0, world, blob, sizeof blob, timeout_s, err, n);
}

static void tcp_good(void) {
    rt_rendezvous r = {.kind = RT_RDV_TCP, .host = "127.0.0.1", .port = free_port()};
    // Ranks 1 and 2 start before rank 0 listens: they retry.
    pid_t a = child(&r, 1, 3, 20, NULL), b = child(&r, 2, 3, 20, NULL);
    usleep(200 * 1000);
    char err[512] = "";
    EXPECT(serve(&r, 3, 20, err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    EXPECT(reap(a) == 0);
    EXPECT(reap(b) == 0);
    // By name, world 2.
    rt_rendezvous byname = {.kind = RT_RDV_TCP, .host = "localhost", .port = free_port()};
    pid_t c = child(&byname, 1, 2, 20, NULL);
    EXPECT(serve(&byname, 2, 20, err, sizeof err) == 0);
    EXPECT(reap(c) == 0);
}

static void tcp_errors(void) {
    char err[512] = "";
    // A rank that never comes: rank 0 names it; the rank that came is told rank 0 gave up.
    rt_rendezvous r = {.kind = RT_RDV_TCP, .host = "127.0.0.1", .port = free_port()};
    pid_t a = child(&r, 1, 3, 20, "gave up");
    EXPECT(serve(&r, 3, 1.0, err, sizeof err) == -1);
    EXPECT(strstr(err, "2 of 3 ranks joined") && strstr(err, "missing: 2"));
    EXPECT(reap(a) == 2);
    // No rank 0: the others give up after the timeout, naming the address.
    rt_rendezvous nobody = {.kind = RT_RDV_TCP, .host = "127.0.0.1", .port = free_port()};
    pid_t b = child(&nobody, 1, 2, 0.5, "cannot reach rank 0 at 127.0.0.1");
    EXPECT(reap(b) == 2);
    // World-size mismatch: named on both sides.
    rt_rendezvous w = {.kind = RT_RDV_TCP, .host = "127.0.0.1", .port = free_port()};
    pid_t c = child(&w, 1, 4, 20, "world sizes differ");
    EXPECT(serve(&w, 3, 20, err, sizeof err) == -1 && strstr(err, "rank 1 says the world size is 4, rank 0 has 3"));
    EXPECT(reap(c) == 2);
    // A port already in use.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0};
    socklen_t len = sizeof sa;
    EXPECT(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0 &&
           getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    rt_rendezvous busy = {.kind = RT_RDV_TCP, .host = "127.0.0.1", .port = ntohs(sa.sin_port)};
    EXPECT(serve(&busy, 2, 1, err, sizeof err) == -1 && strstr(err, "cannot listen on port"));
    close(fd);
    // An unresolvable host.
    rt_rendezvous nowhere = {.kind = RT_RDV_TCP, .host = "no-such-host.invalid", .port = 1234};
    uint8_t blob[128];
    EXPECT(rt_rendezvous_run(&nowhere, 1, 2, blob, sizeof blob, 0.5, err, sizeof err) == -1 && strstr(err, "no-such-host.invalid"));
}

static void file_good_and_bad(const char *dir) {
    char err[512] = "";
    rt_rendezvous r = {.kind = RT_RDV_FILE};
    snprintf(r.path, sizeof r.path, "%s/nccl.id", dir);
    pid_t a = child(&r, 1, 3, 20, NULL), b = child(&r, 2, 3, 20, NULL);
    usleep(100 * 1000);
    EXPECT(serve(&r, 3, 20, err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    EXPECT(reap(a) == 0 && reap(b) == 0);
    struct stat st;
    EXPECT(stat(r.path, &st) != 0); // rank 0 cleaned up
    // A rank that never reads it: rank 0 names it.
    pid_t c = child(&r, 1, 3, 20, NULL);
    EXPECT(serve(&r, 3, 1.0, err, sizeof err) == -1 && strstr(err, "2 of 3 ranks") && strstr(err, "missing: 2"));
    EXPECT(reap(c) == 0);
    // No rank 0: the file never appears.
    pid_t d = child(&r, 1, 2, 0.3, "did not appear");
    EXPECT(reap(d) == 2);
    // A stale file: rank 0 refuses it; a reader of a file for another world size says so.
    FILE *f = fopen(r.path, "wb");
    EXPECT(f != NULL);
    if (f) fclose(f);
    EXPECT(serve(&r, 2, 1, err, sizeof err) == -1 && strstr(err, "already exists"));
    unlink(r.path);
    rt_rendezvous other = r;
    snprintf(other.path, sizeof other.path, "%s/other.id", dir);
    pid_t e = child(&other, 1, 4, 5, "written for a world of 2");
    EXPECT(serve(&other, 2, 1.0, err, sizeof err) == -1);
    EXPECT(reap(e) == 2);
}

int main(void) {
    discovery_order();
    discovery_errors();
    choosing();
    tcp_good();
    tcp_errors();
    char dir[] = "/tmp/unit_launch.XXXXXX";
    if (mkdtemp(dir)) {
        file_good_and_bad(dir);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        EXPECT(!"mkdtemp");
    }
    return test_summary();
}
