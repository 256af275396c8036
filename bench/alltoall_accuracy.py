"""All-to-all accuracy against public measurements: regenerates the tables of the "All-to-all
and DeepEP" subsection of docs/accuracy.md.

    python bench/alltoall_accuracy.py

Measurements (every public all-to-all number on H100 found with its size and GPU count; no
per-size nccl-tests table of 8 x H100 was found):

- NVIDIA/nccl issue 2169: ``alltoall_perf`` on 4 x "NVIDIA H100 80GB HBM3" of one node,
  524,288,000 B, out of place 1174.14 µs (busbw 334.90 GB/s), in place 1163.40 µs;
- NVIDIA/nccl-tests issue 212 (S. Jeaugey, NVIDIA): on 8 x H100 "NCCL can get an effective
  NVLink bandwidth of 370GB/s, which you can observe as BusBw when running non-allreduce
  operations" (large sizes, no table);
- NVIDIA/nccl-tests issue 267: 6 nodes x 8 H100, one 400 Gb/s CX7 NIC per GPU; S. Jeaugey:
  "Alltoall cannot aggregate the bandwidth of multiple NICs, so the performance you should see
  is the performance of a single NIC"; D. Addison (NVIDIA): "CX-7 NICs at NDR rate (400Gbps)
  should achieve up to 48-49GB/s per NIC" (large sizes, no table).

Then DeepEP's published normal-kernel bandwidths (deepseek-ai/DeepEP docs/legacy.md, H800) as
the DeepEP model gives them back on DeepEP's setting, bytes counted as DeepEP's tests count them
(its constants: a consistency check, not a validation), and the effect of routing imbalance
(max / mean tokens per expert) on an EP64 dispatch, simulated through the slowest rank's bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import NcclModel
from echo_view.sim.comm.alltoall import routed_matrix, token_fanout
from echo_view.sim.comm.deepep import DeepEPModel
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.comm.routing import routed_time_ns

A2A = CollectiveKind.ALL_TO_ALL
GB = 1e9
H100 = "H100-SXM5-80GB"
H800 = "H800-SXM5-80GB"


def pct(model: float, measured: float) -> str:
    return f"{100 * (model - measured) / measured:+.1f}%"


def nccl_rows(model: NcclModel) -> None:
    print("| source | GPUs | size (B) | measured | model | error |")
    print("|---|---|---:|---|---|---:|")
    est = model.estimate(A2A, 524_288_000, range(4), make_cluster(H100))
    for label, us in (("out of place", 1174.14), ("in place", 1163.40)):
        print(
            f"| nccl#2169 ({label}) | 4 x H100, 1 node | 524,288,000 | {us:.1f} µs | "
            f"{est.time_ns / 1e3:.1f} µs (busbw {est.busbw_bytes_per_s / GB:.1f} GB/s) | "
            f"{pct(est.time_ns / 1e3, us)} |"
        )
    for size in (1 << 20, 1 << 24, 1 << 30, 1 << 33):
        est = model.estimate(A2A, size, range(8), make_cluster(H100))
        busbw = est.busbw_bytes_per_s / GB
        print(
            f"| nccl-tests#212 (busbw ~370 GB/s, large sizes) | 8 x H100, 1 node | {size:,} | "
            f"~370 GB/s | {busbw:.1f} GB/s ({est.time_ns / 1e3:.1f} µs) | "
            f"{pct(busbw, 370) if size >= 1 << 30 else 'n/a'} |"
        )
    cluster = make_cluster(H100, nodes=6)
    for size in (1 << 30, 1 << 33):
        est = model.estimate(A2A, size, range(48), cluster)
        busbw = est.busbw_bytes_per_s / GB
        print(
            f"| nccl-tests#267 (one NIC, 48-49 GB/s) | 6 x 8 H100, 400 Gb/s per GPU | "
            f"{size:,} | 48-49 GB/s | {busbw:.1f} GB/s | {pct(busbw, 48.5)} |"
        )


#: DeepSeek-V3 pre-training, DeepEP's benchmark setting: tokens per rank, hidden (one FP8 byte
#: each), experts, top-k, node limit (top-4 groups).
TOKENS, HIDDEN, EXPERTS, TOPK, NODE_LIMIT = 4096, 7168, 256, 8, 4
COPIES = TOKENS * TOPK * HIDDEN  # routed copies per rank, bytes


def deepep_ns(nodes: int, phase: str, imbalance: float = 1.0) -> int:
    """DeepEP model's EP(8 x nodes) dispatch or combine on H800, as MoE layers are timed."""
    n = 8 * nodes
    cluster = make_cluster(H800, nodes=nodes)
    return routed_time_ns(
        DeepEPModel(),
        COPIES,
        range(n),
        cluster,
        EXPERTS,
        imbalance,
        phase,
        top_k=TOPK,
        node_limit=NODE_LIMIT,
    )


def deepep_rows() -> None:
    print(
        "\n| DeepEP path | EP | rows a token (distinct ranks or nodes) "
        "| published dispatch / combine | model dispatch / combine |"
    )
    print("|---|---:|---:|---|---|")
    for nodes, pub in ((1, (153, 158)), (2, (43, 43)), (4, (58, 57)), (8, (51, 50))):
        fan = token_fanout(EXPERTS, [8] * nodes, TOPK, NODE_LIMIT)
        rows = fan.ranks if nodes == 1 else fan.nodes  # DeepEP's count: NVLink rows or RDMA
        size = TOKENS * rows * HIDDEN
        got = [deepep_ns(nodes, phase) for phase in ("dispatch", "combine")]
        print(
            f"| {'intranode' if nodes == 1 else 'internode'} | {8 * nodes} | {rows:.3f} | "
            f"{pub[0]} / {pub[1]} GB/s | "
            + " / ".join(f"{size / (t * 1e-9) / GB:.1f}" for t in got)
            + " GB/s |"
        )


def imbalance_rows(nccl: NcclModel) -> None:
    cluster = make_cluster(H800, nodes=8)
    ranks = list(range(64))
    print(
        "\n| max/mean tokens per expert | hot rank's bytes / mean | hot node's bytes / mean "
        "| DeepEP dispatch | NCCL all-to-allv |"
    )
    print("|---:|---:|---:|---|---|")
    base: list[float] = []
    for ratio in (1.0, 1.25, 1.5, 2.0, 4.0):
        m = routed_matrix(COPIES, 64, EXPERTS, ratio)
        rank = m[0, 0] / COPIES * 64
        node = m[0, :8].sum() / COPIES * 8
        times = [
            deepep_ns(8, "dispatch", ratio) / 1e6,
            nccl.all_to_allv(m, ranks, cluster).time_ns / 1e6,
        ]
        if not base:
            base = times
        cells = [f"{t:.3f} ms (x{t / b:.3f})" for t, b in zip(times, base, strict=True)]
        print(f"| {ratio} | {rank:.3f} | {node:.3f} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str]) -> int:
    if argv:
        print("usage: python bench/alltoall_accuracy.py", file=sys.stderr)
        return 2
    model = default_comm_model()
    if not isinstance(model, NcclModel):
        print("the default collective model is not the NCCL-like one", file=sys.stderr)
        return 2
    nccl_rows(model)
    deepep_rows()
    imbalance_rows(model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
