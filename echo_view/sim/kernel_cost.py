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
above then serves GEMMs of unknown shape. ``gemm_shape_model = 0`` turns that off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.errors import ConfigError

# Op classes (shared with echo_view.model.graph.OpClass and echo_view.model.workload).
GEMM, ATTENTION, COLLECTIVE = 0, 1, 9


class GpuPeaks(Protocol):
    """What the cost model needs of a GPU preset (read-only)."""

    @property
    def peak_flops(self) -> Mapping[str, float]: ...

    @property
    def hbm_bytes_per_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ComputeParams:
    """Efficiencies and fixed costs of the kernel cost model (see module docstring).

    Defaults are typical of NVIDIA data-center GPUs running cuBLAS/cuDNN kernels from
    PyTorch; calibrate them on traces of the GPU at hand.
    """

    gemm_eff_max: float = 0.80
    gemm_half_flops: float = 4.0e9
    attn_eff_max: float = 0.55
    attn_half_flops: float = 4.0e9
    mem_eff_max: float = 0.85
    mem_half_bytes: float = 2.0e6
    kernel_min_ns: int = 2_000
    kernel_gap_ns: int = 1_500
    gemm_shape_model: float = 1.0

    def with_overrides(self, overrides: Mapping[str, Any]) -> ComputeParams:
        """A copy with some fields replaced; an unknown name is a :class:`ConfigError`."""
        known = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise ConfigError(
                    f"unknown compute parameter {key!r}",
                    hint=f"known: {', '.join(sorted(known))}",
                )
            try:
                number = float(value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"compute parameter {key!r} needs a number, got {value!r}"
                ) from exc
            lo, hi, rule = _RANGES[key.rsplit("_", 1)[-1] if key.endswith("_ns") else key]
            off_switch = key in _SWITCHES and number not in (0.0, 1.0)
            if isinstance(value, bool) or not lo <= number <= hi or off_switch:
                raise ConfigError(f"compute parameter {key!r} must be {rule}, got {value!r}")
            changes[key] = int(number) if key.endswith("_ns") else number
        return replace(self, **changes)


# Accepted values (efficiencies and half sizes divide; beyond these bounds a kernel's time
# would leave int64 ns or be meaningless): (low, high, what to say).
_EFF = (1e-3, 1.0, "an efficiency in [0.001, 1]")
_HALF = (1e-9, 1e18, "a positive size up to 1e18")
_RANGES: dict[str, tuple[float, float, str]] = {
    "gemm_eff_max": _EFF,
    "attn_eff_max": _EFF,
    "mem_eff_max": _EFF,
    "gemm_half_flops": _HALF,
    "attn_half_flops": _HALF,
    "mem_half_bytes": _HALF,
    "ns": (0.0, 1e12, "a time in ns from 0 to 1e12"),
    "gemm_shape_model": (0.0, 1.0, "0 (FLOP roofline) or 1 (GEMM shape model)"),
}
#: Parameters that are on/off switches: 0 or 1, nothing between.
_SWITCHES = frozenset({"gemm_shape_model"})


def _sat(x: npt.NDArray[np.float64], eff_max: float, half: float) -> npt.NDArray[np.float64]:
    return eff_max * x / (x + half)


def peak_for(gpu: GpuPeaks, dtype: str) -> float:
    """Dense peak FLOP/s of ``gpu`` for ``dtype`` (``fp8`` falls back to ``bf16``, integer and
    unknown types to ``fp32``)."""
    peaks = gpu.peak_flops
    if dtype in peaks:
        return float(peaks[dtype])
    if dtype == "fp8" and "bf16" in peaks:
        return float(peaks["bf16"])
    if dtype in ("fp16", "bf16") and "fp16" in peaks:
        return float(peaks["fp16"])
    return float(peaks["fp32"])


def op_times_ns(
    op_class: npt.NDArray[Any],
    flops: npt.NDArray[Any],
    nbytes: npt.NDArray[Any],
    peak_flops: npt.NDArray[Any],
    gpu: GpuPeaks,
    params: ComputeParams,
    gemm_math_ns: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.int64]:
    """GPU time of each op (int64 ns), vectorised. ``peak_flops`` is per op (its dtype's peak).
    ``gemm_math_ns`` (NaN where unknown) replaces the FLOP form's math time of GEMMs.
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
    if gemm_math_ns is not None:
        known = is_gemm & np.isfinite(gemm_math_ns)
        t_math = np.where(known, np.nan_to_num(gemm_math_ns) * 1e-9, t_math)
    t = np.maximum(np.maximum(t_math, t_mem) * 1e9, params.kernel_min_ns) + params.kernel_gap_ns
    out: npt.NDArray[np.int64] = np.rint(t).astype(np.int64)
    out[cls == COLLECTIVE] = 0
    return out
