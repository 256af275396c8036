"""The collective model against the one public per-size multi-node H100 log found: all-reduce
on 2 nodes of 8 H100 over InfiniBand (dstack's Nebius page, ``dstackai/dstack`` @ 511c318c8,
``mkdocs/docs/examples/clusters/nebius.md``; out-of-place times). Printed as markdown, with the
calibration as shipped (carried to H100 and 400 Gb/s NICs, docs/comm-model.md) and as measured
on A100 (``arch`` and ``nic_gbytes_per_s`` unstated: applied unchanged).

    python bench/comm_h100_check.py
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

#: bytes -> measured µs (out of place), from the page's table.
MEASURED = {
    1 << 20: 87.08,
    16 << 20: 210.33,
    128 << 20: 759.58,
    1 << 30: 4511.97,
    8 << 30: 34448.4,
}


def main() -> int:
    shipped = default_comm_model()
    assert isinstance(shipped, NcclModel)
    as_measured = NcclModel(dataclasses.replace(shipped.params, arch="", nic_gbytes_per_s=0.0))
    cluster = make_cluster("H100-SXM5-80GB", nodes=2)
    print(
        "| size (B) | measured (µs) | carried to H100 (µs) | error | A100 as fitted (µs) | error |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for nbytes, us in MEASURED.items():
        row = [f"{nbytes:,}", f"{us:.1f}"]
        for model in (shipped, as_measured):
            est = model.estimate(CollectiveKind.ALL_REDUCE, nbytes, range(16), cluster)
            t = est.time_ns / 1e3
            row += [f"{t:.1f} ({est.algorithm} {est.protocol})", f"{100 * (t / us - 1):+.1f}%"]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
