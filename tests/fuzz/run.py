#!/usr/bin/env python3
"""Runs one libFuzzer harness for a while on seeds, after replaying every crash found before.

usage: run.py FUZZER SECONDS [--plandump P] [--crashes DIR] SEED...

SEED is a file or a folder of files; a *.plan.txt seed is also assembled into a binary plan
(plandump --assemble --force) for the binary reader's harness (FUZZER's name says which:
fuzz_plan takes binary plans). Every file in --crashes (each a crash that fuzzing found once and
that is fixed now) runs first and must pass. The fuzzer then runs for SECONDS on a scratch copy
of the seeds (the source tree is not written); it prints its executions and coverage, and a
crash fails the run with the input saved as crash-* in the current folder (add it to
tests/fuzz/crashes/HARNESS/ once fixed).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    args = sys.argv[1:]
    fuzzer, seconds = args[0], int(args[1])
    plandump = crashes = None
    seeds = []
    i = 2
    while i < len(args):
        if args[i] == "--plandump":
            plandump, i = args[i + 1], i + 2
        elif args[i] == "--crashes":
            crashes, i = args[i + 1], i + 2
        else:
            seeds.append(args[i])
            i += 1
    binary = os.path.basename(fuzzer).startswith("fuzz_plan")
    with tempfile.TemporaryDirectory() as t:
        corpus = os.path.join(t, "corpus")
        os.mkdir(corpus)
        n = 0
        for s in seeds:
            for f in sorted(glob.glob(os.path.join(s, "*")) if os.path.isdir(s) else [s]):
                if not os.path.isfile(f):
                    continue
                n += 1
                if binary and f.endswith(".plan.txt") and plandump:
                    subprocess.run([plandump, "--assemble", f, "-o", os.path.join(corpus, f"seed{n}.plan"), "--force"],
                                   capture_output=True)
                elif not binary:
                    shutil.copy(f, os.path.join(corpus, f"seed{n}"))
        replay = sorted(glob.glob(os.path.join(crashes, "*"))) if crashes and os.path.isdir(crashes) else []
        if replay:
            p = subprocess.run([fuzzer, *replay], capture_output=True, text=True, errors="replace")
            if p.returncode != 0:
                print(p.stderr[-4000:])
                print(f"FAIL: a recorded crash ({crashes}) crashes again")
                return 1
            print(f"{len(replay)} recorded crash inputs replayed: fixed")
        p = subprocess.run([fuzzer, f"-max_total_time={seconds}", "-timeout=20", "-rss_limit_mb=2048", "-max_len=1048576",
                            "-print_final_stats=1", f"-artifact_prefix={os.getcwd()}/", corpus],
                           capture_output=True, text=True, errors="replace")
        runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", p.stderr)
        cov = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", p.stderr)
        name = os.path.basename(fuzzer)
        print(f"{name}: {runs[-1] if runs else '?'} executions in {seconds} s from {n} seeds; coverage {cov[-1][0] if cov else '?'} "
              f"edges, {cov[-1][2] if cov else '?'} inputs in the corpus; exit {p.returncode}")
        if p.returncode != 0:
            print(p.stderr[-6000:])
            print(f"FAIL: {name} crashed (the input is the crash-* file named above)")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
