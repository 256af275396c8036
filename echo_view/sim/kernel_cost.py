"""Kernel cost model: an op's GPU time from its FLOPs and bytes against the GPU's peaks.

Each kernel is bounded by its math or its memory traffic (a roofline), with efficiencies that
grow with the kernel's size — small GEMMs and short kernels reach a smaller fraction of peak
than large ones::

    eff(x)  = eff_max * x / (x + x_half)                     (saturating in size x)
    t_math  = flops / (peak_flops[dtype] * eff_gemm(flops))  (GEMM, attention)
    t_mem   = bytes / (hbm_bytes_per_s * eff_mem(bytes))
    t       = max(t_math, t_mem, kernel_min) + kernel_gap

``kernel_gap`` is the idle time between back-to-back kernels on one stream (launch latency the
CPU cannot hide); ``kernel_min`` the shortest a kernel takes. Every parameter has a physical
meaning and a default; ``echo-view calibrate compute`` fits them to measured kernels.

Where the caller knows a GEMM's shape and the GPU has measured shape-model constants, its math
time comes from :mod:`echo_view.sim.gemm_shape` instead (tiles, waves, small K); the FLOP form
above then serves GEMMs of unknown shape. ``gemm_shape_model = 0`` turns that off;
``gemm_shape_ceiling = 0`` lets the shape model run faster than the best GEMM its constants
were fitted on. Likewise a
fused attention kernel's math time comes from the measured speed of the kernel on the GPU's
architecture (:mod:`echo_view.model.attention_kernels`) where there is one;
``attn_kernel_model = 0`` turns that off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.model.gpus import peak_of
from echo_view.model.params import ParamSet, param
from echo_view.units import float_ns

# Op classes (shared with echo_view.model.graph.OpClass and echo_view.model.workload).
GEMM, ATTENTION, COLLECTIVE = 0, 1, 9


class GpuPeaks(Protocol):
    """What the cost model needs of a GPU preset (read-only)."""

    @property
    def peak_flops(self) -> Mapping[str, float]: ...

    @property
    def hbm_bytes_per_s(self) -> float: ...


def _eff(default: float, help: str) -> Any:
    return param(default, help=help, unit="fraction", lo=1e-3, hi=1.0)


def _half(default: float, help: str, unit: str) -> Any:
    return param(default, help=help, unit=unit, lo=1e-9, hi=1e18)


def _ns(default: int, help: str) -> Any:
    return param(default, help=help, unit="ns", lo=0.0, hi=1e12, integer=True)


@dataclass(frozen=True)
class ComputeParams(ParamSet):
    """Efficiencies and fixed costs of the kernel cost model (see module docstring).

    Defaults are typical of NVIDIA data-center GPUs running cuBLAS/cuDNN kernels from
    PyTorch; calibrate them on traces of the GPU at hand.
    """

    NOUN: ClassVar[str] = "compute parameter"

    gemm_eff_max: float = _eff(0.80, "fraction of the dense peak large GEMMs reach")
    gemm_half_flops: float = _half(4.0e9, "GEMM size at half that efficiency", "FLOP")
    attn_eff_max: float = _eff(0.55, "fraction of the peak large attention kernels reach")
    attn_half_flops: float = _half(4.0e9, "attention size at half that efficiency", "FLOP")
    mem_eff_max: float = _eff(0.85, "fraction of HBM bandwidth large memory-bound kernels reach")
    mem_half_bytes: float = _half(2.0e6, "bytes moved at half that efficiency", "bytes")
    kernel_min_ns: int = _ns(2_000, "shortest kernel")
    kernel_gap_ns: int = _ns(1_500, "idle time between back-to-back kernels")
    gemm_shape_model: float = param(
        1.0,
        help="1: GEMMs of known shape from the GEMM shape model; 0: from the FLOP form",
        unit="",
        lo=0.0,
        hi=1.0,
        switch=True,
    )
    gemm_shape_ceiling: float = param(
        1.0,
        help="1: no shape-model GEMM faster than the best rate its kernel table measured; 0: off",
        unit="",
        lo=0.0,
        hi=1.0,
        switch=True,
    )
    attn_kernel_model: float = param(
        1.0,
        help="1: fused attention from the kernels' measured speed; 0: from the FLOP form",
        unit="",
        lo=0.0,
        hi=1.0,
        switch=True,
    )


def _sat(x: npt.NDArray[np.float64], eff_max: float, half: float) -> npt.NDArray[np.float64]:
    return eff_max * x / (x + half)


def peak_for(gpu: GpuPeaks, dtype: str) -> float:
    """Dense peak FLOP/s of ``gpu`` for an op of ``dtype``: the GPU's own rule
    (:func:`~echo_view.model.gpus.peak_of`), integer and unknown types at ``fp32``."""
    peak = peak_of(gpu.peak_flops, dtype)
    return float(gpu.peak_flops["fp32"]) if peak is None else peak


def op_times_ns(
    op_class: npt.NDArray[Any],
    flops: npt.NDArray[Any],
    nbytes: npt.NDArray[Any],
    peak_flops: npt.NDArray[Any],
    gpu: GpuPeaks,
    params: ComputeParams,
    math_ns: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.int64]:
    """GPU time of each op (int64 ns), vectorised. ``peak_flops`` is per op (its dtype's peak).
    ``math_ns`` (NaN where unknown) replaces the FLOP form's math time of GEMMs and attention
    ops (from the GEMM shape model and the attention kernel tables).
    Collectives get 0: their time comes from the communication model."""
    f = np.asarray(flops, dtype=np.float64)
    b = np.asarray(nbytes, dtype=np.float64)
    cls = np.asarray(op_class)
    peak = np.asarray(peak_flops, dtype=np.float64)
    is_gemm = cls == GEMM
    is_attn = cls == ATTENTION
    eff = np.where(
        is_attn,
        _sat(f, params.attn_eff_max, params.attn_half_flops),
        _sat(f, params.gemm_eff_max, params.gemm_half_flops),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        t_math = np.where(is_gemm | is_attn, f / (peak * eff), 0.0)
        t_mem = b / (gpu.hbm_bytes_per_s * _sat(b, params.mem_eff_max, params.mem_half_bytes))
    t_mem = np.nan_to_num(t_mem)
    t_math = np.nan_to_num(t_math)
    if math_ns is not None:
        known = (is_gemm | is_attn) & np.isfinite(math_ns)
        t_math = np.where(known, np.nan_to_num(math_ns) * 1e-9, t_math)
    t = np.maximum(np.maximum(t_math, t_mem) * 1e9, params.kernel_min_ns) + params.kernel_gap_ns
    out = float_ns(t)
    out[cls == COLLECTIVE] = 0
    return out
