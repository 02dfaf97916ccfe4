#!/usr/bin/env python3
"""tools/man_page.py: a manual page (troff, section 1) made from a program's own --help and
--version, so that `man plancc` says what `plancc --help` says and never drifts from it.

usage: man_page.py PROGRAM OUT.1

The page has NAME (the program and the first line of its --help description), SYNOPSIS (the
usage lines), DESCRIPTION (the rest of --help, verbatim in a no-fill block so that the option
table keeps its columns), VERSION and SEE ALSO. It exits 1 when the program cannot say --help.
"""
import os
import subprocess
import sys

SUMMARY = {"plancc": "compile a DNN training job into a parallel execution plan",
           "plandump": "show, check, simulate and assemble plancc's plan files",
           "planrun": "run a plancc plan for training steps (CPU threads, MPI processes or GPUs)",
           "plancc-import": "turn a PyTorch or ONNX model into plancc's model JSON"}


def esc(line):
    """A line of text as troff shows it: backslashes doubled, a leading dot or quote guarded."""
    line = line.replace("\\", "\\e")
    if line.startswith((".", "'")):
        line = "\\&" + line
    return line


def main():
    prog, out = sys.argv[1], sys.argv[2]
    name = os.path.basename(prog)
    h = subprocess.run([prog, "--help"], capture_output=True, text=True)
    v = subprocess.run([prog, "--version"], capture_output=True, text=True)
    if h.returncode != 0 or not h.stdout:
        print(f"man_page.py: {prog} --help failed: {h.stderr}", file=sys.stderr)
        return 1
    lines = h.stdout.rstrip("\n").split("\n")
    usage = [l for l in lines if l.lstrip().startswith("usage:") or (l.startswith("       ") and name in l.split()[:1])]
    body = lines[len(usage):] if lines[:len(usage)] == usage else lines
    page = [f'.TH {name.upper()} 1 "" "{esc(v.stdout.strip())}" "plancc manual"', ".SH NAME",
            f"{name} \\- {SUMMARY.get(name, 'part of plancc')}", ".SH SYNOPSIS", ".nf"]
    page += [esc(l.replace("usage:", "").strip()) for l in usage]
    page += [".fi", ".SH DESCRIPTION", ".nf"] + [esc(l) for l in body] + [".fi", ".SH VERSION", esc(v.stdout.strip()),
             ".SH SEE ALSO", ", ".join(f"\\fB{t}\\fR(1)" for t in ("plancc", "plandump", "planrun") if t != name)
             + "; the manual in share/doc/plancc and https://github.com (README.md, docs/)"]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(page) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
