"""The NCCL-like model's constants and their TOML form.

Every constant is a physical quantity: a kernel's fixed latency per protocol, the latency of one
hop over NVLink, PCIe or the network, the fraction of a link's bandwidth a protocol delivers,
one channel's throughput. Defaults are NCCL 2.22.3's own (``tuning.cc`` latencies, protocol wire
formats, NCCL's per-link bandwidths against the datasheets'); ``echo-view calibrate comm``
replaces them with values fitted to measurements. No per-size tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from echo_view.errors import ConfigError
from echo_view.model.params import ParamSet, param
from echo_view.model.toml_file import dump_toml, significant
from echo_view.sim.comm.placement import PROTOCOLS

#: How the model picks a collective's algorithm and protocol: the fastest by its own
#: (calibrated) times, or the one NCCL 2.22.3's tuner picks with its built-in constants.
SELECTIONS = ("fastest", "nccl")


def _lat(default: Any, key: str, help: str) -> Any:
    """A latency-like constant in the ``[latency_us]`` table (µs, or a hop factor)."""
    return param(default, help=help, unit="µs", lo=0.0, hi=1e9, section="latency_us", key=key)


def _bw(default: Any, key: str, help: str, unit: str = "fraction") -> Any:
    """A bandwidth constant in the ``[bandwidth]`` table (it divides: strictly positive)."""
    return param(default, help=help, unit=unit, lo=1e-6, hi=1e9, section="bandwidth", key=key)


def _eff(default: Any, key: str, help: str) -> Any:
    """A share of a nominal bandwidth in ``[bandwidth]``: above 1 it would deliver more than
    the hardware carries."""
    return param(default, help=help, unit="fraction", lo=1e-6, hi=1.0, section="bandwidth", key=key)


def _launch() -> Any:
    return param(
        0.0,
        help="nccl-tests only: host time to launch one GPU's kernel (not used when simulating)",
        unit="µs",
        lo=0.0,
        hi=1e9,
        section="harness",
        key="launch_us",
    )


@dataclass(frozen=True)
class CommParams(ParamSet):
    """Constants of :class:`~echo_view.sim.comm.nccl.NcclModel` (µs, fractions, GB/s); tuples
    hold one value per protocol (LL, LL128, Simple)."""

    NOUN: ClassVar[str] = "comm parameter"
    ELEMENTS: ClassVar[tuple[str, ...]] = PROTOCOLS
    ELEMENT_NOUN: ClassVar[str] = "protocol"
    RENAMED: ClassVar[Mapping[str, str]] = {"bandwidth.channel_gbs": "channel_gbytes_per_s"}

    base_us: tuple[float, float, float] = _lat(
        (6.6, 14.0, 8.4), "base", "fixed cost of one collective kernel"
    )
    nvlink_hop_us: tuple[float, float, float] = _lat(
        (0.6, 1.9, 3.4), "nvlink_hop", "one pipeline step over NVLink"
    )
    pcie_hop_us: tuple[float, float, float] = _lat(
        (1.0, 2.5, 5.7), "pcie_hop", "one pipeline step over PCIe"
    )
    net_hop_us: tuple[float, float, float] = _lat(
        (2.7, 4.0, 14.0), "net_hop", "one pipeline step over the network"
    )
    tree_hop_factor: float = _lat(
        2.0,
        "tree_hop_factor",
        "a tree step forwards whole chunks: its hops cost this many ring hops",
    )
    channel_us: float = _lat(
        0.0, "per_channel", "fixed cost per channel (one thread block; ~1.5 µs measured on A100)"
    )
    proxy_us: tuple[float, float, float] = _lat(
        (0.0, 0.0, 0.0), "proxy_per_channel", "per network step, the proxy's post per channel"
    )
    nvls_us: float = _lat(25.0, "nvls", "fixed cost of an NVLink SHARP all-reduce")
    local_copy_us: float = _lat(2.0, "local_copy", "one-rank collective: a device-to-device copy")
    nvlink_eff: float = _eff(0.8, "nvlink_eff", "delivered / nominal NVLink bandwidth")
    pcie_eff: float = _eff(0.75, "pcie_eff", "delivered / nominal PCIe bandwidth")
    net_eff: float = _eff(0.96, "net_eff", "delivered / nominal NIC bandwidth")
    #: NVLink SHARP all-reduce: algorithm bandwidth / per-GPU NVLink bandwidth (H100: ~275 of
    #: 450 GB/s measured, nccl-tests issue 212).
    nvls_eff: float = _eff(0.61, "nvls_eff", "NVLS algorithm bandwidth / per-GPU NVLink bandwidth")
    hbm_eff: float = _eff(1.0, "hbm_eff", "delivered / nominal HBM bandwidth for local copies")
    protocol_eff: tuple[float, float, float] = _eff(
        (0.5, 0.9375, 1.0), "protocol_eff", "payload fraction of each protocol's wire format"
    )
    channel_gbs: tuple[float, float, float] = _bw(
        (2.5, 10.0, 20.0), "channel_gbytes_per_s", "throughput of one channel", "GB/s"
    )
    launch_us: float = _launch()
    selection: str = "fastest"
    source: str = "defaults from NCCL 2.22.3 tuning.cc and the GPU datasheets"
    #: The hardware the constants were measured on (``[model] arch``, ``nic_gbytes_per_s``):
    #: a GPU architecture and a NIC line rate per GPU, GB/s. Empty / 0: not stated, and the
    #: constants apply to every cluster as they are (:mod:`echo_view.sim.comm.hardware`).
    arch: str = ""
    nic_gbytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ConfigError(
                f"unknown selection {self.selection!r}",
                where="model.selection",
                hint=f"one of: {', '.join(SELECTIONS)}",
            )


def comm_params_to_toml(params: CommParams, fit: Mapping[str, Any] | None = None) -> str:
    """The TOML text ``echo-view calibrate comm`` writes and ``--model`` reads. ``fit`` adds an
    informational ``[fit]`` table (ignored when loading)."""
    doc: dict[str, Any] = {
        "model": {
            "kind": "nccl",
            "selection": params.selection,
            "source": params.source,
            **({"arch": params.arch} if params.arch else {}),
            **({"nic_gbytes_per_s": params.nic_gbytes_per_s} if params.nic_gbytes_per_s else {}),
        },
        **significant(params.to_tables()),
    }
    if fit:
        doc["fit"] = significant(dict(fit))
    return dump_toml(doc, "echo-view collective model constants; see docs/comm-model.md")


def comm_params_from_mapping(data: Mapping[str, Any], path: str | None = None) -> CommParams:
    """Validate a decoded ``[model] kind = "nccl"`` TOML document into :class:`CommParams`.
    Missing keys keep their defaults; unknown tables and keys are errors."""
    model = data.get("model", {})
    source = str(model.get("source", f"calibrated ({path})" if path else "calibrated"))
    nic = model.get("nic_gbytes_per_s", 0.0)
    if isinstance(nic, bool) or not isinstance(nic, int | float) or not 0 <= nic < 1e6:
        raise ConfigError(
            f"nic_gbytes_per_s must be a number of GB/s >= 0, not {nic!r}",
            path=path,
            where="model.nic_gbytes_per_s",
            hint="the NIC line rate per GPU of the measured system, e.g. 25 for 200 Gb/s",
        )
    base = CommParams(
        selection=str(model.get("selection", "fastest")),
        source=source,
        arch=str(model.get("arch", "")),
        nic_gbytes_per_s=float(nic),
    )
    return CommParams.from_tables(data, path=path, base=base, others=("model", "fit"))
