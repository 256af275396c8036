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
from typing import TYPE_CHECKING, Any

from echo_view.errors import ConfigError, in_file, known_keys_hint, warn_deprecated
from echo_view.model.gpus import (
    GB,
    PRESETS,
    TFLOPS,
    GpuSpec,
    gpu_preset,
    known_presets,
    match_gpu,
)

if TYPE_CHECKING:
    from echo_view.model.config import ClusterConfig

#: Intra-node fabrics: a switch (every GPU reaches every other at its full NVLink rate), a
#: direct NVLink mesh (DGX-1 hybrid cube mesh), or PCIe only.
FABRICS = ("nvswitch", "nvlink", "pcie")
#: Host CPU vendors; NCCL's tuner caps LL bandwidth across nodes differently for each.
CPU_VENDORS = ("intel", "amd", "arm")


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
        }


#: Keys :meth:`Cluster.with_overrides` accepts. Every bandwidth is ``*_gbytes_per_s``: GB/s
#: (10^9 bytes per second) per GPU and per direction, the unit NVIDIA quotes NVLink and HBM in
#: and nccl-tests reports; a 400 Gb/s NIC per GPU is ``nic_gbytes_per_s = 50``.
OVERRIDE_KEYS: tuple[str, ...] = (
    "gpu",
    "gpus_per_node",
    "nodes",
    "nic_gbytes_per_s",
    "nvlink_gbytes_per_s",
    "pcie_gbytes_per_s",
    "hbm_gbytes_per_s",
    "fabric",
    "cpu",
    "net_latency_us",
    "memory_gb",
    "sm_count",
    "peak_tflops_fp32",
    "peak_tflops_tf32",
    "peak_tflops_fp16",
    "peak_tflops_bf16",
    "peak_tflops_fp8",
)

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
    gbytes = _number(key, raw) / 8
    warn_deprecated(
        f"cluster.{key}", f"cluster.{new} in GB/s", f" ({raw} Gb/s was read as {gbytes:g} GB/s)"
    )
    return new, gbytes


def _number(key: str, raw: Any, *, integer: bool = False) -> float:
    if isinstance(raw, bool):
        raise ConfigError(f"expected a number, got {raw!r}", where=f"cluster.{key}")
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"expected {kind}, got {raw!r}", where=f"cluster.{key}") from None
    # Bounded (in the key's own unit: GB/s, µs, TFLOP/s, GB, count) so that every
    # derived time stays a finite int64 of ns.
    if not 1e-3 <= value <= 1e9:
        raise ConfigError(f"must be positive (0.001 to 1e9), got {raw!r}", where=f"cluster.{key}")
    return value


def _apply(cluster: Cluster, key: str, raw: Any) -> Cluster:
    if key == "gpu":
        if isinstance(raw, GpuSpec):
            return replace(cluster, gpu=raw)
        return replace(cluster, gpu=gpu_preset(str(raw)))
    if key == "gpus_per_node":
        return replace(cluster, gpus_per_node=int(_number(key, raw, integer=True)))
    if key == "nodes":
        return replace(cluster, nodes=int(_number(key, raw, integer=True)))
    if key == "nic_gbytes_per_s":
        return replace(cluster, nic_bytes_per_s_per_gpu=_number(key, raw) * GB)
    if key == "nvlink_gbytes_per_s":
        return replace(cluster, nvlink_bytes_per_s=_number(key, raw) * GB)
    if key == "pcie_gbytes_per_s":
        return replace(cluster, pcie_bytes_per_s=_number(key, raw) * GB)
    if key == "fabric":
        return replace(cluster, fabric=str(raw).strip().lower())
    if key == "cpu":
        return replace(cluster, cpu=str(raw).strip().lower())
    if key == "net_latency_us":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"expected a number, got {raw!r}", where=f"cluster.{key}") from None
        if value < 0:
            raise ConfigError(f"must not be negative, got {raw!r}", where=f"cluster.{key}")
        return replace(cluster, net_latency_s=value * 1e-6)
    gpu = cluster.gpu
    if key == "hbm_gbytes_per_s":
        gpu = replace(gpu, hbm_bytes_per_s=_number(key, raw) * GB)
    elif key == "memory_gb":
        gpu = replace(gpu, memory_bytes=int(_number(key, raw) * GB))
    elif key == "sm_count":
        gpu = replace(gpu, sm_count=int(_number(key, raw, integer=True)))
    else:  # peak_tflops_<dtype>
        dtype = key.removeprefix("peak_tflops_")
        flops = dict(gpu.peak_flops)
        flops[dtype] = _number(key, raw) * TFLOPS
        gpu = replace(gpu, peak_flops=flops)
    if not gpu.name.endswith(" (modified)"):
        gpu = replace(gpu, name=f"{gpu.name} (modified)")
    return replace(cluster, gpu=gpu)


__all__ = [
    "CPU_VENDORS",
    "DEPRECATED_KEYS",
    "FABRICS",
    "OVERRIDE_KEYS",
    "PRESETS",
    "Cluster",
    "GpuSpec",
    "cluster_from_config",
    "gpu_preset",
    "known_presets",
    "make_cluster",
    "match_gpu",
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
        cluster = make_cluster(
            config.gpu,
            gpus_per_node=config.gpus_per_node,
            nodes=config.nodes,
        )
        return cluster.with_overrides(config.overrides) if config.overrides else cluster
