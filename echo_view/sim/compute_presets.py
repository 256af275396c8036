"""Kernel cost parameters per GPU generation.

The efficiencies of :class:`~echo_view.sim.kernel_cost.ComputeParams` are properties of a GPU
and its math libraries, not of a workload, so echo-view keeps one set per GPU generation. The
values and the data each was fitted on are listed in ``docs/accuracy.md``; ``echo-view
calibrate compute`` and ``--set compute.<name>=...`` replace them.
"""

from __future__ import annotations

from echo_view.errors import ConfigError, InputError
from echo_view.model.gpus import GENERATIONS, gpu_generation
from echo_view.model.toml_file import TomlDoc
from echo_view.sim.cluster import GpuSpec
from echo_view.sim.gemm_shape import GemmShapeParams
from echo_view.sim.kernel_cost import ComputeParams

# A100: the fraction of the 312 TFLOP/s peak large GEMMs reach, fitted on the step times of all
# 27 visible A100 runs (`bench/step_accuracy.py --cv source`; docs/accuracy.md, "Leave-one-
# source-out"). No kernel-level GEMM table for A100 is at hand, so A100 GEMMs keep this fit.
_A100 = ComputeParams(gemm_eff_max=0.72)

# Hopper memory-bound kernels: `echo-view calibrate compute` on the real H100 Kineto trace
# (tracelens, 927 ops, 20 memory-bound shapes; docs/accuracy.md "Kernel cost model fit"):
# strided copies and broadcasts reach less of the HBM bandwidth than the generic 0.85 says.
_HOPPER = ComputeParams(mem_eff_max=0.585, mem_half_bytes=3.26e6, kernel_min_ns=1770)

# V100: cuBLAS mixed-precision GEMMs (fp16 inputs, fp32 accumulation, as in fp16 training) reach
# up to 83 of the 125 TFLOP/s tensor-core peak (Markidis et al. 2018, "NVIDIA Tensor Core
# Programmability, Performance & Precision", IPDPS workshops, arXiv 1803.04014), a kernel-level
# measurement, so it is not fitted on step times. The V100 Kineto traces' fp32 GEMMs agree (0.64:
# docs/accuracy.md, "Kernel cost model fit"); their memory-bound fit is left out, as it moves
# with the fitted op mix (0.74-0.83 of the HBM bandwidth between revisions) around the generic 0.85.
_VOLTA = ComputeParams(gemm_eff_max=0.664)

#: Parameters by GPU generation (a preset's ``arch``, :mod:`echo_view.model.gpus`). Hopper and
#: Blackwell GEMMs take their time from the shape model below, not from these.
_BY_ARCH: dict[str, ComputeParams] = {
    "volta": _VOLTA,
    "ampere": _A100,
    "hopper": _HOPPER,
}

_XLA = "OpenXLA matmul table, samples/kernels/gemm"
# The last field (best_frac) is the best measured rate / peak of each table ("best measured / peak"
# in docs/accuracy.md, "GEMM shape model"): no GEMM is timed faster than the fastest measured one.
_HOPPER_BF16 = GemmShapeParams(0.900, 192.0, 5280.0, _XLA + " (H100, 375 shapes)", 0.813)
_HOPPER_TF32 = GemmShapeParams(0.682, 76.0, 8030.0, _XLA + " (H100 f32 on TF32, 375 shapes)", 0.815)
# DeepGEMM's FP8 kernels on H800 (6 compute-bound shapes; 1.0-1.2x faster than a CUTLASS 3.6
# implementation, so Transformer Engine's FP8 GEMMs may be up to that much slower).
_HOPPER_FP8 = GemmShapeParams(0.742, 741.0, 2340.0, "DeepGEMM README, H800 (6 shapes)", 0.686)
_B200_BF16 = GemmShapeParams(0.759, 306.0, 5000.0, _XLA + " (B200, 375 shapes)", 0.742)
_B200_TF32 = GemmShapeParams(0.812, 233.0, 6610.0, _XLA + " (B200 f32 on TF32, 375 shapes)", 0.791)
_B200_FP8 = GemmShapeParams(0.785, 450.0, 5440.0, _XLA + " (B200 e4m3, 375 shapes)", 0.729)
#: GEMM shape-model constants by (generation, dtype), fitted by ``bench/gemm_fit.py`` on kernel
#: measurements (docs/accuracy.md, "GEMM shape model"). FP32 (without TF32) has none: it does
#: not run on tensor cores.
_GEMM_SHAPES: dict[tuple[str, str], GemmShapeParams] = {
    **{
        ("hopper", dt): p
        for dt, p in (
            ("bf16", _HOPPER_BF16),
            ("fp16", _HOPPER_BF16),
            ("tf32", _HOPPER_TF32),
            ("fp8", _HOPPER_FP8),
        )
    },
    ("blackwell", "bf16"): _B200_BF16,
    ("blackwell", "fp16"): _B200_BF16,
    ("blackwell", "tf32"): _B200_TF32,
    ("blackwell", "fp8"): _B200_FP8,
}


#: Generations whose GEMM rates come from kernel measurements (the tables above, or the
#: measurement cited at ``_VOLTA``): ``bench/step_accuracy.py --cv source`` keeps their presets
#: instead of fitting ``gemm_eff_max`` on published step times. A100 has no such table.
GEMM_FROM_KERNELS: dict[str, str] = {
    "volta": "Markidis et al. 2018, cuBLAS 83 of 125 TFLOP/s",
    "hopper": "GEMM shape model: OpenXLA's H100 table, DeepGEMM's H800 FP8",
    "blackwell": "GEMM shape model: OpenXLA's B200 table",
}


def compute_params_for(gpu: GpuSpec) -> ComputeParams:
    """The cost parameters for ``gpu`` (generic defaults for a generation without its own set)."""
    return _BY_ARCH.get(gpu.arch, ComputeParams())


def gemm_shape_params_for(gpu: GpuSpec, dtype: str) -> GemmShapeParams | None:
    """The measured GEMM shape-model constants for ``gpu`` and ``dtype``, if there are any."""
    return _GEMM_SHAPES.get((gpu.arch, dtype))


def compute_params_from_doc(
    doc: TomlDoc, gpu: GpuSpec, base: ComputeParams | None = None
) -> ComputeParams:
    """The parameters a ``calibrate compute`` file (read by the caller) holds for ``gpu``: its
    ``[gpu."NAME"]`` table for the GPU's preset name, else for a GPU of the same generation;
    values it does not hold keep ``base`` (default: :func:`compute_params_for`)."""
    file = doc.path
    tables = doc.data.get("gpu")
    if not isinstance(tables, dict) or not tables:
        raise InputError(
            'no [gpu."NAME"] table', path=file, hint="write it with echo-view calibrate compute"
        )
    name = gpu.name.removesuffix(" (modified)")
    key = name if name in tables else None
    if key is None:
        same = [k for k in tables if GENERATIONS[gpu_generation(k)] == gpu.arch]
        key = same[0] if same else None
    if key is None:
        raise ConfigError(
            f"the compute file has no parameters for {name}",
            path=file,
            hint=f"it holds: {', '.join(tables)}",
        )
    table = tables[key]
    if not isinstance(table, dict):
        raise InputError("not a table", path=file, where=f'gpu."{key}"')
    values = {k: v for k, v in table.items() if not isinstance(v, dict)}
    # A calibrated file describes GEMMs and attention with the FLOP form it was fitted in,
    # unless it says otherwise.
    values.setdefault("gemm_shape_model", 0)
    values.setdefault("attn_kernel_model", 0)
    try:
        return (base or compute_params_for(gpu)).with_overrides(values)
    except ConfigError as exc:
        raise ConfigError(exc.message, path=file, where=f'gpu."{key}"', hint=exc.hint) from exc
