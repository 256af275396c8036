"""Commands on traces with a thread, stream or step per event (hostile layouts whose time must
stay bounded), against ``json.load`` of the same file in the same rounds.

Eight traces are generated once into ``bench/data/`` (git-ignored), plain JSON:

- **threads**: 200,000 ``cpu_op`` events, each on its own thread;
- **streams**: 100,000 kernels, each on its own stream, with their launches;
- **steps**: 100,000 ``ProfilerStep#N`` annotations with a kernel in each;
- **overlap**: 100,000 kernels on one stream, each overlapping all the others;
- **flows**: one launch and 40,000 kernels that name its correlation id (40,000 flows from
  one slice);
- **crossing**: 40,000 slices on one thread, each opening inside all earlier ones and outliving
  them (an overlap lane each);
- **groups**: 40,000 collectives, each in a process group of its own, one group's name 1 MB;
- **devices**: 40,000 kernels, each on a GPU of its own (a per-GPU table of 40,000 rows).

These are the shapes of ``tests/hostile/corpus.py`` (``devices`` only here: at the corpus's
sizes its old cost stayed within the corpus's time bound) at sizes where time quadratic in the
events would show (minutes), each with the command it was slow in.

Each command runs in a fresh process (``echo-view ...``, output discarded); wall times are
medians over the rounds, and the ratio to ``json.load`` (what reading the file costs at least)
is the figure to compare across machines.

    python bench/many_lanes_bench.py [--runs 3] [--cases devices,steps]
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


def _overlap() -> list[dict[str, object]]:
    n = 100_000
    return [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 10 * n,
         "args": {"correlation": i, "device": 0, "stream": 7}}
        for i in range(n)
    ]  # fmt: skip


def _flows() -> list[dict[str, object]]:
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
              "ts": 0, "dur": 5, "args": {"correlation": 1}}  # fmt: skip
    return [launch] + [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1,
         "args": {"correlation": 1, "device": 0, "stream": 7}}
        for i in range(40_000)
    ]  # fmt: skip


def _crossing() -> list[dict[str, object]]:
    n = 40_000
    return [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 2 * n}
        for i in range(n)
    ]


def _groups() -> list[dict[str, object]]:
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    return [
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5,
         "args": {"device": 0, "stream": 7, "correlation": i, "Collective name": "allreduce",
                  "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
                  "Process Group Name": "G" * 1_000_000 if i == 7 else f"pg{i}",
                  "Process Group Ranks": "[0]"}}
        for i in range(40_000)
    ]  # fmt: skip


def _devices() -> list[dict[str, object]]:
    return [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": i, "tid": 7, "ts": i, "dur": 3,
         "args": {"correlation": i, "device": i, "stream": 7}}
        for i in range(40_000)
    ]  # fmt: skip


CASES = {
    "threads": (_threads, [["info"]]),
    "streams": (_streams, [["simulate"], ["diff", "{export}"]]),
    "steps": (_steps, [["simulate"], ["info"]]),
    "overlap": (_overlap, [["simulate"]]),
    "flows": (_flows, [["export", "-o", "{out}.pftrace"]]),
    "crossing": (_crossing, [["export", "-o", "{out}.json"]]),
    "groups": (_groups, [["export", "-o", "{out}.pftrace"]]),
    "devices": (_devices, [["info"], ["diff", "{export}"], ["interference"]]),
}


def _wall(argv: list[str]) -> float:
    t = time.perf_counter()
    # Output discarded (export's summary line goes to stderr); a failure still raises.
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args()
    chosen = args.cases.split(",")
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {sorted(CASES)}")
    DATA.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, medians of {args.runs} rounds (wall s)")
    for name in chosen:
        make, commands = CASES[name]
        path = DATA / f"many_{name}.json"
        if not path.exists():
            path.write_text(json.dumps({"traceEvents": make()}))
        export = DATA / f"many_{name}.export.json"
        if not export.exists():
            subprocess.run([*EV, "export", str(path), "-o", str(export)], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        base = [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"]
        for cmd in commands:
            out = DATA / f"many_{name}.out"
            argv = [*EV, cmd[0], str(path), *(a.format(export=export, out=out) for a in cmd[1:])]
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
