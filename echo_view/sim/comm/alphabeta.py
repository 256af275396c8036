"""Plain alpha-beta collective model, the baseline of Proteus' and FlexFlow's NCCL predictor:

    time = alpha + bus_factor * bytes / beta

with one latency ``alpha`` (another for groups spanning nodes), ``beta`` the delivered bandwidth
of the slowest tier the group crosses, and nccl-tests' bus factor (2(n-1)/n for all-reduce).
No algorithms, protocols or channels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from echo_view.errors import ConfigError, known_keys_hint
from echo_view.model import CollectiveKind
from echo_view.model.toml_file import dump_toml, significant
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.estimate import CollectiveEstimate, bus_factor
from echo_view.sim.comm.placement import place


@dataclass(frozen=True)
class AlphaBetaParams:
    """Constants of :class:`AlphaBetaModel` (µs and delivered / nominal bandwidth)."""

    alpha_us: float = 10.0
    net_alpha_us: float = 30.0
    nvlink_eff: float = 0.8
    pcie_eff: float = 0.75
    net_eff: float = 0.96
    hbm_eff: float = 1.0
    #: nccl-tests only (see :class:`~echo_view.sim.comm.params.CommParams`).
    launch_us: float = 0.0
    source: str = "alpha-beta defaults"

    def flat(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self) if f.name != "source"}

    def with_flat(self, values: Mapping[str, float], source: str | None = None) -> AlphaBetaParams:
        unknown = set(values) - set(self.flat())
        if unknown:
            raise KeyError(sorted(unknown)[0])
        changes: dict[str, Any] = {k: float(v) for k, v in values.items()}
        if source is not None:
            changes["source"] = source
        return replace(self, **changes)


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


_KEYS = ("alpha_us", "net_alpha_us", "nvlink_eff", "pcie_eff", "net_eff", "hbm_eff")


def alphabeta_to_toml(params: AlphaBetaParams, fit: Mapping[str, Any] | None = None) -> str:
    """TOML text of an alpha-beta model (read back by :func:`alphabeta_from_mapping`)."""
    doc: dict[str, Any] = {
        "model": {"kind": "alphabeta", "source": params.source},
        "alphabeta": {k: significant(getattr(params, k)) for k in _KEYS},
        "harness": {"launch_us": significant(params.launch_us)},
    }
    if fit:
        doc["fit"] = significant(dict(fit))
    return dump_toml(doc, "echo-view alpha-beta collective model; see docs/comm-model.md")


def alphabeta_from_mapping(data: Mapping[str, Any], path: str | None = None) -> AlphaBetaParams:
    """Validate a decoded ``kind = "alphabeta"`` TOML document."""
    allowed = {"model": None, "alphabeta": _KEYS, "harness": ("launch_us",), "fit": None}
    values: dict[str, Any] = {}
    for sec, table in data.items():
        if sec not in allowed:
            raise ConfigError(
                f"unknown table [{sec}]",
                path=path,
                hint=known_keys_hint(sec, allowed, "known tables"),
            )
        keys = allowed[sec]
        if keys is None:
            continue
        if not isinstance(table, Mapping):
            raise ConfigError(f"[{sec}] must be a table", path=path)
        for key, value in table.items():
            if key not in keys:
                raise ConfigError(
                    "unknown key",
                    path=path,
                    where=f"{sec}.{key}",
                    hint=known_keys_hint(key, keys),
                )
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(
                    f"expected a non-negative number, got {value!r}",
                    path=path,
                    where=f"{sec}.{key}",
                )
            values[key] = float(value)
    source = str(data.get("model", {}).get("source", "calibrated"))
    return AlphaBetaParams(**values, source=source)
