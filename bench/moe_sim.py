"""Time of ``echo-view simulate`` on a DeepSeek-V3-size MoE on 2,048 GPUs, against a dense model
of the same shape and layout in the same run (issue target: under 30 s).

    python bench/moe_sim.py [--repeat 5]

The MoE case is ``samples/configs/moe/deepseek-v3-2048xH800.toml`` (61 layers, hidden 7168,
256 routed experts + 1 shared, top-8, expert FFN 2048, 3 dense layers first, vocabulary
129,280, sequence 4,096; PP16, EP64, ZeRO-1 data parallelism on 2,048 H800, 120 micro-batches
per pipeline; the 1F1B schedule in place of DualPipe). The dense baseline is the same config
without the MoE keys and ``ep``: every layer a dense SwiGLU MLP of FFN 18,432, the same pipeline
and data parallelism. Both graphs are read from beside their config (the baseline's is traced
into a temporary directory first, not timed), so the time is composing and simulating the
step. Each run is its own process (import and start-up included), median of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from echo_view.model.moe_config import KEYS
from echo_view.model.toml_file import dump_toml, read_toml

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "samples" / "configs" / "moe" / "deepseek-v3-2048xH800.toml"
TARGET_S = 30.0


def _dense_baseline(directory: Path) -> Path:
    """The MoE config without its MoE keys and ``ep``, with its traced graph beside it."""
    data = read_toml(MOE)
    for key in KEYS:
        data["model"].pop(key, None)
    data["parallel"].pop("ep", None)
    path = directory / "dense-v3-shape-2048xH800.toml"
    path.write_text(dump_toml(data))
    graph = path.with_name(path.stem + ".graph.json.gz")
    cmd = [sys.executable, "-m", "echo_view", "trace", str(path), "-o", str(graph)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return path


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _one(config: Path) -> tuple[float, float, dict[str, object]]:
    t0, c0 = time.perf_counter(), _cpu_children()
    out = subprocess.run(
        [sys.executable, "-m", "echo_view", "simulate", str(config), "--json"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    report: dict[str, object] = json.loads(out.stdout)
    return time.perf_counter() - t0, _cpu_children() - c0, report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(MOE.name, MOE), ("dense baseline, same shape", _dense_baseline(Path(tmp)))]
        rows = []
        for label, config in cases:
            runs = [_one(config) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            report = runs[0][2]
            rows.append((label, wall, cpu, report))
    print(
        "| config | GPUs | simulated ranks | wall s (median) | CPU s (median) | predicted step s |"
    )
    print("|---|---|---|---|---|---|")
    for label, wall, cpu, rep in rows:
        print(
            f"| {label} | {rep['ranks_total']:,} | {rep['ranks_simulated']} | {wall:.2f} "
            f"| {cpu:.2f} | {rep['step_time_s']:.3f} |"
        )
    moe_wall, dense_wall = rows[0][1], rows[1][1]
    print(
        f"\nMoE / dense: wall time {moe_wall / dense_wall:.2f}x, "
        f"CPU time {rows[0][2] / rows[1][2]:.2f}x"
    )
    print(f"target: MoE under {TARGET_S:.0f} s: {'met' if moe_wall < TARGET_S else 'NOT met'}")
    return 0 if moe_wall < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
