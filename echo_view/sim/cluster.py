"""The cluster the simulator runs on, and the GPU presets (:mod:`echo_view.model.gpus`).

A :class:`Cluster` is a GPU, a node size, a node count, the NIC bandwidth per GPU and the
intra-node fabric; every value, the GPU's included, can be overridden by name
(:meth:`Cluster.with_overrides`), which is how ``--set cluster.KEY=VALUE`` and the workload
config's ``[cluster]`` table reach it. Bandwidths are bytes per second, per direction; the
keys give them in GB/s (10^9 bytes per second) and end in ``_gbytes_per_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from echo_view.errors import ConfigError, in_file, known_keys_hint, warn_deprecated
from echo_view.model.config import LIMITS
from echo_view.model.gpus import (
    GB,
    PRESETS,
    TFLOPS,
    GpuSpec,
    gpu_preset,
    known_presets,
    match_gpu,
)
from echo_view.model.job import MAX_RANKS
from echo_view.model.params import ParamSet, param

if TYPE_CHECKING:
    from echo_view.model.config import ClusterConfig

#: Intra-node fabrics: a switch (every GPU reaches every other at its full NVLink rate), a
#: direct NVLink mesh (DGX-1 hybrid cube mesh), or PCIe only.
FABRICS = ("nvswitch", "nvlink", "pcie")
#: Host CPU vendors; NCCL's tuner caps LL bandwidth across nodes differently for each.
CPU_VENDORS = ("intel", "amd", "arm")
#: The NCCL algorithms the collective model knows, as ``NCCL_ALGO`` names them (lower case).
NCCL_ALGORITHMS = ("ring", "tree", "nvls")


def nccl_algorithms(spec: str) -> frozenset[str] | None:
    """The algorithms an ``NCCL_ALGO`` value lets NCCL choose from, upper case as the tuner
    names them; None for the empty value (NCCL's own choice among all of them).

    The syntax is NCCL's (``src/graph/tuning.cc``, ``parseList``): a comma-separated list of
    names, case-insensitive, or with a leading ``^`` the names to exclude."""
    text = spec.strip().lower()
    if not text:
        return None
    exclude = text.startswith("^")
    names = [n.strip() for n in text.removeprefix("^").split(",")]
    for name in names:
        if name not in NCCL_ALGORITHMS:
            raise ConfigError(
                f"unknown or unmodelled NCCL algorithm {name!r} in {spec!r}",
                where="cluster.nccl_algo",
                hint=f"a comma-separated list of {', '.join(NCCL_ALGORITHMS)}, "
                "or ^ and the ones to exclude",
            )
    chosen = set(NCCL_ALGORITHMS) - set(names) if exclude else set(names)
    if not chosen:
        raise ConfigError(
            f"{spec!r} leaves NCCL no algorithm",
            where="cluster.nccl_algo",
            hint=f"allow at least one of: {', '.join(NCCL_ALGORITHMS)}",
        )
    return frozenset(n.upper() for n in chosen)


@dataclass(frozen=True)
class Cluster:
    """The machines a job runs on: ``nodes`` nodes of ``gpus_per_node`` GPUs each.

    Rank ``r`` lives on node ``r // gpus_per_node`` (the usual launcher layout).
    ``nvlink_bytes_per_s`` None means the GPU preset's value.
    """

    gpu: GpuSpec
    gpus_per_node: int = 8
    nodes: int = 1
    #: NIC bandwidth available to each GPU, per direction.
    nic_bytes_per_s_per_gpu: float = 25 * GB
    fabric: str = "nvswitch"
    nvlink_bytes_per_s: float | None = None
    pcie_bytes_per_s: float | None = None
    cpu: str = "intel"
    #: Extra one-way network latency beyond NCCL's defaults (long cables, extra switch tiers).
    net_latency_s: float = 0.0
    #: The job's ``NCCL_ALGO`` ("" : unset, NCCL chooses among all algorithms), normalised.
    nccl_algo: str = ""

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise ConfigError(
                f"a cluster needs at least one node of one GPU, got {self.nodes} x "
                f"{self.gpus_per_node}",
                where="cluster",
            )
        for key, value in (
            ("nic_gbytes_per_s", self.nic_bytes_per_s_per_gpu),
            ("nvlink_gbytes_per_s", self.nvlink_bytes_per_s),
            ("pcie_gbytes_per_s", self.pcie_bytes_per_s),
        ):
            if value is not None and not value > 0:
                raise ConfigError(f"must be positive, got {value}", where=f"cluster.{key}")
        if self.fabric not in FABRICS:
            raise ConfigError(
                f"unknown fabric {self.fabric!r}",
                where="cluster.fabric",
                hint=f"one of: {', '.join(FABRICS)}",
            )
        if self.cpu not in CPU_VENDORS:
            raise ConfigError(
                f"unknown CPU vendor {self.cpu!r}",
                where="cluster.cpu",
                hint=f"one of: {', '.join(CPU_VENDORS)}",
            )
        nccl_algorithms(self.nccl_algo)

    @property
    def allowed_algorithms(self) -> frozenset[str] | None:
        """What ``nccl_algo`` lets NCCL's tuner choose from (None: everything)."""
        return nccl_algorithms(self.nccl_algo)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def nvlink_bw(self) -> float:
        """NVLink bandwidth per GPU per direction in use (override or preset)."""
        if self.nvlink_bytes_per_s is not None:
            return self.nvlink_bytes_per_s
        return self.gpu.nvlink_bytes_per_s

    @property
    def pcie_bw(self) -> float:
        """PCIe bandwidth per GPU per direction in use (override or preset)."""
        if self.pcie_bytes_per_s is not None:
            return self.pcie_bytes_per_s
        return self.gpu.pcie_bytes_per_s

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` runs on."""
        return rank // self.gpus_per_node

    def with_overrides(self, overrides: Mapping[str, Any]) -> Cluster:
        """A copy with the named values replaced (strings are parsed). Keys: see
        :data:`OVERRIDE_KEYS` (and, with a :class:`~echo_view.errors.Deprecated` warning,
        :data:`DEPRECATED_KEYS`); an unknown key is a :class:`ConfigError` listing them."""
        cluster = self
        # The GPU first, so that its per-GPU values can be overridden in the same mapping.
        items = sorted(overrides.items(), key=lambda kv: kv[0] != "gpu")
        for key, raw in items:
            if key in DEPRECATED_KEYS:
                if DEPRECATED_KEYS[key] in overrides:  # (the new spelling silently won)
                    raise ConfigError(
                        f"given both as {key} and as {DEPRECATED_KEYS[key]}",
                        where=f"cluster.{key}",
                        hint=f"keep cluster.{DEPRECATED_KEYS[key]} (GB/s) only",
                    )
                key, raw = _from_gigabits(key, raw)
            if key not in OVERRIDE_KEYS:
                raise ConfigError(
                    f"unknown cluster key {key!r}",
                    where=f"cluster.{key}",
                    hint=known_keys_hint(key, OVERRIDE_KEYS),
                )
            cluster = _apply(cluster, key, raw)
        return cluster

    def describe(self) -> dict[str, Any]:
        """The resolved values, in the units the override keys use."""
        return {
            "gpu": self.gpu.name,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "nic_gbytes_per_s": self.nic_bytes_per_s_per_gpu / GB,
            "nvlink_gbytes_per_s": self.nvlink_bw / GB,
            "pcie_gbytes_per_s": self.pcie_bw / GB,
            "fabric": self.fabric,
            "cpu": self.cpu,
            "net_latency_us": self.net_latency_s * 1e6,
            "nccl_algo": self.nccl_algo,
        }


def _key(
    default: float,
    help: str,
    unit: str,
    lo: float = 1e-3,
    *,
    hi: float = 1e9,
    integer: bool = False,
) -> Any:
    # Every value is bounded (in the key's own unit) so that derived times stay finite int64 ns.
    return param(default, help=help, unit=unit, lo=lo, hi=hi, integer=integer)


_A100 = PRESETS["A100-SXM4-80GB"]


def _peak(dtype: str) -> Any:
    return _key(_A100.peak_flops.get(dtype, 0.0) / TFLOPS, f"the GPU's dense {dtype} peak",
                "TFLOP/s")  # fmt: skip


@dataclass(frozen=True)
class ClusterKeys(ParamSet):
    """The numeric ``cluster.KEY`` values, in the units the keys give them, with their bounds
    and help (the parameter-set pattern, :mod:`echo_view.model.params`); the defaults are a DGX
    A100's (its preset; 0: no fp8). :meth:`Cluster.with_overrides` checks a value here and
    stores it in the cluster or its GPU, converted (:data:`_STORED`). Every bandwidth is GB/s
    (10^9 bytes per second) per GPU and per direction, the unit NVIDIA quotes NVLink and HBM in
    and nccl-tests reports; a 400 Gb/s NIC per GPU is ``nic_gbytes_per_s = 50``."""

    NOUN: ClassVar[str] = "cluster key"

    # The same bounds as a workload config's [cluster] (echo_view.model.config.LIMITS).
    gpus_per_node: int = _key(8, "GPUs per node; rank r runs on node r // gpus_per_node", "GPUs",
                              1, hi=LIMITS["gpus_per_node"], integer=True)  # fmt: skip
    nodes: int = _key(1, "nodes", "nodes", 1, hi=MAX_RANKS, integer=True)
    nic_gbytes_per_s: float = _key(_A100.default_nic_bits_per_s / 8 / GB, "NIC bandwidth per GPU",
                                   "GB/s")  # fmt: skip
    nvlink_gbytes_per_s: float = _key(_A100.nvlink_bytes_per_s / GB, "NVLink bandwidth per GPU",
                                      "GB/s")  # fmt: skip
    pcie_gbytes_per_s: float = _key(_A100.pcie_bytes_per_s / GB, "PCIe bandwidth per GPU", "GB/s")
    hbm_gbytes_per_s: float = _key(_A100.hbm_bytes_per_s / GB, "the GPU's memory bandwidth",
                                   "GB/s")  # fmt: skip
    net_latency_us: float = _key(0.0, "one-way network latency beyond NCCL's defaults", "µs", 0)
    memory_gb: float = _key(_A100.memory_bytes / GB, "the GPU's memory", "GB")
    sm_count: int = _key(_A100.sm_count, "the GPU's streaming multiprocessors", "SMs", 1,
                         integer=True)  # fmt: skip
    peak_tflops_fp32: float = _peak("fp32")
    peak_tflops_tf32: float = _peak("tf32")
    peak_tflops_fp16: float = _peak("fp16")
    peak_tflops_bf16: float = _peak("bf16")
    peak_tflops_fp8: float = _peak("fp8")


#: Where a checked :class:`ClusterKeys` value goes: (``Cluster`` field, factor); the GPU's keys
#: go to its :class:`GpuSpec` (:func:`_apply`).
_STORED: dict[str, tuple[str, float]] = {
    "gpus_per_node": ("gpus_per_node", 1),
    "nodes": ("nodes", 1),
    "nic_gbytes_per_s": ("nic_bytes_per_s_per_gpu", GB),
    "nvlink_gbytes_per_s": ("nvlink_bytes_per_s", GB),
    "pcie_gbytes_per_s": ("pcie_bytes_per_s", GB),
    "net_latency_us": ("net_latency_s", 1e-6),
}

#: Keys :meth:`Cluster.with_overrides` accepts: the GPU preset, the fabric, the CPU vendor,
#: ``NCCL_ALGO`` and the :class:`ClusterKeys`.
OVERRIDE_KEYS: tuple[str, ...] = ("gpu", "fabric", "cpu", "nccl_algo", *ClusterKeys.specs())

#: Old keys in gigabits per second, read for one more release with a warning naming the key
#: that replaces them (a gigabit key beside gigabyte keys halved NVLink by a factor of 8).
DEPRECATED_KEYS: dict[str, str] = {
    "nic_gbps_per_gpu": "nic_gbytes_per_s",
    "nvlink_gbps": "nvlink_gbytes_per_s",
    "pcie_gbps": "pcie_gbytes_per_s",
}


def _from_gigabits(key: str, raw: Any) -> tuple[str, float]:
    """A deprecated gigabit key's replacement key and value (GB/s), with its warning."""
    new = DEPRECATED_KEYS[key]
    gbytes = ClusterKeys.check(new, raw, where=f"cluster.{key}") / 8
    warn_deprecated(
        f"cluster.{key}", f"cluster.{new} in GB/s", f" ({raw} Gb/s was read as {gbytes:g} GB/s)"
    )
    return new, gbytes


def _unquoted(raw: Any) -> Any:
    """``raw``, or the string a TOML string literal in it spells (``--set cluster.gpu="A100"``:
    ``--set`` values are read as TOML, docs/workloads.md)."""
    if isinstance(raw, str) and len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        inner = raw[1:-1]
        # (no escapes in a GPU, fabric, CPU or algorithm name: a literal without them only)
        if raw[0] not in inner and "\\" not in inner:
            return inner
    return raw


def _apply(cluster: Cluster, key: str, raw: Any) -> Cluster:
    if key in ("gpu", "fabric", "cpu", "nccl_algo"):
        raw = _unquoted(raw)
    if key == "gpu":
        if isinstance(raw, GpuSpec):
            return replace(cluster, gpu=raw)
        return replace(cluster, gpu=gpu_preset(str(raw)))
    changes: dict[str, Any] = {}
    if key in ("fabric", "cpu"):
        changes[key] = str(raw).strip().lower()
        return replace(cluster, **changes)
    if key == "nccl_algo":
        if not isinstance(raw, str):
            raise ConfigError(
                f'expected a string like "ring" or "^nvls", got {raw!r}',
                where="cluster.nccl_algo",
            )
        return replace(cluster, nccl_algo=raw.replace(" ", "").lower())
    value = ClusterKeys.check(key, raw, where=f"cluster.{key}")
    if key in _STORED:
        name, factor = _STORED[key]
        changes[name] = int(value) if factor == 1 else value * factor
        return replace(cluster, **changes)
    gpu = cluster.gpu
    if key == "hbm_gbytes_per_s":
        gpu = replace(gpu, hbm_bytes_per_s=value * GB)
    elif key == "memory_gb":
        gpu = replace(gpu, memory_bytes=int(value * GB))
    elif key == "sm_count":
        gpu = replace(gpu, sm_count=int(value))
    else:  # peak_tflops_<dtype>
        dtype = key.removeprefix("peak_tflops_")
        gpu = replace(gpu, peak_flops={**gpu.peak_flops, dtype: value * TFLOPS})
    if not gpu.name.endswith(" (modified)"):
        gpu = replace(gpu, name=f"{gpu.name} (modified)")
    return replace(cluster, gpu=gpu)


__all__ = [
    "CPU_VENDORS",
    "DEPRECATED_KEYS",
    "FABRICS",
    "NCCL_ALGORITHMS",
    "OVERRIDE_KEYS",
    "PRESETS",
    "Cluster",
    "ClusterKeys",
    "GpuSpec",
    "cluster_from_config",
    "gpu_preset",
    "known_presets",
    "make_cluster",
    "match_gpu",
    "nccl_algorithms",
]


def make_cluster(
    gpu: str | GpuSpec = "A100-SXM4-80GB",
    *,
    gpus_per_node: int = 8,
    nodes: int = 1,
    nic_gbytes_per_s: float | None = None,
    **overrides: Any,
) -> Cluster:
    """A cluster of ``gpu`` with that GPU's reference fabric and NIC unless given;
    ``overrides`` are :meth:`Cluster.with_overrides` keys."""
    spec = gpu if isinstance(gpu, GpuSpec) else gpu_preset(gpu)
    cluster = Cluster(
        gpu=spec,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        nic_bytes_per_s_per_gpu=spec.default_nic_bits_per_s / 8,
        fabric=spec.default_fabric,
    )
    if nic_gbytes_per_s is not None:
        overrides = {"nic_gbytes_per_s": nic_gbytes_per_s, **overrides}
    return cluster.with_overrides(overrides) if overrides else cluster


def cluster_from_config(config: ClusterConfig, source: str = "") -> Cluster:
    """The cluster a workload config's ``[cluster]`` table describes; errors name ``source``
    (the config file) when given."""
    with in_file(source):
        numbers = set(ClusterKeys.specs()) | set(DEPRECATED_KEYS)
        for key, value in config.overrides.items():
            # A TOML number given as a string ("5") was read as the number; --set values are
            # text, the config's are typed.
            if key in numbers and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ConfigError(
                    f"expected a number, got {type(value).__name__} {value!r}",
                    where=f"cluster.{key}",
                    hint=f"write it without quotes: {key} = 50",
                )
        cluster = make_cluster(
            config.gpu,
            gpus_per_node=config.gpus_per_node,
            nodes=config.nodes,
        )
        return cluster.with_overrides(config.overrides) if config.overrides else cluster
