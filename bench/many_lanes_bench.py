"""Commands on traces with a thread, stream or step per event (hostile layouts whose time must
stay bounded), against ``json.load`` of the same file in the same rounds.

Three traces are generated once into ``bench/data/`` (git-ignored), plain JSON:

- **threads**: 200,000 ``cpu_op`` events, each on its own thread;
- **streams**: 100,000 kernels, each on its own stream, with their launches;
- **steps**: 100,000 ``ProfilerStep#N`` annotations with a kernel in each.

Each command runs in a fresh process (``echo-view ...``, output discarded); wall times are
medians over the rounds, and the ratio to ``json.load`` (what reading the file costs at least)
is the figure to compare across machines.

    python bench/many_lanes_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
EV = [sys.executable, "-c", "import sys; from echo_view.cli import main; sys.exit(main())"]


def _threads() -> list[dict[str, object]]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": i, "ts": i, "dur": 1}
        for i in range(200_000)
    ]


def _streams() -> list[dict[str, object]]:
    n = 100_000
    kernels = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": i, "ts": i, "dur": 1,
         "args": {"correlation": i, "stream": i, "device": 0}}
        for i in range(n)
    ]  # fmt: skip
    launches = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": i, "dur": 1, "args": {"correlation": i}}
        for i in range(n)
    ]  # fmt: skip
    return kernels + launches


def _steps() -> list[dict[str, object]]:
    n = 100_000
    steps = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": i * 10, "dur": 10}
        for i in range(n)
    ]  # fmt: skip
    kernels = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i * 10 + 2, "dur": 3,
         "args": {"correlation": i}}
        for i in range(n)
    ]  # fmt: skip
    return steps + kernels


CASES = {
    "threads": (_threads, [["info"]]),
    "streams": (_streams, [["simulate"], ["diff", "{export}"]]),
    "steps": (_steps, [["simulate"], ["info"]]),
}


def _wall(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, medians of {args.runs} rounds (wall s)")
    for name, (make, commands) in CASES.items():
        path = DATA / f"many_{name}.json"
        if not path.exists():
            path.write_text(json.dumps({"traceEvents": make()}))
        export = DATA / f"many_{name}.export.json"
        if not export.exists():
            subprocess.run([*EV, "export", str(path), "-o", str(export)], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        base = [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"]
        for cmd in commands:
            argv = [*EV, cmd[0], str(path), *(a.format(export=export) for a in cmd[1:])]
            ours, ref = [], []
            for _ in range(args.runs):
                ours.append(_wall(argv))
                ref.append(_wall(base))
            ratio = statistics.median(o / r for o, r in zip(ours, ref, strict=True))
            print(
                f"{name:8} {' '.join(cmd[:1]):9} {statistics.median(ours):7.2f} s   "
                f"json.load {statistics.median(ref):5.2f} s   ratio {ratio:5.1f}x"
            )


if __name__ == "__main__":
    main()
