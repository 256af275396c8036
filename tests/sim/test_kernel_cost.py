"""The kernel cost model on hand-computed cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from echo_view.errors import ConfigError
from echo_view.model.gpus import gpu_preset
from echo_view.sim.kernel_cost import (
    ATTENTION,
    COLLECTIVE,
    GEMM,
    ComputeParams,
    op_times_ns,
    peak_for,
)


@dataclass(frozen=True)
class _Gpu:
    peak_flops: dict[str, float]
    hbm_bytes_per_s: float


GPU = _Gpu({"fp32": 20e12, "bf16": 1000e12, "fp8": 2000e12}, 2e12)
P = ComputeParams(
    gemm_eff_max=0.8,
    gemm_half_flops=1e9,
    attn_eff_max=0.5,
    attn_half_flops=1e9,
    mem_eff_max=0.9,
    mem_half_bytes=1e6,
    kernel_min_ns=2_000,
    kernel_gap_ns=1_000,
)


def test_large_gemm_is_math_bound_at_the_saturated_efficiency() -> None:
    flops, nbytes = 1e12, 1e6
    eff = 0.8 * flops / (flops + 1e9)
    expected = flops / (1000e12 * eff) * 1e9 + 1_000
    t = op_times_ns(
        np.array([GEMM]), np.array([flops]), np.array([nbytes]), np.array([1000e12]), GPU, P
    )
    assert int(t[0]) == round(expected)


def test_memory_bound_op_and_the_minimum_kernel_time() -> None:
    nbytes = 4e9  # an elementwise op moving 4 GB
    eff = 0.9 * nbytes / (nbytes + 1e6)
    t = op_times_ns(
        np.array([2, 2]),
        np.array([1e9, 10.0]),
        np.array([nbytes, 10.0]),
        np.array([1000e12, 1000e12]),
        GPU,
        P,
    )
    assert int(t[0]) == round(nbytes / (2e12 * eff) * 1e9 + 1_000)
    assert int(t[1]) == 2_000 + 1_000  # tiny kernels take kernel_min, plus the gap


def test_attention_uses_its_own_efficiency_and_collectives_cost_nothing_here() -> None:
    flops = 1e12
    t = op_times_ns(
        np.array([ATTENTION, COLLECTIVE]),
        np.array([flops, flops]),
        np.array([0.0, 0.0]),
        np.array([1000e12, 1000e12]),
        GPU,
        P,
    )
    assert int(t[0]) == round(flops / (1000e12 * 0.5 * flops / (flops + 1e9)) * 1e9 + 1_000)
    assert int(t[1]) == 0


def test_known_math_time_replaces_the_flop_form_of_gemms_and_attention_only() -> None:
    # 1e12 FLOPs of GEMM, attention and an elementwise op; known math times 400 us, 700 us and
    # 1 ms (the last ignored: not a math kernel), NaN keeps the FLOP form.
    t = op_times_ns(
        np.array([GEMM, ATTENTION, 2, ATTENTION]),
        np.full(4, 1e12),
        np.zeros(4),
        np.full(4, 1000e12),
        GPU,
        P,
        np.array([400e3, 700e3, 1e6, np.nan]),
    )
    flop_form = 1e12 / (1000e12 * 0.5 * 1e12 / (1e12 + 1e9)) * 1e9
    assert t.tolist() == [401_000, 701_000, 3_000, round(flop_form + 1_000)]


def test_small_gemms_are_slower_per_flop() -> None:
    f = np.array([1e8, 1e12])
    t = op_times_ns(
        np.array([GEMM, GEMM]),
        f,
        np.zeros(2),
        np.full(2, 1000e12),
        GPU,
        ComputeParams(kernel_min_ns=0, kernel_gap_ns=0),
    )
    assert t[0] / f[0] > 5 * t[1] / f[1]


def test_peak_fallbacks() -> None:
    """One rule with the GPU presets' (``GpuSpec.peak``): FP8 without tensor cores at the FP16
    rate, BF16 and TF32 at the FP32 rate (here BF16 on V100 was timed at its FP16 rate, 125
    TFLOP/s, while the MFU divided by its FP32 rate, 15.7: MFU 326%)."""
    assert peak_for(GPU, "bf16") == 1000e12
    assert peak_for(_Gpu({"fp32": 1.0, "fp16": 2.0}, 1.0), "fp8") == 2.0
    assert peak_for(_Gpu({"fp32": 1.0, "fp16": 3.0}, 1.0), "bf16") == 1.0
    assert peak_for(GPU, "int64") == 20e12
    v100 = gpu_preset("V100-SXM2-32GB")
    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        assert peak_for(v100, dtype) == v100.peak(dtype)


def test_training_in_a_type_the_gpu_has_no_tensor_cores_for_is_refused() -> None:
    with pytest.raises(ConfigError, match="V100-SXM2-32GB has no bf16 tensor cores") as err:
        gpu_preset("V100-SXM2-32GB").check_training_dtype("bf16", "job.toml")
    assert err.value.where == "precision.dtype"
    with pytest.raises(ConfigError, match="A100-SXM4-80GB has no fp8 tensor cores"):
        gpu_preset("A100-SXM4-80GB").check_training_dtype("fp8")
    gpu_preset("H100-SXM5-80GB").check_training_dtype("fp8")
    gpu_preset("V100-SXM2-32GB").check_training_dtype("fp16")


def test_overrides_are_checked() -> None:
    p = ComputeParams().with_overrides({"gemm_eff_max": "0.5", "kernel_gap_ns": "10"})
    assert p.gemm_eff_max == 0.5 and p.kernel_gap_ns == 10
    with pytest.raises(ConfigError, match="unknown compute parameter 'gemm'"):
        ComputeParams().with_overrides({"gemm": 1})
    with pytest.raises(ConfigError, match="needs a number"):
        ComputeParams().with_overrides({"gemm_eff_max": "fast"})
