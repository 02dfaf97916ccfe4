#!/usr/bin/env python3
"""House rules: no source file over 1,500 lines, no function over 80 lines.

usage: sizes.py SOURCE_ROOT [--list N]

Reads every C and CUDA source and header under compiler/, runtime/ and tools/ (not tests/: a test
harness may hold a long table of cases) and fails on
  - a file of more than 1,500 lines (split it along a seam; STYLE.md), or
  - a function of more than 80 lines, except the ones ALLOWED below: usage text, option parsing
    and dispatch switches, which read as flat lists however long they are.
--list N prints every function longer than N lines (the listing the house issue asks for).

Functions are found by brace matching over the source with comments and strings blanked: a body
is a '{' at file scope that follows a ')' (not an initializer's '='); its name is the identifier
before the matching '('.
"""
import os
import re
import sys

MAX_FILE = 1500
MAX_FUNC = 80
# (file, function): why it may be longer.
ALLOWED = {
    ("compiler/options.c", "usage"): "usage text",
    ("compiler/options.c", "option"): "option parsing: one case per option",
    ("runtime/planrun.c", "usage"): "usage text",
    ("runtime/planrun.c", "parse_args"): "option parsing: one case per option",
    ("compiler/autodiff.c", "rule"): "dispatch switch: one case per operator's gradient rule",
}
DIRS = ["compiler", "runtime", "tools"]
EXTS = (".c", ".h", ".cu", ".cuh")


def blank(src):
    """src with comments and string/char literals emptied, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src[i] in "\"'":
            q, j = src[i], i + 1
            while j < n and src[j] != q:
                j += 2 if src[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, lines) of every function body in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        s = blank(f.read())
    found, depth, line, name, start = [], 0, 1, None, 0
    for i, ch in enumerate(s):
        if ch == "\n":
            line += 1
        elif ch == "{":
            if depth == 0:
                before = s[max(0, i - 600):i].rstrip()
                name = None
                if before.endswith(")") and not re.search(r"=\s*[^;{}]*$", before[-300:]):
                    k, d = len(before) - 1, 0
                    while k >= 0:
                        d += before[k] == ")"
                        d -= before[k] == "("
                        if before[k] == "(" and d == 0:
                            break
                        k -= 1
                    m = re.search(r"([A-Za-z_]\w*)\s*$", before[:k])
                    name, start = (m.group(1) if m else "?"), line
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and name:
                found.append((name, start, line - start + 1))
                name = None
    return found


def sources(root):
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def main():
    args = sys.argv[1:]
    listing = None
    if "--list" in args:
        k = args.index("--list")
        listing = int(args[k + 1])
        del args[k:k + 2]
    if len(args) != 1:
        print(__doc__)
        return 2
    root = args[0]
    bad = 0
    longest = []
    for rel in sorted(sources(root)):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_FILE:
            bad += 1
            print(f"FAIL {rel}: {n} lines (at most {MAX_FILE}; split it along a seam)")
        for name, first, length in functions(os.path.join(root, rel)):
            longest.append((length, rel, name, first))
            if length > MAX_FUNC and (rel, name) not in ALLOWED:
                bad += 1
                print(f"FAIL {rel}:{first}: {name} is {length} lines (at most {MAX_FUNC})")
    for length, rel, name, first in sorted(longest, reverse=True):
        if length > MAX_FUNC and (rel, name) in ALLOWED:
            print(f"allowed {rel}:{first}: {name}, {length} lines ({ALLOWED[(rel, name)]})")
        elif listing is not None and length > listing:
            print(f"{length:5d} {rel}:{first} {name}")
    stale = [k for k in ALLOWED if not any((r, n) == k for _, r, n, _ in longest)]
    for rel, name in stale:
        bad += 1
        print(f"FAIL {rel}: {name} is allowed to be long but no longer exists there (drop it from ALLOWED)")
    print(f"{len(longest)} functions in {len(set(r for _, r, _, _ in longest))} files; {bad} over the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
