"""The collective model within one H100 NVSwitch node against public nccl-tests numbers.

Per size: the one public per-size single-node H100 table of ring all-gather and reduce-scatter
found, 4 x H100 80GB HBM3 (SXM5, NVSwitch) with NCCL 2.29.2, nccl-tests 2.18.3 driving the 4
GPUs from one thread (``nGpus 4``), out-of-place times (``waynehacking8/nccl-collectives-bench``
@ f9883f88, ``results/all_gather.txt`` and ``results/reduce_scatter.txt``). The model is
printed as shipped (the A100 calibration carried to Hopper, docs/comm-model.md) with the
nccl-tests harness floor (``nGpus x launch_us``) and without its per-channel fixed cost, to
show what that constant does on Hopper.

Large-message rates on 8 GPUs, as NCCL's maintainers and users state them (no per-size table
of 8 x H100 was found): ring bus bandwidth ~370 GB/s for non-all-reduce collectives
(NVIDIA/nccl-tests issue 212, 2024-05-06), 365-370 GB/s for ring all-reduce at 2-4 GB on 2 to
8 GPUs (NVIDIA/nccl issue 1455, 2024-09-19), NVLS all-reduce ~480 GB/s (issue 212; 476 GB/s
measured, NVIDIA/nccl-tests issue 290, 2025-03-03).

    python bench/comm_h100_node_check.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.comm.nccl import NcclModel

MIB = 1 << 20
#: bytes -> measured µs, out of place, 4 x H100 (see the module docstring).
ALL_GATHER = {
    1 * MIB: 22.47,
    4 * MIB: 38.79,
    16 * MIB: 67.42,
    32 * MIB: 109.73,
    64 * MIB: 194.96,
    128 * MIB: 350.27,
    256 * MIB: 658.98,
    512 * MIB: 1268.09,
    1024 * MIB: 2475.82,
    8192 * MIB: 18732.3,
}
REDUCE_SCATTER = {
    1 * MIB: 25.98,
    4 * MIB: 35.95,
    16 * MIB: 62.52,
    32 * MIB: 105.75,
    64 * MIB: 189.19,
    128 * MIB: 347.43,
    256 * MIB: 663.09,
    512 * MIB: 1271.80,
    1024 * MIB: 2439.07,
    8192 * MIB: 18389.0,
}
#: (collective, bytes, stated bus bandwidth GB/s, source) on 8 x H100.
STATED_8GPU = (
    (CollectiveKind.ALL_GATHER, 4096 * MIB, 370.0, "nccl-tests #212: ring busbw ~370"),
    (CollectiveKind.REDUCE_SCATTER, 4096 * MIB, 370.0, "nccl-tests #212: ring busbw ~370"),
    (CollectiveKind.ALL_REDUCE, 4096 * MIB, 480.0, "nccl-tests #212 / #290: NVLS ~480 / 476"),
)


def main() -> int:
    shipped = default_comm_model()
    assert isinstance(shipped, NcclModel)
    no_channel_cost = NcclModel(dataclasses.replace(shipped.params, channel_us=0.0))
    floor_us = 4 * shipped.params.launch_us  # nccl-tests: one thread launches 4 GPUs
    cluster = make_cluster("H100-SXM5-80GB", nodes=1)
    print("4 x H100 (one node), ring, out of place:\n")
    print(
        "| collective | size | measured (µs) | model (µs) | error | "
        "no per-channel cost (µs) | error |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, table in (
        (CollectiveKind.ALL_GATHER, ALL_GATHER),
        (CollectiveKind.REDUCE_SCATTER, REDUCE_SCATTER),
    ):
        for nbytes, us in table.items():
            row = [kind.label, f"{nbytes // MIB} MiB", f"{us:.1f}"]
            for model in (shipped, no_channel_cost):
                est = model.estimate(kind, nbytes, range(4), cluster)
                t = max(est.time_ns / 1e3, floor_us)
                row += [f"{t:.1f} ({est.protocol})", f"{100 * (t / us - 1):+.0f}%"]
            print("| " + " | ".join(row) + " |")
    print("\n8 x H100 (one node), large messages, bus bandwidth:\n")
    print("| collective | size | stated (GB/s) | model (GB/s) | model algorithm | source |")
    print("|---|---:|---:|---:|---|---|")
    for kind, nbytes, stated, source in STATED_8GPU:
        est = shipped.estimate(kind, nbytes, range(8), cluster)
        print(
            f"| {kind.label} | {nbytes // MIB} MiB | {stated:.0f} | "
            f"{est.busbw_bytes_per_s / 1e9:.0f} | {est.algorithm} {est.protocol} | {source} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
