"""Plain alpha-beta collective model, the baseline of Proteus' and FlexFlow's NCCL predictor:

    time = alpha + bus_factor * bytes / beta

with one latency ``alpha`` (another for groups spanning nodes), ``beta`` the delivered bandwidth
of the slowest tier the group crosses, and nccl-tests' bus factor (2(n-1)/n for all-reduce).
No algorithms, protocols or channels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from echo_view.model import CollectiveKind
from echo_view.model.params import ParamSet, param
from echo_view.model.toml_file import dump_toml, significant
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.estimate import CollectiveEstimate, bus_factor
from echo_view.sim.comm.placement import place


def _alpha(default: float, help: str) -> Any:
    return param(default, help=help, unit="µs", lo=0.0, hi=1e9, section="alphabeta")


def _eff(default: float, help: str) -> Any:
    # Efficiencies divide: strictly positive.
    return param(default, help=help, unit="fraction", lo=1e-6, hi=1e9, section="alphabeta")


@dataclass(frozen=True)
class AlphaBetaParams(ParamSet):
    """Constants of :class:`AlphaBetaModel` (µs and delivered / nominal bandwidth)."""

    NOUN: ClassVar[str] = "alpha-beta parameter"

    alpha_us: float = _alpha(10.0, "fixed cost of a collective within a node")
    net_alpha_us: float = _alpha(30.0, "fixed cost of a collective across nodes")
    nvlink_eff: float = _eff(0.8, "delivered / nominal NVLink bandwidth")
    pcie_eff: float = _eff(0.75, "delivered / nominal PCIe bandwidth")
    net_eff: float = _eff(0.96, "delivered / nominal NIC bandwidth")
    hbm_eff: float = _eff(1.0, "delivered / nominal HBM bandwidth for local copies")
    #: nccl-tests only (see :class:`~echo_view.sim.comm.params.CommParams`).
    launch_us: float = param(
        0.0,
        help="nccl-tests only: host time to launch one GPU's kernel",
        unit="µs",
        lo=0.0,
        hi=1e9,
        section="harness",
    )
    source: str = "alpha-beta defaults"


class AlphaBetaModel:
    """``alpha + bus_factor * bytes / beta``."""

    name = "alphabeta"

    def __init__(self, params: AlphaBetaParams | None = None) -> None:
        self.params = params if params is not None else AlphaBetaParams()

    def estimate(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> CollectiveEstimate:
        if nbytes < 0:
            raise ValueError(f"negative payload {nbytes} for {kind.label}")
        placement = place(ranks, cluster)
        n = placement.nranks
        prm = self.params
        if nbytes == 0:
            return CollectiveEstimate(0, "none", "none", 0, 0.0, 0.0)
        if n == 1:
            beta = cluster.gpu.hbm_bytes_per_s * prm.hbm_eff / 2
            us = prm.alpha_us + nbytes / beta * 1e6
        else:
            beta = math.inf
            if placement.ppn_max > 1:
                intra = (
                    cluster.nvlink_bw * prm.nvlink_eff
                    if placement.intra == "nvlink"
                    else cluster.pcie_bw * prm.pcie_eff
                )
                beta = min(beta, intra)
            if placement.multi_node:
                beta = min(beta, placement.ppn_min * cluster.nic_bytes_per_s_per_gpu * prm.net_eff)
            alpha = prm.net_alpha_us if placement.multi_node else prm.alpha_us
            us = alpha + bus_factor(kind, n) * nbytes / beta * 1e6
        time_ns = max(1, round(us * 1e3))
        algbw = nbytes / (time_ns * 1e-9)
        return CollectiveEstimate(
            time_ns, "alpha_beta", "none", 0, algbw, algbw * bus_factor(kind, n)
        )

    def collective_time_ns(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> int:
        return self.estimate(kind, nbytes, ranks, cluster).time_ns


def alphabeta_to_toml(params: AlphaBetaParams, fit: Mapping[str, Any] | None = None) -> str:
    """TOML text of an alpha-beta model (read back by :func:`alphabeta_from_mapping`)."""
    doc: dict[str, Any] = {
        "model": {"kind": "alphabeta", "source": params.source},
        **significant(params.to_tables()),
    }
    if fit:
        doc["fit"] = significant(dict(fit))
    return dump_toml(doc, "echo-view alpha-beta collective model; see docs/comm-model.md")


def alphabeta_from_mapping(data: Mapping[str, Any], path: str | None = None) -> AlphaBetaParams:
    """Validate a decoded ``kind = "alphabeta"`` TOML document."""
    source = str(data.get("model", {}).get("source", "calibrated"))
    base = AlphaBetaParams(source=source)
    return AlphaBetaParams.from_tables(data, path=path, base=base, others=("model", "fit"))
