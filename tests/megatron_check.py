#!/usr/bin/env python3
"""The cost model against Megatron-LM's published throughput: no row's error may regress.

The cluster's device figures are first principles (measured GEMM and HBM fractions, none fitted
to this table: models/clusters/README.md), and with them every row is predicted 9 to 22% faster
than published (with Megatron-LM's attention dropout counted since 2026-11-28; 12 to 27% before),
all but one row outside the issue's 10% target (what plancc's models and cost model still leave
out is listed in the README). The bounds below hold that error from growing; the target is
printed beside each row, not enforced, until the model reaches it without fitting.

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
# Grown on 2026-12-06 for 7.5B to 530B by 0.5 to 1.5 points: the estimate costs the sums of a
# value's gradient contributions split over tp as phase 3 makes them (they were costed whole, tp
# times too much), which outweighs the second gathers of the backward pass it now charges.
BOUNDS = {"1.7B": 11.0, "3.6B": 14.5, "7.5B": 18.5, "18B": 17.5,
          "39B": 21.0, "76B": 23.5, "145B": 17.5, "310B": 20.5, "530B": 17.5, "1T": 12.0}
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
