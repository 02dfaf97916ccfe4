#!/usr/bin/env python3
"""The cost model against Megatron-LM's published throughput: no row's error may regress.

The cluster's device figures are first principles (measured GEMM and HBM fractions, none fitted
to this table: models/clusters/README.md), and with them every row is predicted 5 to 10% faster
than published, Megatron-LM's own layout of 2021 pinned (tools/megatron_bench.py's
MEGATRON_LAYOUT: its column- and row-parallel products, and the norms, dropouts and residual adds
whole on every tp rank since 2026-12-07; 9 to 22% before, with them split along the sequence),
every row within the issue's 10% target since a rank's messages share its link (2026-12-07;
76B and 310B were just outside it). What plancc's models and cost model still leave out is
listed in models/clusters/README.md. The bounds below, all inside the target, hold that error
from growing.

Runs tools/megatron_bench.py's core (the template estimate of every row of
data/megatron_sc21_a100.csv, a copy of ../shared/data's, on models/clusters/dgx-a100.json) and fails when a row's
predicted TFLOP/s per GPU is further from the published figure than the bound recorded for it
below. The bounds are the errors when they were recorded,
rounded up, plus 1.5 points of slack; tighten them when the model gets better, and say why in
the commit when one has to grow.

usage: megatron_check.py PLANCC SOURCE_ROOT
Exit 77 (meson's skip) when the published table is not there.
"""
import os
import sys
import time

TARGET = 10.0  # percent, the issue's
# Recorded |error| bounds in percent, per row (tools/megatron_bench.py's table).
# Re-recorded on 2026-12-06 (each error rounded up to half a point, plus half a point): the bench
# now pins Megatron-LM's own tensor-parallel layout with a policy, so that each row estimates the
# plan the paper measured, not the ILP's choice (which, with the ILP charging a value's
# resharding once for all its readers, beats Megatron-LM's layout on 18B by 4% simulated). All
# rows but 18B come closer; 18B, whose old ILP choice was 1% slower than Megatron-LM's layout,
# is +18.1% (it was +17.1%).
# Tightened on 2026-12-07 (the same rule), after the estimate learned the blocks' carry copies:
# every row 0.2-0.6 points closer. Again on 2026-12-07, after the bench pinned the norms, dropouts
# and residual adds whole on every tp rank, as Megatron-LM of 2021 ran them: mean 15.3% -> 7.2%.
# Again on 2026-12-07, after a rank's messages came to share its link (an interleaved schedule's
# send forward and send backward one after another): 76B +10.4% -> +9.0%, 145B +5.9% -> +5.1%,
# 310B +10.1% -> +8.9%, 530B +6.7% -> +3.1%, every row within the 10% target.
BOUNDS = {"1.7B": 9.5, "3.6B": 8.5, "7.5B": 7.5, "18B": 6.0,
          "39B": 6.0, "76B": 9.5, "145B": 6.0, "310B": 9.5, "530B": 4.0, "1T": 7.0}
TIME_LIMIT_S = 30.0


def main():
    plancc, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    sys.path.insert(0, os.path.join(root, "tools"))
    import megatron_bench as mb

    csv = os.path.join(root, "data", "megatron_sc21_a100.csv")
    if not os.path.exists(csv):
        print("skip: %s is not there" % csv)
        return 77
    t0 = time.perf_counter()
    results, _ = mb.run(plancc, root, csv, emit=False, first_principles=False)
    dt = time.perf_counter() - t0
    print(mb.table(results))
    failed = 0
    for x in results:
        bound = BOUNDS.get(x["model"], TARGET)
        ok = abs(x["error_pct"]) <= bound
        failed += not ok
        print("%-4s %-5s error %+6.1f%%, bound %4.1f%% (%s the %.0f%% target)" % (
            "ok" if ok else "FAIL", x["model"], x["error_pct"], bound,
            "within" if abs(x["error_pct"]) <= TARGET else "outside", TARGET))
    missing = set(BOUNDS) - {x["model"] for x in results}
    for m in sorted(missing):
        print("FAIL %s: recorded here but not in the table" % m)
    failed += len(missing)
    ok = dt <= TIME_LIMIT_S
    failed += not ok
    print("%-4s the check took %.2f s (limit %.0f s)" % ("ok" if ok else "FAIL", dt, TIME_LIMIT_S))
    print("%d rows, %d failed" % (len(results), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
