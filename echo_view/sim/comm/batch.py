"""The NCCL-like model evaluated for many collectives at once (numpy), for calibration.

Calibration evaluates the model thousands of times on the same measurements with different
constants; everything that does not depend on the constants (placements, NCCL's candidates and
their channel counts) is laid out once as columns, one row per (measurement, candidate). The
equations are those of :func:`echo_view.sim.comm.nccl.time_choice_us`,
:func:`~echo_view.sim.comm.nccl.p2p_time_us`, :func:`~echo_view.sim.comm.alltoall.rank_time_us`
and the one-rank copy; a test checks that both
paths agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import p2p_channels, p2p_rounds
from echo_view.sim.comm.nccl import p2p_split
from echo_view.sim.comm.params import CommParams
from echo_view.sim.comm.placement import PROTOCOLS, Placement
from echo_view.sim.comm.tuner import NVLS, TREE, TunerChoice, choose, topology

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
RING_ROW, TREE_ROW, NVLS_ROW, P2P_ROW, LOCAL_ROW = range(5)


@dataclass(frozen=True)
class Batch:
    """Columns, one row per (measurement, candidate); ``point`` is the measurement index."""

    npoints: int
    point: I64
    row_kind: I64
    proto: I64
    channels: F64
    nbytes: F64
    n: F64
    nodes: F64
    ppn_max: F64
    ppn_min: F64
    nvlink_intra: npt.NDArray[np.bool_]
    depth: F64
    passes: F64
    factor: F64
    intra_bytes: F64
    inter_bytes: F64
    #: All-to-all: point-to-point channels (inf for send/recv) and kernel batches.
    p2p_channels: F64
    p2p_rounds: F64
    nvlink_bw: F64
    pcie_bw: F64
    nic_bw: F64
    net_latency_us: F64
    hbm_bw: F64
    #: Rows of NCCL's own pick (what ``selection = "nccl"`` runs).
    nccl_pick: npt.NDArray[np.bool_]


def build_batch(
    items: Sequence[tuple[CollectiveKind, int, Placement, Cluster, list[TunerChoice] | None]],
) -> Batch:
    """Lay out ``(kind, nbytes, placement, cluster, NCCL candidates or None)`` items."""
    cols: dict[str, list[Any]] = {name: [] for name in Batch.__dataclass_fields__}
    del cols["npoints"]
    for i, (kind, nbytes, pl, cluster, options) in enumerate(items):
        common = {
            "point": i,
            "nbytes": float(nbytes),
            "n": float(pl.nranks),
            "nodes": float(pl.nodes),
            "ppn_max": float(pl.ppn_max),
            "ppn_min": float(pl.ppn_min),
            "nvlink_intra": pl.intra == "nvlink",
            "depth": float(math.ceil(math.log2(pl.nodes))) if pl.nodes > 1 else 0.0,
            "nvlink_bw": cluster.nvlink_bw,
            "pcie_bw": cluster.pcie_bw,
            "nic_bw": cluster.nic_bytes_per_s_per_gpu,
            "net_latency_us": cluster.net_latency_s * 1e6,
            "hbm_bw": cluster.gpu.hbm_bytes_per_s,
        }
        rows: list[dict[str, Any]] = []
        if pl.nranks == 1:
            rows.append({"row_kind": LOCAL_ROW, "proto": 2, "channels": 0.0})
        elif options:
            pick = choose(options)
            passes = 2.0 if kind == CollectiveKind.ALL_REDUCE else 1.0
            rooted = kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
            factor = 1.0 if rooted else passes * (pl.nranks - 1) / pl.nranks
            for o in options:
                row_kind = {TREE: TREE_ROW, NVLS: NVLS_ROW}.get(o.algorithm, RING_ROW)
                rows.append(
                    {
                        "row_kind": row_kind,
                        "proto": PROTOCOLS.index(o.protocol),
                        "channels": o.share,
                        "passes": passes,
                        "factor": factor,
                        "nccl_pick": o is pick,
                    }
                )
        else:
            intra, inter, proto = p2p_split(kind, nbytes, pl)
            a2a = kind == CollectiveKind.ALL_TO_ALL
            rows.append(
                {"row_kind": P2P_ROW, "proto": proto, "channels": 1.0,
                 "intra_bytes": intra, "inter_bytes": inter,
                 "p2p_channels": float(p2p_channels(topology(pl, cluster))) if a2a else math.inf,
                 "p2p_rounds": float(p2p_rounds(pl.nranks)) if a2a else 1.0}
            )  # fmt: skip
        for row in rows:
            full = {
                "passes": 0.0,
                "factor": 0.0,
                "intra_bytes": 0.0,
                "inter_bytes": 0.0,
                "p2p_channels": math.inf,
                "p2p_rounds": 1.0,
                "nccl_pick": True,
                **common,
                **row,
            }
            for key, value in full.items():
                cols[key].append(value)
    ints = ("point", "row_kind", "proto")
    bools = ("nvlink_intra", "nccl_pick")
    arrays: dict[str, Any] = {}
    for key, values in cols.items():
        dtype = np.int64 if key in ints else (np.bool_ if key in bools else np.float64)
        arrays[key] = np.asarray(values, dtype=dtype)
    return Batch(npoints=len(items), **arrays)


def row_times_us(params: CommParams, b: Batch) -> F64:
    """Every row's time, µs."""
    p = b.proto
    base = np.asarray(params.base_us)[p]
    intra_hop = np.where(
        b.nvlink_intra, np.asarray(params.nvlink_hop_us)[p], np.asarray(params.pcie_hop_us)[p]
    )
    net_hop = (
        np.asarray(params.net_hop_us)[p]
        + b.net_latency_us
        + b.channels * np.asarray(params.proxy_us)[p]
    )
    intra_raw = np.where(
        b.nvlink_intra, b.nvlink_bw * params.nvlink_eff, b.pcie_bw * params.pcie_eff
    )
    intra_bw = np.where(b.ppn_max > 1, intra_raw / 1e9, np.inf)
    net_bw = np.where(b.nodes > 1, b.ppn_min * b.nic_bw * params.net_eff / 1e9, np.inf)
    eff = np.asarray(params.protocol_eff)[p]
    with np.errstate(divide="ignore", invalid="ignore"):
        bus = np.minimum(
            b.channels * np.asarray(params.channel_gbs)[p], eff * np.minimum(intra_bw, net_bw)
        )
        fixed = base + b.channels * params.channel_us
        tree = (
            fixed
            + params.tree_hop_factor * 2 * ((b.ppn_max - 1) * intra_hop + b.depth * net_hop)
            + 2 * b.nbytes / (bus * 1e3)
        )
        ring = (
            fixed
            + b.passes * ((b.n - b.nodes) * intra_hop + (b.nodes - 1) * net_hop)
            + b.nbytes * b.factor / (bus * 1e3)
        )
        nvls = params.nvls_us + b.nbytes / (b.nvlink_bw * params.nvls_eff) * 1e6
        cap = b.p2p_channels * np.asarray(params.channel_gbs)[p] * 1e9
        p2p_seconds = np.maximum.reduce(
            [
                b.intra_bytes / np.minimum(intra_raw * eff, cap),
                b.inter_bytes / np.minimum(b.nic_bw * params.net_eff * eff, cap),
                (b.intra_bytes + b.inter_bytes) / cap,
            ]
        )
        p2p_hop = np.where(
            b.inter_bytes > 0, np.asarray(params.net_hop_us)[p] + b.net_latency_us, intra_hop
        )
        p2p = base + b.p2p_rounds * p2p_hop + p2p_seconds * 1e6
        local = params.local_copy_us + 2 * b.nbytes / (b.hbm_bw * params.hbm_eff) * 1e6
    out = np.select(
        [b.row_kind == RING_ROW, b.row_kind == TREE_ROW, b.row_kind == NVLS_ROW,
         b.row_kind == P2P_ROW],
        [ring, tree, nvls, p2p],
        default=local,
    )  # fmt: skip
    return np.asarray(out, dtype=np.float64)


def predict_batch_us(params: CommParams, b: Batch) -> F64:
    """Each measurement's time under ``params.selection``, µs."""
    t = row_times_us(params, b)
    if params.selection == "nccl":
        t = np.where(b.nccl_pick, t, np.inf)
    out = np.full(b.npoints, np.inf)
    np.minimum.at(out, b.point, t)
    return out
