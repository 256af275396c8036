"""Synthetic overlapped-kernel samples made from the interference rate model with known
factors, shared by the interference tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from echo_view.model.kinds import CollectiveKind
from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim.interference.fit import solo_weight
from echo_view.sim.interference.measure import OverlapSamples

FACTORS = {"gemm": 1.3, "elementwise": 1.1, "reduction": 1.6, "copy": 1.05}


def synthetic(
    factors: dict[str, float],
    per_class: int = 40,
    seed: int = 1,
    excess: bool = False,
    scale_ns: float = 10_000,
) -> OverlapSamples:
    """Kernels generated from the rate model with a known slowdown per class (``excess``: the
    fitted model's form, ``1 - 1/s = g(solo) * (1 - 1/factor)`` with ``g``'s scale
    ``scale_ns``), two traces, two steps each, various overlap fractions (no noise)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[Any]] = {k: [] for k in (
        "trace", "rank", "device", "row", "step", "op_class", "start_ns", "dur_ns", "solo_ns",
        "solo_count", "overlap_ns", "grid_blocks", "block_threads", "sm_count", "comm_kind",
        "comm_protocol", "comm_channels", "generation", "blocks_per_sm", "occupancy",
        "solo_spread")}  # fmt: skip
    comm = {}
    t = 0
    for trace in (0, 1):
        starts, ends = [], []
        for cls_name, s in factors.items():
            for k in range(per_class):
                solo = int(rng.integers(5_000, 500_000))
                if excess:
                    g = float(solo_weight(solo, scale_ns))
                    s = 1.0 / (1.0 - g * (1.0 - 1.0 / factors[cls_name]))
                alone = int(solo * rng.uniform(0.0, 0.8))  # work done before the comm starts
                over = round((solo - alone) * s)  # the rest runs fully overlapped
                starts.append(t + alone)
                ends.append(t + alone + over + 1_000_000)
                vals = dict(
                    trace=trace, rank=trace, device=0, row=k, step=k % 2,
                    op_class=OP_CLASS_NAMES.index(cls_name), start_ns=t, dur_ns=alone + over,
                    solo_ns=solo, solo_count=5, overlap_ns=over, grid_blocks=-1,
                    block_threads=-1, sm_count=108, comm_kind=int(CollectiveKind.ALL_REDUCE),
                    comm_protocol=0, comm_channels=-1, generation=3, blocks_per_sm=np.nan,
                    occupancy=np.nan, solo_spread=0.0,
                )  # fmt: skip
                for key, v in vals.items():
                    rows[key].append(v)
                t += alone + over + 2_000_000
        comm[(trace, 0)] = (np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    cols = {
        k: np.array(v, dtype=np.float64 if k in ("blocks_per_sm", "occupancy", "solo_spread")
                    else np.int64)
        for k, v in rows.items()
    }  # fmt: skip
    return OverlapSamples(cols, ("a#rank0", "b#rank1"), comm)


FACTORS = {"gemm": 1.3, "elementwise": 1.1, "reduction": 1.6, "copy": 1.05}
