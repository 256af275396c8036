"""Wall time, CPU time and peak RSS of tracing a user's training script (no GPU): the
Llama-3 sample (samples/scripts/llama3_fsdp.py) as Llama 3 8B under FSDP2 on 64 ranks, and as
Llama 3.1 70B under FSDP2 x tensor parallel 8 on 256 ranks (its config). Each case is one
``echo-view trace`` command in a fresh process; the ranks it traces run in their own child
processes, so the peak RSS is the largest of the command and its children: a wrapper process
per case runs the command and reports its ``RUSAGE_CHILDREN`` maximum (Linux folds every
waited-for descendant into it).

``--large-worlds`` traces ``samples/scripts/gpt_ddp.py`` (DDP: one data-parallel group of every
rank) at ``--world`` 8, 131,072 and 1,000,000 instead: the cost that grows with the world size.

    python bench/script_trace_bench.py [--repeat 1] [--large-worlds]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "samples" / "scripts"
CASES = [
    (
        "Llama 3 8B, FSDP2, 64 ranks",
        ["--script", str(SCRIPTS / "llama3_fsdp.py"), "--world", "64"],
    ),
    (
        "Llama 3.1 70B, FSDP2 32 x TP 8, 256 ranks",
        [str(SCRIPTS / "llama3_70b_fsdp_tp_256xh100.toml")],
    ),
]
LARGE_WORLDS = [
    (f"GPT DDP, {w:,} ranks", ["--script", str(SCRIPTS / "gpt_ddp.py"), "--world", str(w)])
    for w in (8, 131_072, 1_000_000)
]

#: Runs argv[1:] and prints the peak RSS (KB) of it and its descendants on stderr.
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def _one(args: list[str]) -> tuple[float, float, float, str]:
    """Wall s, CPU s (user + system of the command and its children), peak RSS MB, and the
    command's summary line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "graph.json.gz"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "echo_view", "trace", *args]
        proc = subprocess.run(
            [*cmd, "-o", str(out)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    *lines, rss_kb = proc.stderr.strip().splitlines()
    return wall, cpu, int(rss_kb) / 1024, lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--large-worlds", action="store_true", help="GPT DDP at 8 to 1 M ranks")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    for name, argv in LARGE_WORLDS if args.large_worlds else CASES:
        for _ in range(args.repeat):
            wall, cpu, rss, line = _one(argv)
            print(f"{name}: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.0f} MB")
            print(f"  {line}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
