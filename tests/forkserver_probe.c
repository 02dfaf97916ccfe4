/*
 * tests/forkserver_probe.c: a tool for tests/forkserver_check.py to run through the fork server
 * (tests/forkserver.c) under valgrind, one memory error a request, so that the check sees the
 * server pass each child's error on as the exit code valgrind gives it alone.
 *
 *   args       prints its arguments, each in brackets, and exits 0
 *   leak       loses a block and exits 2
 *   uninit     branches on uninitialised heap memory and exits 2 or 3
 *   uninit set the same code on memory it set first (clean): run as a warm-up, it leaves the
 *              branch translated in the server, where a child's uninit must still be caught
 *   overflow   reads one past a heap block and exits 2
 *   segv       dies of SIGSEGV
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tool_main(int argc, char **argv);

static int *volatile sink; // stops the compiler from removing the allocations

int tool_main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "args")) {
        for (int i = 0; i < argc; i++) printf("[%s]", argv[i]);
        printf("\n");
        return 0;
    }
    if (!strcmp(what, "leak")) {
        sink = malloc(10 * sizeof *sink);
        sink = NULL;
        return 2;
    }
    if (!strcmp(what, "uninit")) {
        sink = malloc(4 * sizeof *sink);
        if (argc > 2 && !strcmp(argv[2], "set")) memset(sink, 0, 4 * sizeof *sink);
        int r = sink[1] > 3 ? 2 : 3;
        free(sink);
        return r;
    }
    if (!strcmp(what, "overflow")) {
        sink = malloc(4 * sizeof *sink);
        volatile int past = sink[4];
        (void)past;
        free(sink);
        return 2;
    }
    if (!strcmp(what, "segv")) raise(SIGSEGV);
    fprintf(stderr, "forkserver_probe: want args, leak, uninit, overflow or segv\n");
    return 1;
}
