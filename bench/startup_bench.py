"""Start-up time of the ``echo-view`` command, measured like hyperfine: repeated runs of each
command in fresh processes, interleaved round by round with ``python -c pass`` (the
interpreter's own start-up) as the baseline, reporting medians and the per-round ratio.

Bytecode is cached first (one warm-up run of each command), so the numbers are what a user sees
from the second run on. Commands run as ``python -m echo_view ...`` with the repository on
``PYTHONPATH``, the same imports the ``echo-view`` script performs. ``--tree DIR`` measures
another checkout in the same rounds (e.g. an older revision, for a before/after ratio).

    python bench/startup_bench.py [--runs 20] [--tree DIR] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ("-c", "pass")
COMMANDS: dict[str, tuple[str, ...]] = {
    "echo-view --version": ("-m", "echo_view", "--version"),
    "echo-view --help": ("-m", "echo_view", "--help"),
    "echo-view info --help": ("-m", "echo_view", "info", "--help"),
    "echo-view simulate --help": ("-m", "echo_view", "simulate", "--help"),
}


def _once(args: tuple[str, ...], tree: Path) -> float:
    # ``-m`` puts the working directory first on sys.path: run in the tree measured.
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="rounds (20)")
    ap.add_argument("--tree", type=Path, help="another checkout to measure in the same rounds")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    opts = ap.parse_args()
    trees = {"": ROOT} | ({} if opts.tree is None else {f" ({opts.tree})": opts.tree.resolve()})
    runs = {
        name + label: (args, tree)
        for name, args in COMMANDS.items()
        for label, tree in trees.items()
    }
    for args, tree in [(BASELINE, ROOT), *runs.values()]:
        _once(args, tree)  # warm-up: write the bytecode caches
    base: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in runs}
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(opts.runs):
        b = _once(BASELINE, ROOT)
        base.append(b)
        for name, (args, tree) in runs.items():
            t = _once(args, tree)
            times[name].append(t)
            ratios[name].append(t / b)
    rows = [("python -c pass", statistics.median(base), min(base), 1.0)]
    rows += [
        (name, statistics.median(ts), min(ts), statistics.median(ratios[name]))
        for name, ts in times.items()
    ]
    if opts.markdown:
        print("| command | median s | min s | / python -c pass |")
        print("|---|---:|---:|---:|")
        for name, med, low, ratio in rows:
            print(f"| `{name}` | {med:.3f} | {low:.3f} | {ratio:.2f} |")
    else:
        for name, med, low, ratio in rows:
            print(f"{name:40s} median {med:.3f} s  min {low:.3f} s  x{ratio:.2f}")


if __name__ == "__main__":
    main()
