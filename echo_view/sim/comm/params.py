"""The NCCL-like model's constants and their TOML form.

Every constant is a physical quantity: a kernel's fixed latency per protocol, the latency of one
hop over NVLink, PCIe or the network, the fraction of a link's bandwidth a protocol delivers,
one channel's throughput. Defaults are NCCL 2.22.3's own (``tuning.cc`` latencies, protocol wire
formats, NCCL's per-link bandwidths against the datasheets'); ``echo-view calibrate comm``
replaces them with values fitted to measurements. No per-size tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from echo_view.errors import ConfigError, known_keys_hint, warn_deprecated
from echo_view.model.toml_file import dump_toml, significant
from echo_view.sim.comm.placement import PROTOCOLS

Proto3 = tuple[float, float, float]
#: How the model picks a collective's algorithm and protocol: the fastest by its own
#: (calibrated) times, or the one NCCL 2.22.3's tuner picks with its built-in constants.
SELECTIONS = ("fastest", "nccl")


@dataclass(frozen=True)
class CommParams:
    """Constants of :class:`~echo_view.sim.comm.nccl.NcclModel` (µs, fractions, GB/s)."""

    #: Fixed cost of one collective kernel, per protocol (LL, LL128, Simple).
    base_us: Proto3 = (6.6, 14.0, 8.4)
    #: One pipeline step across NVLink / PCIe / the network, per protocol.
    nvlink_hop_us: Proto3 = (0.6, 1.9, 3.4)
    pcie_hop_us: Proto3 = (1.0, 2.5, 5.7)
    net_hop_us: Proto3 = (2.7, 4.0, 14.0)
    #: A tree step forwards whole chunks level by level: its hops cost this many ring hops.
    tree_hop_factor: float = 2.0
    #: Each channel is a thread block with its own connections: a fixed cost per channel
    #: (NCCL's tuner has none; measured ~1.5 µs on A100).
    channel_us: float = 0.0
    #: Per network step, the proxy thread posts one transfer per channel (NCCL's tuner has a
    #: per-step "net overhead" of 1-2 µs instead).
    proxy_us: Proto3 = (0.0, 0.0, 0.0)
    nvls_us: float = 25.0
    #: One-rank "collective": a device-to-device copy.
    local_copy_us: float = 2.0
    #: Delivered / nominal bandwidth of each tier.
    nvlink_eff: float = 0.8
    pcie_eff: float = 0.75
    net_eff: float = 0.96
    #: NVLink SHARP all-reduce: algorithm bandwidth / per-GPU NVLink bandwidth (H100: ~275 of
    #: 450 GB/s measured, nccl-tests issue 212).
    nvls_eff: float = 0.61
    hbm_eff: float = 1.0
    #: Payload fraction of each protocol's wire format (LL: 4 data bytes per 8; LL128: 120/128).
    protocol_eff: Proto3 = (0.5, 0.9375, 1.0)
    #: Throughput of one channel (one thread block), GB/s, per protocol.
    channel_gbs: Proto3 = (2.5, 10.0, 20.0)
    #: nccl-tests only: host time to launch one GPU's kernel; a thread driving G GPUs cannot
    #: issue iterations faster than G * launch_us. Not used when simulating.
    launch_us: float = 0.0
    selection: str = "fastest"
    source: str = "defaults from NCCL 2.22.3 tuning.cc and the GPU datasheets"

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ConfigError(
                f"unknown selection {self.selection!r}",
                where="model.selection",
                hint=f"one of: {', '.join(SELECTIONS)}",
            )

    def flat(self) -> dict[str, float]:
        """Every constant by a dotted name (``base_us.LL``, ``net_eff``)."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                for proto, v in zip(PROTOCOLS, value, strict=True):
                    out[f"{f.name}.{proto}"] = float(v)
            elif isinstance(value, float | int):
                out[f.name] = float(value)
        return out

    def with_flat(self, values: Mapping[str, float], source: str | None = None) -> CommParams:
        """A copy with the named constants replaced (names as :meth:`flat` gives them)."""
        changes: dict[str, Any] = {}
        tuples = {f.name: list(getattr(self, f.name)) for f in fields(self)
                  if isinstance(getattr(self, f.name), tuple)}  # fmt: skip
        for name, value in values.items():
            base, _, proto = name.partition(".")
            if proto:
                if base not in tuples or proto not in PROTOCOLS:
                    raise KeyError(name)
                tuples[base][PROTOCOLS.index(proto)] = float(value)
            elif name in self.flat():
                changes[name] = float(value)
            else:
                raise KeyError(name)
        for base, vals in tuples.items():
            changes[base] = (vals[0], vals[1], vals[2])
        if source is not None:
            changes["source"] = source
        return replace(self, **changes)


# TOML layout: (section, key, field, per-protocol?)
_LAYOUT: tuple[tuple[str, str, str, bool], ...] = (
    ("latency_us", "base", "base_us", True),
    ("latency_us", "nvlink_hop", "nvlink_hop_us", True),
    ("latency_us", "pcie_hop", "pcie_hop_us", True),
    ("latency_us", "net_hop", "net_hop_us", True),
    ("latency_us", "tree_hop_factor", "tree_hop_factor", False),
    ("latency_us", "per_channel", "channel_us", False),
    ("latency_us", "proxy_per_channel", "proxy_us", True),
    ("latency_us", "nvls", "nvls_us", False),
    ("latency_us", "local_copy", "local_copy_us", False),
    ("bandwidth", "nvlink_eff", "nvlink_eff", False),
    ("bandwidth", "pcie_eff", "pcie_eff", False),
    ("bandwidth", "net_eff", "net_eff", False),
    ("bandwidth", "nvls_eff", "nvls_eff", False),
    ("bandwidth", "hbm_eff", "hbm_eff", False),
    ("bandwidth", "protocol_eff", "protocol_eff", True),
    ("bandwidth", "channel_gbytes_per_s", "channel_gbs", True),
    ("harness", "launch_us", "launch_us", False),
)


def comm_params_to_toml(params: CommParams, fit: Mapping[str, Any] | None = None) -> str:
    """The TOML text ``echo-view calibrate comm`` writes and ``--model`` reads. ``fit`` adds an
    informational ``[fit]`` table (ignored when loading)."""
    doc: dict[str, Any] = {
        "model": {"kind": "nccl", "selection": params.selection, "source": params.source}
    }
    for sec, key, name, per_proto in _LAYOUT:
        value = getattr(params, name)
        doc.setdefault(sec, {})[key] = (
            {p: significant(v) for p, v in zip(PROTOCOLS, value, strict=True)}
            if per_proto
            else significant(value)
        )
    if fit:
        doc["fit"] = significant(dict(fit))
    return dump_toml(doc, "echo-view collective model constants; see docs/comm-model.md")


def _positive(value: Any, where: str, path: str | None) -> float:
    """A finite number within bounds: 1e-6..1e9 for bandwidths and efficiencies, else
    0..1e9 (µs for latencies)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"expected a number, got {value!r}", path=path, where=where)
    v = float(value)
    # Bounds keep every estimate a finite int64 of ns: bandwidths and efficiencies divide.
    lo, hi = (1e-6, 1e9) if where.startswith("bandwidth.") else (0.0, 1e9)
    if not lo <= v <= hi:
        raise ConfigError(
            f"must be a number from {lo:g} to {hi:g}, got {value!r}", path=path, where=where
        )
    return v


def comm_params_from_mapping(data: Mapping[str, Any], path: str | None = None) -> CommParams:
    """Validate a decoded ``[model] kind = "nccl"`` TOML document into :class:`CommParams`.
    Missing keys keep their defaults; unknown keys are errors."""
    known_sections = {sec for sec, *_ in _LAYOUT} | {"model", "fit"}
    for sec in data:
        if sec not in known_sections:
            raise ConfigError(
                f"unknown table [{sec}]",
                path=path,
                hint=known_keys_hint(sec, sorted(known_sections), "known tables"),
            )
    model = data.get("model", {})
    source = str(model.get("source", f"calibrated ({path})" if path else "calibrated"))
    values: dict[str, Any] = {"source": source}
    if "selection" in model:
        values["selection"] = str(model["selection"])
    for sec in {s for s, *_ in _LAYOUT}:
        table = data.get(sec, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"[{sec}] must be a table", path=path)
        keys = {key: (name, per) for s, key, name, per in _LAYOUT if s == sec}
        for key, value in table.items():
            if sec == "bandwidth" and key == "channel_gbs":  # the same GB/s, renamed
                warn_deprecated(f"{sec}.{key}", f"{sec}.channel_gbytes_per_s")
                key = "channel_gbytes_per_s"
            where = f"{sec}.{key}"
            if key not in keys:
                raise ConfigError(
                    "unknown key", path=path, where=where, hint=known_keys_hint(key, keys)
                )
            name, per_proto = keys[key]
            if per_proto:
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        "expected an inline table { LL = ..., LL128 = ..., SIMPLE = ... }",
                        path=path,
                        where=where,
                    )
                current = list(getattr(CommParams(), name))
                for proto, v in value.items():
                    if proto not in PROTOCOLS:
                        raise ConfigError(
                            f"unknown protocol {proto!r}",
                            path=path,
                            where=where,
                            hint="protocols: LL, LL128, SIMPLE",
                        )
                    current[PROTOCOLS.index(proto)] = _positive(v, f"{where}.{proto}", path)
                values[name] = (current[0], current[1], current[2])
            else:
                values[name] = _positive(value, where, path)
    return CommParams(**values)
