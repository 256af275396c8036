"""Which rank each event of an Nsight Systems capture belongs to.

One capture may hold several processes and GPUs. ``rank_by="process"`` makes one rank per
process that ran GPU work; ``"device"`` one rank per GPU; ``"auto"`` (the default) picks
``process`` when every such process used exactly one GPU and every GPU served one process (the
``torchrun`` layout), else ``device``. Ranks are numbered by GPU index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from echo_view.errors import UsageError
from importers.nsys.tables import I64, factorize

RANK_BY = ("auto", "process", "device")


@dataclass(frozen=True)
class RankPlan:
    """``rank_of[i]`` is the rank (0-based within the capture) of event ``i``, -1 if dropped."""

    mode: str
    rank_of: I64
    count: int
    dropped_cpu_events: int


def _device_key(process: I64, device: I64) -> I64:
    # The device index is per machine: keep the machine (vmId, bits 48+) in the key.
    return ((process >> 48) << 32) | (device & 0xFFFFFFFF)


def _lookup(values: I64, units: I64) -> I64:
    """Position of each value in ``units`` (any order), -1 when absent."""
    if not len(units):
        return np.full(len(values), -1, dtype=np.int64)
    order = np.argsort(units, kind="stable")
    pos = np.minimum(np.searchsorted(units, values, sorter=order), len(units) - 1)
    hit = units[order[pos]] == values
    return np.where(hit, order[pos], -1).astype(np.int64)


def plan_ranks(
    rank_by: str,
    process: I64,
    device: I64,
    is_work: np.ndarray,
    launch_src: I64,
    launch_dst: I64,
) -> RankPlan:
    """Assign ranks.

    ``process``/``device`` are per-event columns (device -1 on CPU rows); ``is_work`` marks GPU
    work (kernels, copies, sets) that defines which processes and GPUs take part;
    ``launch_src[k] -> launch_dst[k]`` are launch links (CPU row -> GPU row).
    """
    if rank_by not in RANK_BY:
        raise UsageError(f"rank_by must be one of {', '.join(RANK_BY)}, not {rank_by!r}")
    n = len(process)
    on_gpu = device >= 0
    procs_w, p = factorize(process[is_work])
    devs_w, d = factorize(_device_key(process[is_work], device[is_work]))
    combos = factorize(p * max(len(devs_w), 1) + d)[0]
    # Distinct (process, device) pairs, sorted, as two rows.
    pairs = (
        np.stack([procs_w[combos // max(len(devs_w), 1)], devs_w[combos % max(len(devs_w), 1)]])
        if len(combos)
        else None
    )

    mode = rank_by
    if mode == "auto":
        mode = "process"
        if pairs is not None:
            one_dev = len(np.unique(pairs[0])) == pairs.shape[1]
            one_proc = len(np.unique(pairs[1])) == pairs.shape[1]
            mode = "process" if one_dev and one_proc else "device"

    rank_of = np.full(n, -1, dtype=np.int64)
    if pairs is None:
        # No GPU work at all: one rank per process that recorded anything.
        procs, rank_of = factorize(process)
        return RankPlan(mode, rank_of, len(procs), 0)

    if mode == "process":
        procs = np.unique(pairs[0])
        first_dev = np.array([pairs[1][pairs[0] == p].min() for p in procs], dtype=np.int64)
        units = procs[np.lexsort((procs, first_dev))]  # ranks follow the GPU index
        rank_of = _lookup(process, units)
        dropped = int(((rank_of < 0) & ~on_gpu).sum())
        return RankPlan(mode, rank_of, len(units), dropped)

    devices = np.unique(pairs[1])
    gpu_rows = np.flatnonzero(on_gpu)
    rank_of[gpu_rows] = _lookup(_device_key(process[gpu_rows], device[gpu_rows]), devices)
    # CPU rows: a launch goes with the GPU work it launched; the rest go to the rank of the
    # process's first GPU.
    procs = np.unique(pairs[0])
    home = np.array(
        [np.searchsorted(devices, pairs[1][pairs[0] == p].min()) for p in procs], dtype=np.int64
    )
    cpu_rows = np.flatnonzero(~on_gpu)
    at = _lookup(process[cpu_rows], procs)
    rank_of[cpu_rows] = np.where(at >= 0, home[np.maximum(at, 0)], -1)
    if len(launch_src):
        rank_of[launch_src] = rank_of[launch_dst]
    dropped = int(((rank_of < 0) & ~on_gpu).sum())
    return RankPlan(mode, rank_of, len(devices), dropped)
