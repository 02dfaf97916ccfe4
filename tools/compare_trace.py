#!/usr/bin/env python3
"""Predicted against measured: a plan's simulated timeline beside a real run's.

usage: compare_trace.py SIM.json RUN.json [RUN.rank1.json ...] [--skip N] [--svg OUT.svg]
                        [--step K] [--ranks A-B] [--same-scale] [--json]

SIM.json is `plandump --trace SIM.json PLAN` (the cost model's simulation of one step); each
RUN.json is `planrun PLAN --trace RUN.json` (one file, or one per process where each process runs
one rank: RUN.rankN.json). Both carry a slice per instruction with the same tracks (a process
per rank, a thread per stream) and the same identity (args insn, mb, layer), so each simulated
slice is matched with the same instruction of every measured step. The first N measured steps
are warm-up (--skip, default 1 when the run has more than one step) and are left out.

It prints
  - per step: the measured step time, and its ratio to the simulated step;
  - per instruction kind (operator, collective, send, recv, copy) and phase: how many run per
    step, their total time per step predicted and measured (the mean over the steps compared),
    and measured / predicted;
  - per rank: the busy time of its compute stream, predicted and measured;
and with --svg draws both timelines one above the other for the ranks of the simulation (or
--ranks): the predicted step, then measured step K (--step, default the last), each row a rank's
stream, each on its own time axis unless --same-scale.

Record and wait instructions are in the measured trace (the time a stream spends blocked) but
not in the simulation's; they are counted apart. Exit status: 0; 2 for unreadable input or
traces of different plans (no instruction in common).
"""
import argparse
import json
import os
import signal
import sys
from collections import defaultdict

COMM = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast", "shift", "send", "recv"}
PHASE_COLOURS = {"fwd": "#4e79a7", "bwd": "#3a8a3a", "recompute": "#e8b93a", "opt": "#b07aa1", "none": "#9a9a9a"}
COMM_COLOUR, MSG_COLOUR, COPY_COLOUR, WAIT_COLOUR = "#e15759", "#f28e2b", "#bab0ac", "#eeeeee"


def die(msg):
    print(f"compare_trace: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        die(f"{path}: not a Chrome trace of plandump --trace or planrun --trace (no traceEvents)")
    return d


def slices(d):
    """The instruction slices of a trace: (pid, tid, insn, mb, layer) -> list of (step, ts_us, dur_us, name, phase)."""
    out = defaultdict(list)
    for e in d["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") != "X" or "insn" not in a:
            continue
        key = (e["pid"], e["tid"], a["insn"], a.get("mb", 0), a.get("layer", 0))
        out[key].append((a.get("step", 0), e["ts"], e["dur"], e["name"], a.get("phase", "none")))
    return out


def names(d):
    """pid -> process name, (pid, tid) -> thread name."""
    procs, threads = {}, {}
    for e in d["traceEvents"]:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


def kind_of(name):
    if name in ("record", "wait"):
        return "event"
    if name in ("send", "recv"):
        return "message"
    if name in COMM:
        return "collective"
    if name == "copy":
        return "copy"
    return "operator"


def colour(name, phase):
    k = kind_of(name)
    if k == "collective":
        return COMM_COLOUR
    if k == "message":
        return MSG_COLOUR
    if k == "copy":
        return COPY_COLOUR
    if k == "event":
        return WAIT_COLOUR
    return PHASE_COLOURS.get(phase, PHASE_COLOURS["none"])


def parse_ranks(spec):
    a, _, b = spec.partition("-")
    try:
        lo, hi = int(a), int(b or a)
    except ValueError:
        die(f"--ranks {spec}: want A-B or A")
    return lo, hi


def compare(sim, runs, skip):
    """The tables: per step, per kind and phase, per rank."""
    steps = sorted({s for r in runs.values() for (s, *_ ) in r})
    if skip is None:
        skip = 1 if len(steps) > 1 else 0
    used = steps[skip:] or steps[-1:]
    per_kind = defaultdict(lambda: [0, 0.0, 0.0])   # (kind, name, phase) -> [count, predicted us, measured us per step]
    busy = defaultdict(lambda: [0.0, 0.0])           # pid -> [predicted, measured per step] on stream 0
    matched = 0
    for key, sv in sim.items():
        rv = runs.get(key)
        if not rv:
            continue
        _, _, pdur, name, phase = sv[0]
        if rv[0][3] != name:
            die(f"rank {key[0]} stream {key[1]} instruction {key[2]} is {name} in the simulation but {rv[0][3]} in the run: "
                "traces of different plans")
        matched += 1
        got = [dur for (step, _, dur, _, _) in rv if step in used]
        if not got:
            continue
        mdur = sum(got) / len(used)
        row = per_kind[(kind_of(name), name, phase)]
        row[0] += len(got) / len(used)
        row[1] += pdur
        row[2] += mdur
        if key[1] == 0:
            busy[key[0]][0] += pdur
            busy[key[0]][1] += mdur
    unmatched = sum(1 for k in runs if k not in sim)
    return used, per_kind, busy, matched, unmatched


def print_tables(args, simd, rund, used, per_kind, busy, matched, unmatched):
    sim_step = (simd.get("otherData") or {}).get("simulated_step_s")
    step_s = (rund.get("otherData") or {}).get("step_s") or []
    print(f"predicted: {args.sim} (simulated step {sim_step * 1e3:.3f} ms)" if sim_step else f"predicted: {args.sim}")
    print(f"measured:  {', '.join(args.run)} ({len(step_s)} steps; compared: {', '.join(map(str, used))})")
    print(f"instructions matched: {matched}; measured only (record, wait): {unmatched}")
    print()
    print(f"{'step':>6} {'measured ms':>12} {'/ predicted':>12}")
    for i, t in enumerate(step_s):
        ratio = f"{t / sim_step:12.2f}" if sim_step else f"{'-':>12}"
        print(f"{i + 1:>6} {t * 1e3:12.3f} {ratio}{'' if (i + 1) in used else '   (warm-up)'}")
    print()
    print(f"{'kind':<11} {'instruction':<18} {'phase':<10} {'per step':>8} {'predicted ms':>13} {'measured ms':>12} {'ratio':>7}")
    tp = tm = 0.0
    for (kind, name, phase), (n, p, m) in sorted(per_kind.items(), key=lambda kv: -kv[1][2]):
        tp, tm = tp + p, tm + m
        ratio = f"{m / p:7.2f}" if p > 0 else f"{'-':>7}"
        print(f"{kind:<11} {name:<18} {phase:<10} {n:8.0f} {p / 1e3:13.4f} {m / 1e3:12.4f} {ratio}")
    print(f"{'all':<11} {'':<18} {'':<10} {'':>8} {tp / 1e3:13.4f} {tm / 1e3:12.4f} {tm / tp if tp else 0:7.2f}")
    print()
    print(f"{'rank':>4} {'busy predicted ms':>18} {'busy measured ms':>17} {'ratio':>7}   (stream 0)")
    for q in sorted(busy):
        p, m = busy[q]
        print(f"{q:>4} {p / 1e3:18.4f} {m / 1e3:17.4f} {m / p if p else 0:7.2f}")


def json_out(simd, rund, used, per_kind, busy, matched, unmatched):
    return {
        "simulated_step_s": (simd.get("otherData") or {}).get("simulated_step_s"),
        "measured_step_s": (rund.get("otherData") or {}).get("step_s"),
        "steps_compared": used,
        "matched": matched,
        "measured_only": unmatched,
        "kinds": [{"kind": k, "name": n, "phase": ph, "per_step": c, "predicted_s": p / 1e6, "measured_s": m / 1e6}
                  for (k, n, ph), (c, p, m) in sorted(per_kind.items())],
        "ranks": [{"rank": q, "busy_predicted_s": p / 1e6, "busy_measured_s": m / 1e6} for q, (p, m) in sorted(busy.items())],
    }


def svg_rows(d, pick_step, ranks):
    """(pid, tid) -> list of (start us from the step's start, dur us, colour) for one step."""
    rows = defaultdict(list)
    starts = {}
    for e in d["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") == "X" and e.get("cat") == "step" and a.get("step") == pick_step:
            starts[e["pid"]] = e["ts"]
    for e in d["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") != "X" or "insn" not in a or e["pid"] not in ranks:
            continue
        if pick_step is not None and a.get("step") != pick_step:
            continue
        t0 = starts.get(e["pid"], 0.0) if pick_step is not None else 0.0
        rows[(e["pid"], e["tid"])].append((e["ts"] - t0, e["dur"], colour(e["name"], a.get("phase", "none"))))
    return rows


def draw(args, simd, rund, step, out):
    procs, threads = names(simd)
    pids = sorted(procs)
    if args.ranks:
        lo, hi = parse_ranks(args.ranks)
        pids = [q for q in pids if lo <= q <= hi]
    ranks = set(pids)
    panels = [("predicted (the cost model's simulation)", svg_rows(simd, None, ranks)),
              (f"measured (planrun --trace, step {step})", svg_rows(rund, step, ranks))]
    tracks = sorted({k for _, rows in panels for k in rows})
    spans = [max((s + d for r in rows.values() for (s, d, _) in r), default=1.0) for _, rows in panels]
    if args.same_scale:
        spans = [max(spans)] * 2
    W, LEFT, ROW = 1500, 240, 18
    plot = W - LEFT - 20
    h = 40 + len(panels) * (40 + ROW * len(tracks)) + 30
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{h}" fill="white"/>',
         f'<text x="10" y="20" font-size="14" font-weight="bold">{os.path.basename(args.sim)} against '
         f'{os.path.basename(args.run[0])}: predicted above, measured below</text>']
    y = 40
    for (title, rows), span in zip(panels, spans):
        o.append(f'<text x="10" y="{y + 14}" font-weight="bold">{title}: {span / 1e3:.3f} ms across</text>')
        y += 22
        for k in tracks:
            label = f"{procs.get(k[0], 'rank %d' % k[0])}".split(" (")[0] + " " + threads.get(k, f"stream {k[1]}")
            o.append(f'<text x="10" y="{y + ROW - 5}">{label}</text>')
            o.append(f'<rect x="{LEFT}" y="{y}" width="{plot}" height="{ROW - 2}" fill="#f6f6f6"/>')
            for (s, d, c) in rows.get(k, []):
                x = LEFT + plot * s / span
                w = max(plot * d / span, 0.3)
                o.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW - 2}" fill="{c}"/>')
            y += ROW
        y += 18
    legend = [("forward", PHASE_COLOURS["fwd"]), ("backward", PHASE_COLOURS["bwd"]), ("recompute", PHASE_COLOURS["recompute"]),
              ("optimizer", PHASE_COLOURS["opt"]), ("collective", COMM_COLOUR), ("send/recv", MSG_COLOUR),
              ("copy", COPY_COLOUR), ("record/wait", WAIT_COLOUR)]
    x = LEFT
    for name, c in legend:
        o.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{c}" stroke="#999" stroke-width="0.5"/>'
                 f'<text x="{x + 16}" y="{y + 10}">{name}</text>')
        x += 110
    o.append("</svg>")
    try:
        with open(out, "w") as f:
            f.write("\n".join(o) + "\n")
    except OSError as e:
        die(f"{out}: {e}")


def main():
    ap = argparse.ArgumentParser(description="Predicted (plandump --trace) against measured (planrun --trace).")
    ap.add_argument("sim")
    ap.add_argument("run", nargs="+")
    ap.add_argument("--skip", type=int, default=None, help="warm-up steps left out (default 1 when there are several)")
    ap.add_argument("--svg", help="draw both timelines here")
    ap.add_argument("--step", type=int, help="the measured step --svg draws (default the last)")
    ap.add_argument("--ranks", help="the ranks --svg draws, A-B (default the simulation's)")
    ap.add_argument("--same-scale", action="store_true", help="one time axis for both timelines")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args()
    simd = load(args.sim)
    rund = {"traceEvents": [], "otherData": {}}
    for path in args.run:
        d = load(path)
        rund["traceEvents"] += d["traceEvents"]
        if not rund["otherData"]:
            rund["otherData"] = d.get("otherData") or {}
    sim, runs = slices(simd), slices(rund)
    if not runs:
        die(f"{args.run[0]}: no instruction slices (is it planrun --trace's output?)")
    used, per_kind, busy, matched, unmatched = compare(sim, runs, args.skip)
    if not matched:
        die(f"{args.sim} and {args.run[0]} have no instruction in common: traces of different plans?")
    if args.json:
        print(json.dumps(json_out(simd, rund, used, per_kind, busy, matched, unmatched), indent=1))
    else:
        print_tables(args, simd, rund, used, per_kind, busy, matched, unmatched)
    if args.svg:
        step = args.step if args.step is not None else used[-1]
        draw(args, simd, rund, step, args.svg)
        if not args.json:
            print(f"\nwrote {args.svg}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    main()
