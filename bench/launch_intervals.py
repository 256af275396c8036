"""How fast the host issues GPU work in real PyTorch traces, and what that would cost the small
Megatron-LM CI cases: the measurement behind the host-dispatch analysis in docs/accuracy.md.

Per CPU thread with at least 50 kernel launches (``cudaLaunchKernel`` and its CUDA/HIP
variants): the interval between consecutive launch starts (median and 25th percentile), and the
same over the launches the GPU waited for (the kernel started within 20 µs of its launch call's
end, so the CPU, not the GPU, set the pace). Then, per small CI config, the ops of one
micro-batch in its traced graph.

    python bench/launch_intervals.py            # samples/ and ../shared traces when present
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import load_workload, read_job  # noqa: E402
from echo_view.model import EventKind, Trace  # noqa: E402

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel")
#: A kernel that starts this soon after its launch returned found the GPU idle.
STARVED_NS = 20_000
SHARED = ROOT.parent / "shared" / "data"
TRACES = [
    ROOT / "samples" / "hta_nccl" / "nccl_data.json.gz",
    ROOT / "samples" / "hta_sampled_128" / "sampled_rank-0.json.gz",
    ROOT / "samples" / "dlrm_kineto",
    SHARED / "hta-tests" / "negative_queue_length_values_check" / "rank0.json.gz",
    SHARED / "hta-tests" / "trace_diff" / "control" / "control.json.gz",
    SHARED / "hta-tests" / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    SHARED / "hta-tests" / "df_index_resolver" / "df_index_resolver.json.gz",
    SHARED / "kineto-tb-plugin-samples" / "resnet50_num_workers_0",
    SHARED / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]


def thread_rows(trace: Trace) -> list[tuple[int, int, float, float, float]]:
    """``(lane, launches, median µs, p25 µs, median µs where the GPU waited)`` per thread."""
    ev = trace.events
    names = trace.strings.strings
    runtime = np.flatnonzero(ev.kind == int(EventKind.RUNTIME))
    launch = np.array([r for r in runtime if names[int(ev.name[r])].startswith(LAUNCHES)], int)
    if not len(launch):
        return []
    kernels = np.flatnonzero(ev.kind == int(EventKind.KERNEL))
    start_of = dict(
        zip(ev.correlation[kernels].tolist(), ev.start_ns[kernels].tolist(), strict=False)
    )
    out = []
    for lane in np.unique(ev.lane[launch]).tolist():
        rows = launch[ev.lane[launch] == lane]
        rows = rows[np.argsort(ev.start_ns[rows], kind="stable")]
        if len(rows) < 50:
            continue
        gaps = np.diff(ev.start_ns[rows]) / 1e3
        end = ev.start_ns[rows] + ev.dur_ns[rows]
        k_start = np.array([start_of.get(int(c), -1) for c in ev.correlation[rows]])
        waited = (k_start >= 0) & (k_start - end < STARVED_NS)
        starved = gaps[waited[1:]]
        med_starved = float(np.median(starved)) if len(starved) else float("nan")
        out.append(
            (lane, len(rows), float(np.median(gaps)), float(np.percentile(gaps, 25)), med_starved)
        )
    return out


def main() -> int:
    print("| trace | GPU | thread | launches | interval median (µs) | p25 (µs) | GPU waited (µs) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for path in TRACES:
        if not path.exists():
            continue
        for trace in read_job([path]).traces[:1]:
            gpu = trace.devices[0].name if trace.devices else "?"
            for lane, n, med, p25, starved in thread_rows(trace):
                label = path.relative_to(ROOT.parent).as_posix().removeprefix("main/")
                print(f"| {label} | {gpu} | {lane} | {n} | {med:.1f} | {p25:.1f} | {starved:.1f} |")
    print()
    print("| CI config | forward ops | backward ops | optimizer ops | micro-batches per step |")
    print("|---|---:|---:|---:|---:|")
    for cfg_path in sorted((ROOT / "samples" / "configs" / "megatron-ci-small").glob("*.toml")):
        cfg, graph, _, _ = load_workload(cfg_path)
        role = graph.roles[0]
        fwd = sum(len(t) for t in role.forward)
        bwd = sum(len(t) for t in role.backward)
        micro = cfg.micro_batches
        print(f"| {cfg_path.stem} | {fwd} | {bwd} | {len(role.optimizer)} | {micro} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
