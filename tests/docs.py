#!/usr/bin/env python3
"""The docs suite: every shell block of a markdown page runs as written, and every file it names exists.

usage: docs.py BUILD_DIR SOURCE_ROOT PAGE.md [--list]

A page's shell blocks (```sh or ```bash fences) run in order, each as `bash -e BLOCK`, in one
scratch directory per page where build/ is a link to BUILD_DIR (the meson build) and models/,
data/, tools/, schemas/ and tests/ are links into SOURCE_ROOT, so a block reads exactly as a user
types it in a checkout (`build/plancc models/mlp.json ...`), and a block can use the files an
earlier block of the same page made. Output blocks (```text, or ``` with no language) are not run.

A block may be preceded by marker lines, HTML comments that a rendered page does not show:
  <!-- docs: skip: REASON -->   never run here; the suite prints the block's first line and REASON
  <!-- docs: gpu -->            run only where `nvidia-smi -L` lists a GPU; else skipped,
                                'needs a GPU'
  <!-- docs: exit N -->         the block must end with exit status N (a block that shows a
                                refusal: bash -e stops at the first failing command)
An unknown marker is an error, so a typo cannot hide a block.

Every path the page names under compiler/, runtime/, tools/, tests/, schemas/, models/, data/,
docs/ or .ci/ (in prose, tables or blocks; a `*` is a glob) must exist in SOURCE_ROOT, and every
relative link target ([text](target)) must exist relative to the page: a file map or a link
cannot rot. docs/design.md, the file map, must also name every file of compiler/, runtime/ and
tools/ (a file added without its row fails here). With --list the blocks are printed with what would happen to each, and nothing runs.

Exit status: 0 when every block that ran passed and every path exists; 1 otherwise.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LINKED = ["models", "data", "tools", "schemas", "tests"]
RUN_LANGS = {"sh", "bash"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(.*?)\s*-->\s*$")
PATH = re.compile(r"(?<![\w./-])((?:compiler|runtime|tools|tests|schemas|models|data|docs|\.ci)/[\w.*/+-]*[\w*/])")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
BLOCK_TIMEOUT_S = 600
SHOW_LINES = 40


class Block:
    def __init__(self, line, lang, text, markers):
        self.line, self.lang, self.text, self.markers = line, lang, text, markers
        self.skip, self.exit = None, 0

    def first(self):
        return next((l for l in self.text.splitlines() if l.strip()), "").strip()


def parse_markers(lines, fence_at):
    """The marker comments on the lines right above a fence (blank lines between are allowed)."""
    markers, i = [], fence_at - 1
    while i >= 0 and (not lines[i].strip() or MARKER.match(lines[i])):
        m = MARKER.match(lines[i])
        if m:
            markers.insert(0, (i + 1, m.group(1)))
        i -= 1
    return markers


def parse_blocks(text):
    """Every fenced block of a markdown text, with its language and the markers above it."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            body.append(lines[i][len(m.group(1)):] if lines[i].startswith(m.group(1)) else lines[i])
            i += 1
        blocks.append(Block(start + 1, lang, "\n".join(body) + "\n", parse_markers(lines, start)))
        i += 1
    return blocks


def has_gpu():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def decide(page, blocks, gpu):
    """Sets each shell block's skip reason and expected exit; returns the marker errors."""
    errors = []
    for b in blocks:
        if b.lang not in RUN_LANGS:
            if b.markers:
                errors.append(f"{page}:{b.markers[0][0]}: a docs marker above a block that does not run ({b.lang or 'no language'})")
            continue
        for line, m in b.markers:
            if m.startswith("skip:") and m[5:].strip():
                b.skip = m[5:].strip()
            elif m == "gpu":
                if not gpu:
                    b.skip = "needs a GPU"
            elif re.fullmatch(r"exit \d+", m):
                b.exit = int(m.split()[1])
            else:
                errors.append(f"{page}:{line}: unknown docs marker '{m}' (skip: REASON, gpu, exit N)")
    return errors


def check_paths(page, text, root):
    """Every source path and relative link the page names exists; returns the missing ones."""
    missing, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        for p in PATH.findall(line):
            if p not in seen:
                seen.add(p)
                if not glob.glob(os.path.join(root, p)):
                    missing.append(f"{page}:{n}: names {p}, which is not in the source tree")
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target in seen:
                continue
            seen.add(target)
            if not os.path.exists(os.path.join(root, os.path.dirname(page), target)):
                missing.append(f"{page}:{n}: links to {target}, which does not exist")
    return missing


MAPPED = ["compiler", "runtime", "tools"]
MAP_PAGE = "docs/design.md"


def check_map(page, text, root):
    """The file map names every file of the mapped folders; returns the ones it leaves out."""
    if page != MAP_PAGE:
        return []
    named = set()
    for p in PATH.findall(text):
        named.update(os.path.relpath(x, root) for x in glob.glob(os.path.join(root, p)))
    left = []
    for top in MAPPED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                if rel not in named and not f.endswith((".pyc",)):
                    left.append(f"{page}: the file map does not name {rel}")
    return left


def scratch_dir(build, root):
    d = tempfile.mkdtemp(prefix="plancc-docs-")
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    for name in LINKED:
        os.symlink(os.path.join(root, name), os.path.join(d, name))
    return d


def tail(s, n=SHOW_LINES):
    lines = s.rstrip("\n").splitlines()
    if len(lines) > n:
        lines = [f"... ({len(lines) - n} lines above)"] + lines[-n:]
    return "\n".join("    " + l for l in lines)


def run_block(page, b, cwd):
    path = os.path.join(cwd, f".block-{b.line}.sh")
    with open(path, "w", encoding="utf-8") as f:
        f.write(b.text)
    t0 = time.monotonic()
    try:
        p = subprocess.run(["bash", "-e", path], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=BLOCK_TIMEOUT_S)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = None, e.stdout or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
    dt = time.monotonic() - t0
    ok = rc == b.exit
    what = "timed out" if rc is None else f"exit {rc}" + ("" if b.exit == 0 else f", expected {b.exit}")
    print(f"{'ok  ' if ok else 'FAIL'} {page}:{b.line}: {b.first()}  ({what}, {dt:.1f} s)")
    if not ok or os.environ.get("DOCS_VERBOSE"):
        print("    the block:")
        print(tail(b.text, 1000))
        print("    its output:")
        print(tail(out))
    return ok


def main(argv):
    list_only = "--list" in argv
    args = [a for a in argv if a != "--list"]
    if len(args) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    build, root, page = args[0], os.path.abspath(args[1]), args[2]
    with open(os.path.join(root, page), encoding="utf-8") as f:
        text = f.read()
    blocks = parse_blocks(text)
    errors = decide(page, blocks, has_gpu()) + check_paths(page, text, root) + check_map(page, text, root)
    shell = [b for b in blocks if b.lang in RUN_LANGS]
    if list_only:
        for b in shell:
            state = f"skip ({b.skip})" if b.skip else "run" + (f", exit {b.exit}" if b.exit else "")
            print(f"{page}:{b.line}: {state}: {b.first()}")
        for e in errors:
            print(e)
        return 1 if errors else 0
    ran = failed = 0
    cwd = scratch_dir(build, root)
    try:
        for b in shell:
            if b.skip:
                print(f"skip {page}:{b.line}: {b.first()}  ({b.skip})")
                continue
            ran += 1
            if not run_block(page, b, cwd):
                failed += 1
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    for e in errors:
        print(f"FAIL {e}")
    skipped = len(shell) - ran
    print(f"{page}: {ran} blocks ran, {failed} failed, {skipped} skipped; {len(errors)} path or marker errors")
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
