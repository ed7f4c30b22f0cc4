"""How often the report's change-point detector cries wolf, and how often it finds a real step.

On seeded normal noise (sd 2% of the level): false change points in SERIES series of LENGTH
runs of one level, and the share of 1.5-sd steps (3%, 40 runs either side) found within two
runs of where they are, at each p-value threshold; plus the time per 10,000-run series.

    PYTHONPATH=$PWD python benchmarks/report_changepoints.py

Not a test. The report uses p < 0.0001 (perfgate.report.chart_data.CHANGE_MAX_P) from these figures.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from perfgate.report.changepoints import detect_change_points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=30)
    parser.add_argument("--length", type=int, default=2000)
    args = parser.parse_args()
    for max_p in (1e-3, 1e-4, 1e-5):
        false, found = 0, 0
        for seed in range(args.series):
            rng = np.random.default_rng(seed)
            false += len(detect_change_points(rng.normal(100, 2, args.length), max_p=max_p))
            step = np.concatenate([rng.normal(100, 2, 40), rng.normal(103, 2, 40)])
            found += any(abs(c.index - 40) <= 2 for c in detect_change_points(step, max_p=max_p))
        print(f"p < {max_p:g}: {false} false change points in {args.series} x {args.length} "
              f"runs of noise; {found}/{args.series} 1.5-sd steps found")  # fmt: skip
    long = np.random.default_rng(0).normal(100, 2, 10_000)
    began = time.perf_counter()
    for _ in range(10):
        detect_change_points(long, max_p=1e-4)
    print(f"{(time.perf_counter() - began) * 100:.1f} ms per 10,000-run series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
