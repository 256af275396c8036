"""How fast the host issues GPU work in real PyTorch traces, and what the host path makes of
the small Megatron-LM CI cases: the measurements behind ``host.kernel_us`` (docs/accuracy.md,
"How fast a host issues kernels, measured").

Per CPU thread with at least 50 kernel launches (``cudaLaunchKernel`` and its CUDA/HIP
variants):

- the interval between consecutive launch starts (median and 25th percentile), and the median
  over the launches the GPU waited for (the kernel started within 20 µs of its launch call's
  end, so the CPU, not the GPU, set the pace);
- **host time per kernel**: the mean interval between consecutive launches over the intervals
  in which the thread was issuing work, i.e. with no synchronising call (``cuda*Synchronize``,
  a blocking ``cudaMemcpy``) between them and shorter than 1 ms (longer ones are data loading,
  logging or waiting, not dispatch). It is the whole host time per launched kernel on that
  thread: the Python, dispatcher and launch call of every op, not just the launch call.

Then the CPU span of each ``Optimizer.step`` annotation with the launches inside it and the
parameter tensors it updated (FusedAdam bumps one step counter per tensor: its ``aten::add_``
calls). Last, per small CI config: the step predicted with and without the host path, the
kernels its slowest simulated rank issues per step, and the host time per kernel that would
explain the measured step if it were all dispatch.

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
from echo_view.model.kinds import LaneKind  # noqa: E402
from echo_view.sim.host import HostParams  # noqa: E402
from echo_view.sim.runs import simulate_workload  # noqa: E402

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel")
#: Calls that block the thread until the GPU has done something (``cudaMemcpyAsync`` to
#: pageable host memory blocks too).
SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")
#: A kernel that starts this soon after its launch returned found the GPU idle.
STARVED_NS = 20_000
#: A longer interval between two launches is not dispatch (data loading, logging, waiting).
DISPATCH_GAP_NS = 1_000_000
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
    SHARED / "tracelens" / "b200" / "eager_trace.json.gz",
    # Nsight Systems captures (samples/nsys, from GindaChen/nsys-ai): FastVideo training on two
    # H100 before and after an optimisation, and Wan-T2V inference on two H100.
    ROOT / "samples" / "nsys" / "mfu_2gpu_before.sqlite.gz",
    ROOT / "samples" / "nsys" / "mfu_2gpu_after.sqlite.gz",
    ROOT / "samples" / "nsys" / "h100_2gpu_1s.sqlite.gz",
]
#: The traces whose threads set ``host.kernel_us``: training steps (the simulator's workload)
#: on Hopper hosts. The H100 inference traces (tracelens Qwen, Wan-T2V) run no backward,
#: optimizer or gradient bookkeeping, which cost the training loop's host per kernel.
HOPPER_TRAINING = ("mfu_2gpu_before.sqlite.gz", "mfu_2gpu_after.sqlite.gz")
#: The traces of H100 hosts (their sources say so; Nsight exports name no GPU here), whose
#: ``aten::fill_`` ops set ``host.fill_us``: an ATen op's host time without Python does not
#: depend on what the step trains or infers.
HOPPER_HOSTS = (
    *HOPPER_TRAINING,
    "h100_2gpu_1s.sqlite.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
)
CI = ROOT / "samples" / "configs" / "megatron-ci-small"
#: The small MoE CI cases, after the dense ones in the last table.
CI_MOE = ROOT / "samples" / "configs" / "megatron-ci-small-moe"


def _names(trace: Trace) -> np.ndarray:
    names = trace.strings.strings
    return np.array([names[int(i)] for i in trace.events.name], dtype=object)


def thread_rows(
    trace: Trace, names: np.ndarray
) -> list[tuple[int, int, float, float, float, float]]:
    """``(lane, launches, median µs, p25 µs, median µs where the GPU waited, host µs per
    kernel)`` per thread (``names``: each event's, :func:`_names`)."""
    ev = trace.events
    runtime = ev.kind == int(EventKind.RUNTIME)
    launch = np.flatnonzero(runtime & np.array([n.startswith(LAUNCHES) for n in names]))
    sync = runtime & np.array([n.startswith(SYNCS) for n in names])
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
        t = ev.start_ns[rows]
        gaps_ns = np.diff(t)
        gaps = gaps_ns / 1e3
        end = t + ev.dur_ns[rows]
        k_start = np.array([start_of.get(int(c), -1) for c in ev.correlation[rows]])
        waited = (k_start >= 0) & (k_start - end < STARVED_NS)
        starved = gaps[waited[1:]]
        med_starved = float(np.median(starved)) if len(starved) else float("nan")
        # Intervals with a synchronising call of this thread inside are waits, not dispatch.
        sync_t = np.append(np.sort(ev.start_ns[sync & (ev.lane == lane)]), np.iinfo(np.int64).max)
        blocked = sync_t[np.searchsorted(sync_t, t[:-1], side="right")] < t[1:]
        dispatch = ~blocked & (gaps_ns < DISPATCH_GAP_NS)
        per_kernel = float(gaps[dispatch].mean()) if dispatch.any() else float("nan")
        out.append(
            (
                lane,
                len(rows),
                float(np.median(gaps)),
                float(np.percentile(gaps, 25)),
                med_starved,
                per_kernel,
            )
        )
    return out


def optimizer_rows(trace: Trace, names: np.ndarray) -> list[tuple[str, float, int, int]]:
    """``(name, CPU span µs, launches inside, aten::add_ inside)`` per ``Optimizer.step``."""
    ev = trace.events
    launch = (ev.kind == int(EventKind.RUNTIME)) & np.array([n.startswith(LAUNCHES) for n in names])
    adds = names == "aten::add_"
    out = []
    for i in np.flatnonzero(np.array([n.startswith("Optimizer.step") for n in names])).tolist():
        s, e = ev.start_ns[i], ev.start_ns[i] + ev.dur_ns[i]
        inside = (ev.lane == ev.lane[i]) & (ev.start_ns >= s) & (ev.start_ns <= e)
        out.append(
            (
                str(names[i]),
                ev.dur_ns[i] / 1e3,
                int((inside & launch).sum()),
                int((inside & adds).sum()),
            )
        )
    return out


def fill_us(trace: Trace, names: np.ndarray) -> np.ndarray:
    """The CPU durations (µs) of the ``aten::fill_`` ops of ``trace``: what a fill costs the
    host where ATen issues it without Python, as an allocation under deterministic algorithms
    does (``host.fill_us``)."""
    ev = trace.events
    rows = (ev.kind == int(EventKind.CPU_OP)) & (names == "aten::fill_")
    return np.asarray(ev.dur_ns[rows], dtype=np.float64) / 1e3


def _label(path: Path) -> str:
    if path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix()
    return "../" + path.relative_to(ROOT.parent).as_posix()


def main() -> int:
    print(
        "| trace | GPU | thread | launches | interval median (µs) | p25 (µs) | GPU waited (µs) "
        "| host per kernel (µs) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    optimizer: list[tuple[str, str, float, int, int]] = []
    training: list[float] = []
    fills: list[tuple[str, str, np.ndarray, bool]] = []
    for path in TRACES:
        if not path.exists():
            continue
        for trace in read_job([path]).traces:
            gpu = trace.devices[0].name if trace.devices else "?"
            names = _names(trace)
            label = f"{_label(path)} rank {trace.rank}"
            fills.append((label, gpu, fill_us(trace, names), path.name in HOPPER_HOSTS))
            for lane, n, med, p25, starved, per_kernel in thread_rows(trace, names):
                print(
                    f"| {_label(path)} rank {trace.rank} | {gpu} | {lane} | {n} | {med:.1f} "
                    f"| {p25:.1f} | {starved:.1f} | {per_kernel:.1f} |"
                )
                if path.name in HOPPER_TRAINING:
                    training.append(per_kernel)
            # One step of each optimizer (the first is often warm-up of a different shape).
            rows = optimizer_rows(trace, names)
            if rows:
                optimizer.append((_label(path), *rows[len(rows) // 2]))
    if training:
        print(
            f"\nHopper training threads ({len(training)}): host per kernel median "
            f"{np.median(training):.1f} µs (host.kernel_us default: {HostParams().kernel_us:g})"
        )
    print()
    print("| trace | GPU | aten::fill_ ops | median CPU time (µs) |")
    print("|---|---|---:|---:|")
    hopper: list[np.ndarray] = []
    for label, gpu, durs, h100_host in fills:
        if len(durs):
            print(f"| {label} | {gpu} | {len(durs)} | {np.median(durs):.1f} |")
            if h100_host:
                hopper.append(durs)
    if hopper:
        pooled = np.concatenate(hopper)
        print(
            f"\nH100 hosts: aten::fill_ median {np.median(pooled):.1f} µs over {len(pooled)} "
            f"ops (host.fill_us default: {HostParams().fill_us:g})"
        )
    print()
    print("| trace | optimizer step | CPU span (µs) | launches | parameter tensors (add_) |")
    print("|---|---|---:|---:|---:|")
    for label, name, span, launches, adds in optimizer:
        print(f"| {label} | {name} | {span:.0f} | {launches} | {adds} |")
    print()
    host_params = HostParams()
    print(
        "| CI config | measured (s) | GPU path (s) | with host path (s) | kernels issued "
        "| of them fills | host per other kernel to explain the measurement "
        f"(µs; model: {host_params.kernel_us:g}) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for cfg_path in [*sorted(CI.glob("*.toml")), *sorted(CI_MOE.glob("*.toml"))]:
        cfg, graph, _, _ = load_workload(cfg_path)
        gpu = simulate_workload(cfg, graph, {"host.kernel_us": "0"}).step_ns / 1e9
        sim = simulate_workload(cfg, graph)
        wl = sim.composed.workload
        ends = sim.rank_end_ns()
        slowest = max(ends, key=lambda r: ends[r])
        host = np.array([wl.lanes[int(x)].kind == LaneKind.CPU_THREAD for x in wl.ops.lane])
        busy = int(wl.ops.dur_ns[host & (wl.ops.rank == slowest)].sum())
        n_fills = sim.fills(slowest)
        others = round((busy - n_fills * host_params.fill_ns) / host_params.kernel_ns)
        ref = cfg.reference.step_time_s if cfg.reference else float("nan")
        left = ref - n_fills * host_params.fill_us / 1e6
        print(
            f"| {cfg_path.stem} | {ref:.3f} | {gpu:.3f} | {sim.step_ns / 1e9:.3f} "
            f"| {others + n_fills:,} | {n_fills:,} | {left / others * 1e6:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
