"""The GPU catalogue: presets (dense peak FLOP/s per dtype, HBM and NVLink bandwidth, memory and
SMs, each with its NVIDIA datasheet source), matching of device names as CUDA reports them to a
preset, and the generation of any GPU (a preset's ``arch``; for GPUs without a preset, from the
name or the CUDA compute capability). Adding a GPU is one entry in :data:`PRESETS` (and a
pattern in ``_MATCHERS`` when CUDA spells its name differently).

NVLink is per GPU and per direction (NVIDIA quotes the bidirectional sum: "600 GB/s" for A100
is 300 GB/s each way); peak FLOP/s are dense (half the "with sparsity" figures).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from echo_view.errors import ConfigError

GB = 1e9
GIB = 2**30
TFLOPS = 1e12


#: Where a dtype the GPU has no tensor-core path for runs: TF32 and BF16 at the FP32 rate
#: (V100), FP8 at the FP16 rate (A100, V100).
PEAK_FALLBACK = {"tf32": "fp32", "bf16": "fp32", "fp8": "fp16", "fp16": "fp32"}


def peak_of(peak_flops: Mapping[str, float], dtype: str) -> float | None:
    """The dense peak FLOP/s ``peak_flops`` gives ``dtype`` through :data:`PEAK_FALLBACK`;
    ``None`` for a dtype that is no floating-point training type (integers, unknown)."""
    key = dtype.lower()
    while key not in peak_flops:
        if key not in PEAK_FALLBACK:
            return None
        key = PEAK_FALLBACK[key]
    return float(peak_flops[key])


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model, as NVIDIA specifies it."""

    name: str
    #: Dense peak FLOP/s per dtype (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``); a dtype
    #: the GPU has no tensor-core path for is absent.
    peak_flops: Mapping[str, float] = field(hash=False)
    hbm_bytes_per_s: float
    #: Per GPU, per direction.
    nvlink_bytes_per_s: float
    memory_bytes: int
    sm_count: int
    source: str
    #: ``volta``, ``ampere``, ``hopper`` or ``blackwell`` (selects NCCL's per-architecture tables).
    arch: str = "ampere"
    #: NVLink links per GPU (NCCL counts bandwidth per link).
    nvlink_links: int = 0
    #: Host link, per direction.
    pcie_bytes_per_s: float = 32 * GB
    #: NIC bandwidth per GPU in the vendor's reference system (DGX/HGX), bits per second.
    default_nic_bits_per_s: float = 200e9
    default_fabric: str = "nvswitch"

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``, falling back to the path the GPU actually runs
        (:data:`PEAK_FALLBACK`)."""
        peak = peak_of(self.peak_flops, dtype)
        if peak is None:
            raise ConfigError(
                f"unknown dtype {dtype!r}",
                hint=f"one of: {', '.join(('fp32', *PEAK_FALLBACK))}",
            )
        return peak

    def check_training_dtype(self, dtype: str, source: str | None = None) -> None:
        """Refuse training in ``dtype`` on a GPU without tensor cores for it: bf16 needs
        Ampere or later, fp8 Hopper or later (Transformer Engine refuses FP8 below compute
        capability 8.9); the simulation would time it on another path (at the FP32 or FP16
        rate), not as any framework runs it."""
        if dtype in ("bf16", "fp8") and dtype not in self.peak_flops:
            types = ", ".join(sorted(self.peak_flops))
            raise ConfigError(
                f"{self.name} has no {dtype} tensor cores (its types: {types})",
                path=source,
                where="precision.dtype",
                hint="train in a type the GPU has (fp16 on V100, bf16 on A100), or choose "
                "another GPU",
            )


def _spec(
    name: str,
    flops_t: Mapping[str, float],
    hbm_gbs: float,
    nvlink_gbs: float,
    memory_gb: float,
    sms: int,
    arch: str,
    links: int,
    pcie_gbs: float,
    nic_gbps: float,
    source: str,
    fabric: str = "nvswitch",
    measured_bytes: tuple[int, str] | None = None,
) -> GpuSpec:
    # Memory: what CUDA reports (``totalGlobalMem``) where a public trace records it, with the
    # trace cited; else the datasheet's figure, which counts binary GB (an "80 GB" part reports
    # 79.1-79.2 GiB, the rest held by the driver).
    memory = int(memory_gb * GIB)
    if measured_bytes is not None:
        memory, where = measured_bytes
        source += f"; memory: totalGlobalMem {memory:,} bytes in {where}"
    return GpuSpec(
        name=name,
        peak_flops={k: v * TFLOPS for k, v in flops_t.items()},
        hbm_bytes_per_s=hbm_gbs * GB,
        nvlink_bytes_per_s=nvlink_gbs * GB,
        memory_bytes=memory,
        sm_count=sms,
        source=source,
        arch=arch,
        nvlink_links=links,
        pcie_bytes_per_s=pcie_gbs * GB,
        default_nic_bits_per_s=nic_gbps * 1e9,
        default_fabric=fabric,
    )


_A100_FLOPS = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
_H100_FLOPS = {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}
_A100_SRC = (
    "NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5 TF, TF32 156 TF, FP16/BF16 312 TF "
    "dense; NVLink 600 GB/s (12 links); PCIe Gen4 64 GB/s; DGX A100: 8x 200 Gb/s HDR per GPU"
)
_H100_SRC = (
    "NVIDIA H100 Tensor Core GPU datasheet (SXM5): FP32 67 TF, TF32 494.7, FP16/BF16 989.4, FP8 "
    "1,978.9 TF dense; HBM3 3.35 TB/s; NVLink 900 GB/s (18 links); PCIe Gen5 128 GB/s; "
    "DGX H100: 8x 400 Gb/s NDR per GPU"
)
_H800_MEMORY = (84_943_110_144, "deepseek-profile-data/train (NVIDIA H800)")

#: The presets, named as NVIDIA reports them.
PRESETS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            _spec(
                "V100-SXM2-32GB",
                {"fp32": 15.7, "fp16": 125.0},
                900,
                150,
                32,
                80,
                "volta",
                6,
                16,
                50,
                "NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7 TF, tensor FP16 125 TF; HBM2 900 "
                "GB/s; NVLink 300 GB/s (6 links); PCIe Gen3 32 GB/s; DGX-1: 4x 100 Gb/s EDR "
                "per 8 GPUs (hybrid cube-mesh NVLink)",
                fabric="nvlink",
                measured_bytes=(
                    34_089_730_048,
                    "hta-tests/df_index_resolver (Tesla V100-SXM2-32GB)",
                ),
            ),
            _spec(
                "A100-SXM4-40GB",
                _A100_FLOPS,
                1555,
                300,
                40,
                108,
                "ampere",
                12,
                32,
                200,
                _A100_SRC + "; HBM2 1,555 GB/s, 40 GB",
                measured_bytes=(
                    42_505_273_344,
                    "hta-tests/trace_diff/control (NVIDIA A100-PG509-200, 40 GB)",
                ),
            ),
            _spec(
                "A100-SXM4-80GB",
                _A100_FLOPS,
                2039,
                300,
                80,
                108,
                "ampere",
                12,
                32,
                200,
                _A100_SRC + "; HBM2e 2,039 GB/s, 80 GB",
                measured_bytes=(
                    84_990_623_744,
                    "hta-tests/negative_queue_length_values_check (NVIDIA A100-SXM4-80GB)",
                ),
            ),
            _spec(
                "H100-SXM5-80GB",
                _H100_FLOPS,
                3350,
                450,
                80,
                132,
                "hopper",
                18,
                64,
                400,
                _H100_SRC,
                measured_bytes=_H800_MEMORY,  # the same 80 GB HBM3
            ),
            _spec(
                "H800-SXM5-80GB",
                _H100_FLOPS,
                3350,
                200,
                80,
                132,
                "hopper",
                8,
                64,
                400,
                "NVIDIA H800 SXM5 product brief: H100 compute and memory with NVLink reduced to "
                "400 GB/s (8 links); 400 Gb/s NDR per GPU as in Echo's H800 cluster; compute as "
                + _H100_SRC,
                measured_bytes=_H800_MEMORY,
            ),
            _spec(
                "H200-SXM-141GB",
                _H100_FLOPS,
                4800,
                450,
                141,
                132,
                "hopper",
                18,
                64,
                400,
                "NVIDIA H200 Tensor Core GPU datasheet (SXM): HBM3e 141 GB at 4.8 TB/s, NVLink "
                "900 GB/s, compute as H100 SXM (FP16/BF16 989 TF, FP8 1,979 TF dense)",
            ),
            _spec(
                "B200",
                {"fp32": 80.0, "tf32": 1100.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
                8000,
                900,
                180,
                148,
                "blackwell",
                18,
                64,
                400,
                "NVIDIA HGX/DGX B200 datasheets and Blackwell architecture brief (1,000 W HGX): "
                "FP32 80 TF, TF32 1.1 PF, FP16/BF16 2.25 PF, FP8 4.5 PF dense; HBM3e 8 TB/s, "
                "180 GB (1,440 GB per 8 GPUs); NVLink 5 1.8 TB/s (18 links); DGX B200: 8x 400 "
                "Gb/s per GPU",
                measured_bytes=(191_503_138_816, "tracelens/b200/eager_trace (NVIDIA B200)"),
            ),
        )
    }
)

_ALIASES = {
    "V100": "V100-SXM2-32GB",
    "A100": "A100-SXM4-80GB",
    "A100-40GB": "A100-SXM4-40GB",
    "A100-80GB": "A100-SXM4-80GB",
    "H100": "H100-SXM5-80GB",
    "H800": "H800-SXM5-80GB",
    "H200": "H200-SXM-141GB",
    "B200": "B200",
}


def known_presets() -> tuple[str, ...]:
    """Preset names followed by their short aliases."""
    return (*PRESETS, *(a for a in _ALIASES if a not in PRESETS))


def gpu_preset(name: str, where: str = "cluster.gpu") -> GpuSpec:
    """The preset called ``name`` (full name or short alias, case-insensitive); an unknown
    name is an error at ``where`` (the config key, or the option that gave it)."""
    key = name.strip()
    by_upper = {k.upper(): v for k, v in PRESETS.items()}
    alias = {k.upper(): v for k, v in _ALIASES.items()}
    up = key.upper()
    if up in by_upper:
        return by_upper[up]
    if up in alias:
        return PRESETS[alias[up]]
    raise ConfigError(
        f"unknown GPU preset {name!r}",
        where=where,
        hint=f"known presets: {', '.join(known_presets())}",
    )


#: Longest device name matched against the presets (CUDA's names are under 100 characters).
MAX_DEVICE_NAME = 256

_MATCHERS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"V100[- ]SXM2"), "V100-SXM2-32GB"),
    (re.compile(r"A100[- ]SXM4?[- ]80GB|A100[- ]80GB"), "A100-SXM4-80GB"),
    (re.compile(r"A100[- ]SXM4?[- ]40GB|A100[- ]40GB"), "A100-SXM4-40GB"),
    # PG509 is the A100 SXM4 board; its memory size tells the variant (see match_gpu).
    (re.compile(r"A100[- ]PG509|A100[- ]SXM"), None),
    (re.compile(r"H100.*(?:PCIE|NVL)"), ""),
    (re.compile(r"H100"), "H100-SXM5-80GB"),
    (re.compile(r"H800.*PCIE"), ""),
    (re.compile(r"H800"), "H800-SXM5-80GB"),
    (re.compile(r"H200"), "H200-SXM-141GB"),
    (re.compile(r"B200"), "B200"),
)


def match_gpu(device_name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The preset for a device name as CUDA reports it (Kineto ``deviceProperties``,
    nccl-tests): ``Tesla V100-SXM2-32GB``, ``NVIDIA A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3``,
    ``NVIDIA H800``, ``NVIDIA B200``, ``NVIDIA A100-PG509-200`` (``memory_bytes`` picks the 40
    or 80 GB A100). ``None`` when no preset fits (PCIe cards, other GPUs): no guess."""
    if len(device_name) > MAX_DEVICE_NAME:
        return None  # no device is named so; and "H100.*PCIE" over 80,000 characters took 8 s
    name = device_name.upper()
    for pattern, preset in _MATCHERS:
        if not pattern.search(name):
            continue
        if preset == "":
            return None
        if preset is None:
            big = memory_bytes is not None and memory_bytes > 60 * GB
            return PRESETS["A100-SXM4-80GB" if big else "A100-SXM4-40GB"]
        return PRESETS[preset]
    return None


#: GPU generations (index = the code stored in interference feature tables; ``unknown`` is 0).
#: A preset's ``arch`` is one of them.
GENERATIONS: tuple[str, ...] = (
    "unknown",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
    "cdna2",
    "cdna3",
)
# Generations of GPUs without a preset, by a word of the device name; checked in order (the
# Blackwell words before Hopper's "H20", AMD before the compute capability, which AMD lacks).
_GENERATION_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cdna3", ("MI3",)),
    ("cdna2", ("MI2", "MI100")),
    ("blackwell", ("B100", "B200", "GB200", "B300", "BLACKWELL", "RTX 50")),
    ("hopper", ("H100", "H800", "H200", "H20", "GH200", "HOPPER")),
    ("ada", ("L40", "L4", "RTX 40", "ADA")),
    ("ampere", ("A100", "A800", "A10", "A30", "A40", "A6000", "RTX 30", "PG509")),
    ("turing", ("T4", "RTX 20", "TURING")),
    ("volta", ("V100", "VOLTA")),
    ("unknown", ("AMD", "RADEON", "INSTINCT")),
)
# CUDA compute capability (major, lowest minor) -> generation, highest minor first per major.
_BY_CAPABILITY: tuple[tuple[tuple[int, int], str], ...] = (
    ((7, 5), "turing"),
    ((7, 0), "volta"),
    ((8, 9), "ada"),
    ((8, 0), "ampere"),
    ((9, 0), "hopper"),
    ((10, 0), "blackwell"),
    ((12, 0), "blackwell"),
)


def gpu_generation(name: str, compute_capability: tuple[int, int] | None = None) -> int:
    """The :data:`GENERATIONS` code of a GPU from its name as CUDA or a config gives it (a
    preset's ``arch`` when it matches one), else from its CUDA compute capability."""
    preset = PRESETS.get(name) or match_gpu(name)
    if preset is not None:
        return GENERATIONS.index(preset.arch)
    up = name.upper()
    for generation, words in _GENERATION_WORDS:
        if any(w in up for w in words):
            return GENERATIONS.index(generation)
    if compute_capability is not None:
        for (major, minor), generation in _BY_CAPABILITY:
            if compute_capability[0] == major and compute_capability[1] >= minor:
                return GENERATIONS.index(generation)
    return GENERATIONS.index("unknown")
