/*
 * launch.c: who this process is in a multi-process run, and the rendezvous that hands rank 0's
 * NCCL unique id to every other rank (rt.h, "launch.c").
 *
 * One process per GPU. planrun starts under any launcher (torchrun, mpirun, srun, or a shell loop
 * with flags) and takes its rank, world size and local rank from the first source that has each
 * one, in this fixed order:
 *   1. flags: --rank, --world-size, --local-rank
 *   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR, MASTER_PORT for the rendezvous)
 *   3. OpenMPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
 *   4. SLURM: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
 * Each of the three numbers is looked up on its own, and rt_launch records where it came from, so
 * planrun can print "rank 3 (RANK), world size 8 (WORLD_SIZE), local rank 3 (LOCAL_RANK)". A value
 * that is not a decimal integer in range is an error naming the variable; a rank without a world
 * size (or the reverse) is an error, since guessing the other would start a job that hangs.
 * torchrun's and OpenMPI's variables that both say a number and disagree (WORLD_SIZE=2 beside
 * OMPI_COMM_WORLD_SIZE=4: two launchers, or a variable left over from another job) are an error
 * naming both, not a silent choice. SLURM's are not compared: an allocation's variables reach
 * every process that mpirun or torchrun starts inside it and count other things (tasks of the
 * allocation, not processes of the job). A flag is the user's own choice and wins silently.
 *
 * The rendezvous moves one small blob (the 128-byte ncclUniqueId) from rank 0 to all ranks:
 *   - mpi: MPI_Bcast on MPI_COMM_WORLD (only when built with MPI, PLANCC_HAVE_MPI);
 *   - tcp:HOST:PORT (default: MASTER_ADDR:MASTER_PORT): rank 0 listens on PORT, every other rank
 *     connects (retrying until rank 0 is up), says hello (magic, version, rank, world size, blob
 *     size); when all world - 1 hellos have arrived rank 0 answers each with the blob, so the
 *     rendezvous is also a barrier and a missing or misconfigured rank is named on rank 0;
 *   - file:PATH (a shared filesystem): rank 0 writes PATH atomically (a temporary file renamed
 *     over it), the others poll for it, read it and leave PATH.ack.RANK; rank 0 waits for every
 *     ack and removes the files. PATH must not exist when the job starts (rank 0 refuses a stale
 *     one rather than race the readers).
 * Every wait has the caller's timeout, and every failure is a message that says what was waited
 * for and where (host, port, path, which ranks are missing).
 *
 * This file needs no GPU and no CUDA; tests/unit_launch.c runs it between forked processes.
 */
#define _GNU_SOURCE 1
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef PLANCC_HAVE_MPI
#include <mpi.h>
#endif

#define RDV_MAGIC 0x52434c50u // "PLCR"
#define RDV_VERSION 1u
#define RDV_MAX_BLOB 4096

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* ---- discovery ---- */

static const char *env_get(const char *name) { return getenv(name); }

// A decimal integer in [lo, hi] (surrounding blanks allowed), else -1.
static int parse_int(const char *s, long lo, long hi, long *out) {
    if (!s) return -1;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

// One number: the flag (>= 0) wins, then the first variable of `names` that is set. 0 when
// found or absent (*v stays -1), -1 with a message when a set value is not a number in range.
static int lookup(rt_getenv_fn *get, int flag, const char *flag_name, const char *const names[3], long lo, int *v,
                  const char **from, char *err, size_t err_n) {
    *v = -1;
    *from = NULL;
    if (flag >= 0) {
        if (flag < lo) return rt_say(err, err_n, "%s %d: it must be at least %ld", flag_name, flag, lo);
        *v = flag, *from = flag_name;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        const char *s = get(names[i]);
        if (!s) continue;
        long x;
        if (parse_int(s, lo, 1L << 30, &x))
            return rt_say(err, err_n, "%s=\"%s\" is not a whole number of at least %ld", names[i], s, lo);
        *v = (int)x, *from = names[i];
        return 0;
    }
    return 0;
}

// torchrun's and OpenMPI's values of one number (names[0], names[1]), when both are set, agree.
static int agree(rt_getenv_fn *get, const char *const names[3], char *err, size_t err_n) {
    const char *a = get(names[0]), *b = get(names[1]);
    long x, y;
    if (!a || !b || parse_int(a, 0, 1L << 30, &x) || parse_int(b, 0, 1L << 30, &y) || x == y) return 0;
    return rt_say(err, err_n, "the launchers' variables disagree: %s=%ld but %s=%ld (two launchers, or a variable left from another "
               "job: unset the wrong one)", names[0], x, names[1], y);
}

int rt_launch_discover(rt_launch *l, int flag_rank, int flag_world, int flag_local, rt_getenv_fn *get, char *err,
                       size_t err_n) {
    static const char *const rank_vars[3] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    static const char *const world_vars[3] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};
    static const char *const local_vars[3] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    memset(l, 0, sizeof *l);
    l->rank = l->world = l->local_rank = -1;
    if (!get) get = env_get;
    if (lookup(get, flag_rank, "--rank", rank_vars, 0, &l->rank, &l->rank_from, err, err_n) ||
        lookup(get, flag_world, "--world-size", world_vars, 1, &l->world, &l->world_from, err, err_n) ||
        lookup(get, flag_local, "--local-rank", local_vars, 0, &l->local_rank, &l->local_from, err, err_n))
        return -1;
    if ((flag_world < 0 && agree(get, world_vars, err, err_n)) || (flag_rank < 0 && agree(get, rank_vars, err, err_n)) ||
        (flag_local < 0 && agree(get, local_vars, err, err_n)))
        return -1;
    if (l->rank < 0 && l->world < 0) {
        if (l->local_rank >= 0)
            return rt_say(err, err_n, "a local rank is given (%s) but no rank and world size: set them too (--rank and --world-size, or RANK and WORLD_SIZE)", l->local_from);
        return 0; // no launcher: the caller decides (the cpu backend runs every rank itself)
    }
    if (l->rank < 0)
        return rt_say(err, err_n, "the world size is given (%s = %d) but no rank (--rank, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)",
                   l->world_from, l->world);
    if (l->world < 0)
        return rt_say(err, err_n, "the rank is given (%s = %d) but no world size (--world-size, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)",
                   l->rank_from, l->rank);
    if (l->rank >= l->world)
        return rt_say(err, err_n, "rank %d (%s) is not below the world size %d (%s)", l->rank, l->rank_from, l->world, l->world_from);
    if (l->local_rank < 0) {
        l->local_rank = l->world == 1 ? 0 : l->rank;
        l->local_from = l->world == 1 ? "default" : "assumed equal to the rank: one node";
    }
    l->launched = true;
    l->by_mpi = l->rank_from && !strncmp(l->rank_from, "OMPI_", 5);
    const char *addr = get("MASTER_ADDR"), *port = get("MASTER_PORT");
    if (addr && *addr) snprintf(l->master_addr, sizeof l->master_addr, "%s", addr);
    if (port && *port) {
        long p;
        if (parse_int(port, 1, 65535, &p)) return rt_say(err, err_n, "MASTER_PORT=\"%s\" is not a port number (1 to 65535)", port);
        l->master_port = (int)p;
    }
    return 0;
}

void rt_launch_describe(const rt_launch *l, char *buf, size_t n) {
    if (!l->launched) {
        snprintf(buf, n, "no launcher (no --rank/--world-size, RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_* variables)");
        return;
    }
    snprintf(buf, n, "rank %d (%s), world size %d (%s), local rank %d (%s)", l->rank, l->rank_from, l->world, l->world_from,
             l->local_rank, l->local_from);
}

/* ---- choosing the rendezvous ---- */

static int parse_tcp(rt_rendezvous *r, const char *hostport, char *err, size_t err_n) {
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport)
        return rt_say(err, err_n, "--rendezvous tcp:%s: want tcp:HOST:PORT", hostport);
    size_t hl = (size_t)(colon - hostport);
    if (hostport[0] == '[' && hl >= 2 && hostport[hl - 1] == ']') hostport++, hl -= 2; // [v6 address]
    if (hl >= sizeof r->host) return rt_say(err, err_n, "--rendezvous: the host name is too long");
    memcpy(r->host, hostport, hl);
    r->host[hl] = 0;
    long p;
    if (parse_int(colon + 1, 1, 65535, &p))
        return rt_say(err, err_n, "--rendezvous tcp:...:%s: not a port number (1 to 65535)", colon + 1);
    r->port = (int)p;
    return 0;
}

int rt_rendezvous_choose(rt_rendezvous *r, const char *spec, const rt_launch *l, char *err, size_t err_n) {
    memset(r, 0, sizeof *r);
    if (spec) {
        if (!strncmp(spec, "tcp:", 4)) {
            r->kind = RT_RDV_TCP;
            return parse_tcp(r, spec + 4, err, err_n);
        }
        if (!strncmp(spec, "file:", 5) && spec[5]) {
            if (strlen(spec + 5) >= sizeof r->path - 16) return rt_say(err, err_n, "--rendezvous file:...: the path is too long");
            r->kind = RT_RDV_FILE;
            snprintf(r->path, sizeof r->path, "%s", spec + 5);
            return 0;
        }
        if (!strcmp(spec, "mpi")) {
#ifdef PLANCC_HAVE_MPI
            r->kind = RT_RDV_MPI;
            return 0;
#else
            return rt_say(err, err_n, "--rendezvous mpi: this planrun was built without MPI (meson option -Dmpi=enabled needs libopenmpi-dev)");
#endif
        }
        return rt_say(err, err_n, "--rendezvous \"%s\": want tcp:HOST:PORT, file:PATH or mpi", spec);
    }
    if (!l->launched || l->world <= 1) return 0; // RT_RDV_NONE: nobody to meet
#ifdef PLANCC_HAVE_MPI
    if (l->by_mpi) {
        r->kind = RT_RDV_MPI;
        return 0;
    }
#endif
    if (l->master_addr[0] && l->master_port) {
        r->kind = RT_RDV_TCP;
        snprintf(r->host, sizeof r->host, "%s", l->master_addr);
        r->port = l->master_port;
        return 0;
    }
    return rt_say(err, err_n, "world size %d but no way to meet rank 0: set MASTER_ADDR and MASTER_PORT, or pass --rendezvous "
               "tcp:HOST:PORT or file:PATH%s", l->world,
#ifdef PLANCC_HAVE_MPI
               " (or start under mpirun)"
#else
               ""
#endif
    );
}

void rt_rendezvous_describe(const rt_rendezvous *r, char *buf, size_t n) {
    switch (r->kind) {
    case RT_RDV_TCP: snprintf(buf, n, "tcp %s:%d", r->host, r->port); break;
    case RT_RDV_FILE: snprintf(buf, n, "file %s", r->path); break;
    case RT_RDV_MPI: snprintf(buf, n, "MPI_Bcast"); break;
    default: snprintf(buf, n, "none (one process)"); break;
    }
}

/* ---- tcp ---- */

typedef struct hello {
    uint32_t magic, version, rank, world, bytes;
} hello;

enum { RDV_OK = 0, RDV_BAD_WORLD = 1, RDV_BAD_RANK = 2, RDV_DUP_RANK = 3, RDV_BAD_SIZE = 4, RDV_BAD_MAGIC = 5, RDV_ABORT = 6 };

static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

// Reads or writes exactly n bytes before the deadline. 0, or -1 (errno ETIMEDOUT on time, EPIPE
// when the other side closed).
static int io_all(int fd, void *buf, size_t n, bool writing, double deadline) {
    uint8_t *p = buf;
    while (n) {
        int ms = (int)((deadline - rt_clock_s()) * 1000);
        if (ms <= 0) return errno = ETIMEDOUT, -1;
        struct pollfd pf = {fd, writing ? POLLOUT : POLLIN, 0};
        int k = poll(&pf, 1, ms);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) continue;
        ssize_t got = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got < 0) return -1;
        if (got == 0) return errno = EPIPE, -1;
        p += got, n -= (size_t)got;
    }
    return 0;
}

// A listening socket on port (all addresses; IPv6 dual-stack where the host has it).
static int tcp_listen(int port, int backlog, char *err, size_t err_n) {
    int fam[2] = {AF_INET6, AF_INET}, last = 0;
    for (int i = 0; i < 2; i++) {
        int fd = socket(fam[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) { last = errno; continue; }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        socklen_t len;
        if (fam[i] == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            a->sin6_family = AF_INET6, a->sin6_addr = in6addr_any, a->sin6_port = htons((uint16_t)port);
            len = sizeof *a;
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            a->sin_family = AF_INET, a->sin_addr.s_addr = htonl(INADDR_ANY), a->sin_port = htons((uint16_t)port);
            len = sizeof *a;
        }
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 && listen(fd, backlog) == 0) return fd;
        last = errno;
        close(fd);
        if (last == EADDRINUSE) break;
    }
    rt_say(err, err_n, "rank 0 cannot listen on port %d: %s%s", port, strerror(last),
        last == EADDRINUSE ? " (under torchrun with TORCHELASTIC_USE_AGENT_STORE the agent holds MASTER_PORT: pass "
                             "--rendezvous tcp:HOST:PORT with a free port)" : "");
    return -1;
}

// Rank 0: waits for every other rank's hello, then answers each with the blob.
static int tcp_serve(const rt_rendezvous *r, int world, const void *blob, size_t bytes, double timeout_s, char *err, size_t err_n) {
    int lfd = tcp_listen(r->port, world, err, err_n);
    if (lfd < 0) return -1;
    int *fds = calloc((size_t)world, sizeof *fds);
    if (!fds) { close(lfd); return rt_say(err, err_n, "rendezvous: out of memory"); }
    for (int i = 0; i < world; i++) fds[i] = -1;
    double deadline = rt_clock_s() + timeout_s;
    int joined = 1, rc = 0;
    while (joined < world && !rc) {
        int ms = (int)((deadline - rt_clock_s()) * 1000);
        if (ms <= 0) break;
        struct pollfd pf = {lfd, POLLIN, 0};
        int k = poll(&pf, 1, ms);
        if (k <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        uint8_t h[20], reply[8];
        // A peer gets a few seconds to say hello, so one stray connection cannot eat the timeout.
        double hd = rt_clock_s() + 5 < deadline ? rt_clock_s() + 5 : deadline;
        if (io_all(fd, h, sizeof h, false, hd)) { close(fd); continue; }
        hello m = {get32(h), get32(h + 4), get32(h + 8), get32(h + 12), get32(h + 16)};
        uint32_t status = m.magic != RDV_MAGIC || m.version != RDV_VERSION ? RDV_BAD_MAGIC
                          : m.world != (uint32_t)world                      ? RDV_BAD_WORLD
                          : m.rank == 0 || m.rank >= (uint32_t)world        ? RDV_BAD_RANK
                          : fds[m.rank] >= 0                                ? RDV_DUP_RANK
                          : m.bytes != bytes                                ? RDV_BAD_SIZE
                                                                            : RDV_OK;
        if (status != RDV_OK) {
            put32(reply, RDV_MAGIC), put32(reply + 4, status);
            io_all(fd, reply, sizeof reply, true, rt_clock_s() + 1);
            close(fd);
            if (status == RDV_BAD_MAGIC) continue; // not one of ours
            if (status == RDV_BAD_WORLD)
                rc = rt_say(err, err_n, "rendezvous on port %d: rank %u says the world size is %u, rank 0 has %d", r->port, m.rank, m.world, world);
            else if (status == RDV_DUP_RANK)
                rc = rt_say(err, err_n, "rendezvous on port %d: two processes say they are rank %u", r->port, m.rank);
            else if (status == RDV_BAD_RANK)
                rc = rt_say(err, err_n, "rendezvous on port %d: a process says it is rank %u of %d", r->port, m.rank, world);
            else
                rc = rt_say(err, err_n, "rendezvous on port %d: rank %u expects %u bytes, rank 0 sends %zu", r->port, m.rank, m.bytes, bytes);
            continue;
        }
        fds[m.rank] = fd;
        joined++;
    }
    if (!rc && joined < world) {
        char missing[256] = "";
        size_t n = 0;
        for (int q = 1, shown = 0; q < world && n < sizeof missing - 16; q++)
            if (fds[q] < 0) n += (size_t)snprintf(missing + n, sizeof missing - n, shown++ ? ", %d" : "%d", q);
        rc = rt_say(err, err_n, "rendezvous on port %d: %d of %d ranks joined within %g s; missing: %s", r->port, joined, world,
                 timeout_s, missing);
    }
    uint8_t head[8];
    put32(head, RDV_MAGIC), put32(head + 4, rc ? RDV_ABORT : RDV_OK);
    for (int q = 1; q < world; q++) {
        if (fds[q] < 0) continue;
        if (rc) io_all(fds[q], head, sizeof head, true, rt_clock_s() + 1);
        else if (io_all(fds[q], head, sizeof head, true, deadline + 5) || io_all(fds[q], (void *)blob, bytes, true, deadline + 5))
            rc = rt_say(err, err_n, "rendezvous on port %d: cannot send the id to rank %d: %s", r->port, q, strerror(errno));
        close(fds[q]);
    }
    free(fds);
    close(lfd);
    return rc;
}

// Connects to host:port, retrying until the deadline (rank 0 may not listen yet).
static int tcp_connect(const rt_rendezvous *r, double deadline, char *err, size_t err_n) {
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(r->host, port, &hints, &res);
    if (g) return rt_say(err, err_n, "rendezvous: cannot resolve %s: %s", r->host, gai_strerror(g));
    int last = 0;
    for (;;) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) { last = errno; continue; }
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                freeaddrinfo(res);
                return fd;
            }
            last = errno;
            close(fd);
        }
        if (rt_clock_s() >= deadline) break;
        sleep_ms(50);
    }
    freeaddrinfo(res);
    return rt_say(err, err_n, "rendezvous: cannot reach rank 0 at %s:%d: %s", r->host, r->port, strerror(last)), -1;
}

static int tcp_join(const rt_rendezvous *r, int rank, int world, void *blob, size_t bytes, double timeout_s, char *err, size_t err_n) {
    double deadline = rt_clock_s() + timeout_s;
    int fd = tcp_connect(r, deadline, err, err_n);
    if (fd < 0) return -1;
    uint8_t h[20], head[8];
    put32(h, RDV_MAGIC), put32(h + 4, RDV_VERSION), put32(h + 8, (uint32_t)rank), put32(h + 12, (uint32_t)world),
        put32(h + 16, (uint32_t)bytes);
    int rc = 0;
    if (io_all(fd, h, sizeof h, true, deadline) || io_all(fd, head, sizeof head, false, deadline)) {
        rc = errno == ETIMEDOUT ? rt_say(err, err_n, "rendezvous: rank 0 at %s:%d took the hello but did not answer within %g s "
                                              "(have all %d ranks started?)", r->host, r->port, timeout_s, world)
                                : rt_say(err, err_n, "rendezvous: the connection to rank 0 at %s:%d broke: %s", r->host, r->port,
                                      errno == EPIPE ? "rank 0 closed it (it gave up: see its message)" : strerror(errno));
    } else if (get32(head) != RDV_MAGIC) {
        rc = rt_say(err, err_n, "rendezvous: %s:%d is not a planrun rank 0", r->host, r->port);
    } else if (get32(head + 4) != RDV_OK) {
        static const char *const why[] = {"", "the world sizes differ (rank 0 names them)", "the rank is out of range",
                                          "another process has this rank", "the id sizes differ", "a protocol mismatch",
                                          "rank 0 gave up (its message says why)"};
        uint32_t s = get32(head + 4);
        rc = rt_say(err, err_n, "rendezvous: rank 0 at %s:%d refused rank %d of %d: %s", r->host, r->port, rank, world,
                 s < 7 ? why[s] : "an unknown reason");
    } else if (io_all(fd, blob, bytes, false, deadline + 5)) {
        rc = rt_say(err, err_n, "rendezvous: rank 0 at %s:%d sent a short id: %s", r->host, r->port, strerror(errno));
    }
    close(fd);
    return rc;
}

/* ---- file ---- */

static int file_write_atomic(const char *path, const void *data, size_t n, char *err, size_t err_n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return rt_say(err, err_n, "rendezvous: cannot write %s: %s", tmp, strerror(errno));
    const uint8_t *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd), unlink(tmp);
            return rt_say(err, err_n, "rendezvous: cannot write %s: %s", tmp, strerror(e));
        }
        p += w, left -= (size_t)w;
    }
    if (fsync(fd) || close(fd) || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return rt_say(err, err_n, "rendezvous: cannot publish %s: %s", path, strerror(e));
    }
    return 0;
}

static void ack_path(char *buf, size_t n, const char *path, int rank) { snprintf(buf, n, "%s.ack.%d", path, rank); }

static int file_serve(const rt_rendezvous *r, int world, const void *blob, size_t bytes, double timeout_s, char *err, size_t err_n) {
    struct stat st;
    if (stat(r->path, &st) == 0)
        return rt_say(err, err_n, "rendezvous: %s already exists (left by an earlier job?); remove it and start again", r->path);
    uint8_t *buf = malloc(16 + bytes);
    if (!buf) return rt_say(err, err_n, "rendezvous: out of memory");
    put32(buf, RDV_MAGIC), put32(buf + 4, RDV_VERSION), put32(buf + 8, (uint32_t)world), put32(buf + 12, (uint32_t)bytes);
    memcpy(buf + 16, blob, bytes);
    int rc = file_write_atomic(r->path, buf, 16 + bytes, err, err_n);
    free(buf);
    if (rc) return -1;
    double deadline = rt_clock_s() + timeout_s;
    char ack[4200];
    int joined = 1;
    for (;;) {
        joined = 1;
        for (int q = 1; q < world; q++) {
            ack_path(ack, sizeof ack, r->path, q);
            joined += stat(ack, &st) == 0;
        }
        if (joined == world || rt_clock_s() >= deadline) break;
        sleep_ms(20);
    }
    char missing[256] = "";
    size_t n = 0;
    for (int q = 1, shown = 0; q < world; q++) {
        ack_path(ack, sizeof ack, r->path, q);
        if (stat(ack, &st) != 0 && n < sizeof missing - 16) n += (size_t)snprintf(missing + n, sizeof missing - n, shown++ ? ", %d" : "%d", q);
        unlink(ack);
    }
    unlink(r->path);
    if (joined < world)
        return rt_say(err, err_n, "rendezvous through %s: %d of %d ranks read it within %g s; missing: %s", r->path, joined, world,
                   timeout_s, missing);
    return 0;
}

static int file_join(const rt_rendezvous *r, int rank, int world, void *blob, size_t bytes, double timeout_s, char *err, size_t err_n) {
    double deadline = rt_clock_s() + timeout_s;
    uint8_t *buf = malloc(16 + bytes);
    if (!buf) return rt_say(err, err_n, "rendezvous: out of memory");
    int fd = -1;
    while ((fd = open(r->path, O_RDONLY | O_CLOEXEC)) < 0 && rt_clock_s() < deadline) sleep_ms(20);
    if (fd < 0) {
        free(buf);
        return rt_say(err, err_n, "rendezvous: %s did not appear within %g s (is rank 0 running, with the same path on a shared filesystem?)",
                   r->path, timeout_s);
    }
    ssize_t got = read(fd, buf, 16 + bytes);
    close(fd);
    int rc = 0;
    if (got != (ssize_t)(16 + bytes) || get32(buf) != RDV_MAGIC || get32(buf + 4) != RDV_VERSION)
        rc = rt_say(err, err_n, "rendezvous: %s is not a planrun rendezvous file of %zu bytes", r->path, 16 + bytes);
    else if (get32(buf + 8) != (uint32_t)world)
        rc = rt_say(err, err_n, "rendezvous: %s was written for a world of %u, this rank has %d (a file from another job?)", r->path,
                 get32(buf + 8), world);
    else if (get32(buf + 12) != bytes)
        rc = rt_say(err, err_n, "rendezvous: %s holds %u bytes, this rank wants %zu", r->path, get32(buf + 12), bytes);
    else
        memcpy(blob, buf + 16, bytes);
    free(buf);
    if (rc) return -1;
    char ack[4200];
    ack_path(ack, sizeof ack, r->path, rank);
    int afd = open(ack, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (afd < 0) return rt_say(err, err_n, "rendezvous: cannot write %s: %s", ack, strerror(errno));
    close(afd);
    return 0;
}

/* ---- mpi ---- */

#ifdef PLANCC_HAVE_MPI
static bool mpi_started;

static int mpi_bcast(int rank, int world, void *blob, size_t bytes, char *err, size_t err_n) {
    int init = 0, r = -1, n = -1;
    MPI_Initialized(&init);
    if (!init) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return rt_say(err, err_n, "rendezvous: MPI_Init failed");
        mpi_started = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != rank || n != world)
        return rt_say(err, err_n, "rendezvous: MPI says rank %d of %d, planrun found rank %d of %d", r, n, rank, world);
    if (MPI_Bcast(blob, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return rt_say(err, err_n, "rendezvous: MPI_Bcast failed");
    return 0;
}
#endif

void rt_rendezvous_finish(void) {
#ifdef PLANCC_HAVE_MPI
    int fin = 0;
    if (mpi_started && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
    mpi_started = false;
#endif
}

int rt_rendezvous_run(const rt_rendezvous *r, int rank, int world, void *blob, size_t bytes, double timeout_s, char *err, size_t err_n) {
    if (bytes > RDV_MAX_BLOB) return rt_say(err, err_n, "rendezvous: %zu bytes is more than the %d it carries", bytes, RDV_MAX_BLOB);
    if (world < 1 || rank < 0 || rank >= world) return rt_say(err, err_n, "rendezvous: rank %d of %d", rank, world);
    if (r->kind == RT_RDV_NONE) return world == 1 ? 0 : rt_say(err, err_n, "rendezvous: none chosen for %d ranks", world);
    switch (r->kind) {
    case RT_RDV_TCP:
        return rank == 0 ? tcp_serve(r, world, blob, bytes, timeout_s, err, err_n) : tcp_join(r, rank, world, blob, bytes, timeout_s, err, err_n);
    case RT_RDV_FILE:
        return rank == 0 ? file_serve(r, world, blob, bytes, timeout_s, err, err_n) : file_join(r, rank, world, blob, bytes, timeout_s, err, err_n);
    case RT_RDV_MPI:
#ifdef PLANCC_HAVE_MPI
        return mpi_bcast(rank, world, blob, bytes, err, err_n);
#else
        return rt_say(err, err_n, "rendezvous: this planrun was built without MPI");
#endif
    default: return rt_say(err, err_n, "rendezvous: unknown kind %d", (int)r->kind);
    }
}
