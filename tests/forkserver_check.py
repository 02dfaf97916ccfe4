#!/usr/bin/env python3
"""The fork server the valgrind corpora run through (tests/forkserver.c) passes every child's
memory error on: run under valgrind as the corpora run it, each of forkserver_probe's errors
(a lost block, a branch on uninitialised memory, a read past a block) exits 97 as it would run
alone, a signal reads as one, a case after them runs clean, and arguments arrive as given (an
empty one too, and a request that spans reads). A warm-up (the tool run in the server itself)
discards its output and leaves no error behind: the same branch, run clean in the server first,
is still caught in a child.

usage: forkserver_check.py PROBE_FORK SOURCE_ROOT VALGRIND
"""
import os
import sys

from common import Forkserver, check, summary


def main():
    server, root, valgrind = sys.argv[1:4]
    memcheck = [valgrind, "-q", "--error-exitcode=97", "--leak-check=full", "--errors-for-leak-kinds=all"]
    s = Forkserver(server, memcheck, root, dict(os.environ))
    check("a warm-up: the tool's exit status", s.warm(["args", "warm"]) == 0 and s.warm(["uninit", "set"]) == 3)
    p = s.run(["args", "", "two words", "x" * 5000])
    check("arguments arrive as given, an empty one and a long one too",
          p.returncode == 0 and p.stdout.decode() == f"[probe][args][][two words][{'x' * 5000}]\n", repr(p))
    check("nothing of the warm-up's output in a case's", b"warm" not in p.stdout, repr(p))
    for what in ("leak", "uninit", "overflow"):
        p = s.run([what])
        check(f"{what}: exit 97, valgrind's error exit", p.returncode == 97, f"exit {p.returncode}")
    p = s.run(["segv"])
    check("segv: the child's signal", p.returncode == -11, f"exit {p.returncode}")
    p = s.run(["nothing"])
    check("a case after them: its own exit and stderr", p.returncode == 1 and b"want args" in p.stderr, repr(p))
    check("the server exits 0 at the end of its input", s.close() == 0)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
