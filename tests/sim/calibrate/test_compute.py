"""Kernel cost model calibration: recovery of known parameters, held-out splits that never test
a fitted shape, real-trace errors against the defaults, and the parameter file loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from echo_view.analysis.kernel_fit import KernelSamples, kernel_samples, samples_of_jobs
from echo_view.errors import ConfigError, InputError
from echo_view.model.graph import OpClass
from echo_view.model.toml_file import read_toml_doc
from echo_view.sim.calibrate.compute import (
    FitData,
    calibrate,
    fit_data,
    fit_params,
    holdout_splits,
    predict_ns,
)
from echo_view.sim.calibrate.optimize import nelder_mead
from echo_view.sim.cluster import gpu_preset
from echo_view.sim.compute_presets import compute_params_for, compute_params_from_doc
from echo_view.sim.kernel_cost import ComputeParams
from importers.kineto import KinetoImporter
from tests.conftest import SAMPLES, shared_path

A100 = gpu_preset("A100-SXM4-80GB")
V100 = gpu_preset("V100")
TRUE = ComputeParams(
    gemm_eff_max=0.62,
    gemm_half_flops=1.0e9,
    mem_eff_max=0.7,
    mem_half_bytes=3.0e6,
    kernel_min_ns=2_600,
)


def _synthetic(noise: float, seed: int = 0) -> FitData:
    """GEMMs m x k x n and memory ops over four decades, timed by ``TRUE`` with noise."""
    rng = np.random.default_rng(seed)
    sizes = np.array([64, 128, 256, 512, 1024, 2048, 4096, 8192])
    m, k, n = (rng.choice(sizes, 60) for _ in range(3))
    gemm_flops = 2.0 * m * k * n
    gemm_bytes = 2.0 * (m * k + k * n + m * n)
    mem_bytes = np.geomspace(1e4, 5e8, 60)
    cls = np.r_[np.full(60, OpClass.GEMM), np.full(60, OpClass.ELEMENTWISE)].astype(np.uint8)
    data = FitData(
        op_class=cls,
        flops=np.r_[gemm_flops, mem_bytes / 6],
        nbytes=np.r_[gemm_bytes, mem_bytes],
        peak=np.full(120, A100.peak_flops["bf16"]),
        measured_ns=np.zeros(120, dtype=np.int64),
        shape=np.arange(120, dtype=np.int32),
        trace=np.zeros(120, dtype=np.int32),
    )
    t = predict_ns(TRUE, data, A100) * np.exp(rng.normal(0.0, noise, 120))
    return FitData(**{**data.__dict__, "measured_ns": np.rint(t).astype(np.int64)})


def test_recovers_known_parameters() -> None:
    """From the defaults (0.75, 4e9, 0.85, 2e6, 2000) back to the parameters that timed the
    ops, through 3% noise."""
    result = fit_params(_synthetic(0.03), A100, compute_params_for(A100))
    assert set(result.fitted) == {
        "gemm_eff_max",
        "gemm_half_flops",
        "mem_eff_max",
        "mem_half_bytes",
        "kernel_min_ns",
    }
    p = result.params
    assert p.gemm_eff_max == pytest.approx(TRUE.gemm_eff_max, rel=0.05)
    assert p.gemm_half_flops == pytest.approx(TRUE.gemm_half_flops, rel=0.25)
    assert p.mem_eff_max == pytest.approx(TRUE.mem_eff_max, rel=0.05)
    assert p.mem_half_bytes == pytest.approx(TRUE.mem_half_bytes, rel=0.25)
    assert p.kernel_min_ns == pytest.approx(TRUE.kernel_min_ns, rel=0.05)
    # No attention ops: the attention parameters keep the defaults.
    assert p.attn_eff_max == compute_params_for(A100).attn_eff_max
    assert p.kernel_gap_ns == compute_params_for(A100).kernel_gap_ns


def test_exact_data_is_fitted_exactly() -> None:
    data = _synthetic(0.0)
    p = fit_params(data, A100, compute_params_for(A100)).params
    rel = np.abs(predict_ns(p, data, A100) / data.measured_ns - 1.0)
    assert np.median(rel) < 0.005 and rel.max() < 0.05


def test_nelder_mead_finds_a_curved_valley() -> None:
    def rosenbrock(x: np.ndarray) -> float:
        return float((1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2)

    x, value = nelder_mead(rosenbrock, np.array([-1.2, 1.0]))
    assert value < 1e-8 and np.allclose(x, [1.0, 1.0], atol=1e-3)


def _dlrm() -> KernelSamples:
    return kernel_samples(KinetoImporter().read([SAMPLES / "dlrm_kineto"]))


def _assert_disjoint(data: FitData, splits: list[tuple[np.ndarray, np.ndarray]]) -> None:
    tested = np.zeros(len(data), dtype=bool)
    for train, test in splits:
        assert not np.any(train & test)
        assert not np.intersect1d(data.shape[train], data.shape[test]).size
        assert not np.any(tested & test)  # each op is tested once at most
        tested |= test


def test_ranks_of_one_job_are_split_by_shape() -> None:
    """The eight DLRM ranks repeat each other's shapes: a trace split would test fitted
    shapes, so the split is by shape, and every op is tested exactly once."""
    s = _dlrm()
    data = fit_data(s, V100)
    found = holdout_splits(data, s.shapes)
    assert found is not None
    kind, splits = found
    assert kind == "shape" and len(splits) == 5
    _assert_disjoint(data, splits)
    assert np.all(np.logical_or.reduce([test for _, test in splits]))
    # Every fold holds GEMM shapes (classes are dealt round robin).
    for _, test in splits:
        assert np.any(data.op_class[test] == OpClass.GEMM)


def test_dlrm_calibration_beats_the_defaults_on_held_out_shapes() -> None:
    s = _dlrm()
    c = calibrate(s, V100, compute_params_for(V100))
    assert c.holdout is not None and c.holdout.split == "shape"
    assert c.holdout.fitted.ops == c.ops == len(s)
    assert c.holdout.fitted.median_abs < c.holdout.default.median_abs
    gemm_fit, gemm_default = c.holdout.by_class["gemm"]
    # Small fp32 GEMMs: the defaults' 4 GFLOP half-efficiency size makes them 10x too slow.
    assert gemm_default.median_abs > 5 and gemm_fit.median_abs < 0.5
    assert c.in_sample.median_abs <= c.default_in_sample.median_abs
    assert 0 < c.params.gemm_eff_max <= 1 and 0 < c.params.mem_eff_max <= 1


def test_traces_with_their_own_shapes_are_split_by_trace() -> None:
    paths = [SAMPLES / "dlrm_kineto", shared_path("data/hta-tests/trace_diff/test/test.json.gz")]
    jobs = [KinetoImporter().read([p]) for p in paths]
    names = [
        tuple(f"{p.name}#{t.rank}" for t in j.traces) for p, j in zip(paths, jobs, strict=True)
    ]
    s = samples_of_jobs(jobs, names)
    data = fit_data(s, V100)  # both are V100-SXM2 (32 and 16 GB)
    found = holdout_splits(data, s.shapes)
    assert found is not None and found[0] == "trace" and len(found[1]) == 9
    _assert_disjoint(data, found[1])


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "compute.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_loader(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[gpu."A100-SXM4-40GB"]\ngemm_eff_max = 0.5\nkernel_min_ns = 3000\n'
        '[gpu."A100-SXM4-40GB".fit]\nops = 10\n'
        '[gpu."H100-SXM5-80GB"]\nmem_eff_max = 0.6\ngemm_shape_model = 1\n',
    )
    a40 = compute_params_from_doc(read_toml_doc(path), gpu_preset("A100-40GB"))
    # A calibrated file is in the FLOP form: GEMM shapes and the measured attention kernels
    # are off unless the file says on.
    assert a40 == compute_params_for(gpu_preset("A100")).with_overrides(
        {"gemm_eff_max": 0.5, "kernel_min_ns": 3000, "gemm_shape_model": 0, "attn_kernel_model": 0}
    )
    assert compute_params_from_doc(read_toml_doc(path), gpu_preset("H100")).gemm_shape_model == 1.0
    # Another A100 falls back to the family's table; H100 gets its own.
    assert compute_params_from_doc(read_toml_doc(path), A100).gemm_eff_max == 0.5
    h100 = compute_params_from_doc(read_toml_doc(path), gpu_preset("H100"))
    assert (
        h100.mem_eff_max == 0.6
        and h100.gemm_eff_max == compute_params_for(gpu_preset("H100")).gemm_eff_max
    )
    with pytest.raises(ConfigError, match="no parameters for V100-SXM2-32GB"):
        compute_params_from_doc(read_toml_doc(path), V100)


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("gpu = 3\n", InputError, "no \\[gpu"),
        ("[gpu\n", ConfigError, "invalid TOML"),
        ('[gpu."V100-SXM2-32GB"]\ngemm_eff = 0.5\n', ConfigError, "unknown compute parameter"),
        ('[gpu."V100-SXM2-32GB"]\ngemm_eff_max = "fast"\n', ConfigError, "needs a number"),
    ],
)
def test_loader_errors(tmp_path: Path, text: str, error: type[Exception], message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(error, match=message) as info:
        compute_params_from_doc(read_toml_doc(path), V100)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(InputError, match="cannot read"):
        compute_params_from_doc(read_toml_doc(tmp_path / "absent.toml"), V100)
