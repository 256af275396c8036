"""``echo-view calibrate compute`` end to end, and ``simulate CONFIG --compute FILE``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from echo_view.cli import main
from echo_view.model.toml_file import read_toml_doc
from echo_view.sim.cluster import gpu_preset
from echo_view.sim.compute_presets import compute_params_for, compute_params_from_doc
from tests.conftest import SAMPLES

DLRM = SAMPLES / "dlrm_kineto"
SAMPLED = SAMPLES / "hta_sampled_128"
CONFIG = SAMPLES / "configs" / "validation" / "korthikanti-22b-full.toml"  # A100-SXM4-80GB


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    output = "calibrate-compute" if argv[0] == "calibrate" else "simulate-config"  # CONFIG
    assert out["schema"] == f"echo-view.{output}/1"
    return out


def test_calibrate_dlrm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "compute.toml"
    report = _json(capsys, ["calibrate", "compute", str(DLRM), "-o", str(out), "--json"])
    gpus = report["gpus"]
    assert isinstance(gpus, dict) and list(gpus) == ["V100-SXM2-32GB"]
    v100 = gpus["V100-SXM2-32GB"]
    assert len(v100["traces"]) == 8 and v100["class_shapes"]["gemm"] >= 3
    assert set(v100["fitted"]) == {
        "gemm_eff_max", "gemm_half_flops", "mem_eff_max", "mem_half_bytes", "kernel_min_ns"
    }  # fmt: skip
    hold = v100["holdout"]
    assert hold["split"] == "shape" and hold["fitted"]["ops"] == v100["ops"]
    assert hold["fitted"]["median_abs"] < hold["default"]["median_abs"]
    # The file holds the fitted values, which the loader applies over the V100 defaults.
    doc = tomllib.loads(out.read_text(encoding="utf-8"))
    table = doc["gpu"]["V100-SXM2-32GB"]
    assert table["fit"]["holdout_split"] == "shape"
    assert "kernel_gap_ns" not in table and "attn_eff_max" not in table
    v100_spec = gpu_preset("V100")
    params = compute_params_from_doc(read_toml_doc(out), v100_spec)
    for name, value in v100["params"].items():
        assert getattr(params, name) == pytest.approx(value, rel=1e-5)
    assert params.kernel_gap_ns == compute_params_for(v100_spec).kernel_gap_ns
    assert not list(tmp_path.glob(".compute.toml.*"))  # written atomically, no leftovers


def test_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.toml"
    argv = ["calibrate", "compute", str(SAMPLED), "--gpu", "A100-SXM4-80GB", "-o", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "A100-SXM4-80GB" in text and "held out" in text and f"wrote {out}" in text
    assert "gemm_eff_max=" in text


def test_simulate_with_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The file's parameters replace the GPU's defaults; --set still overrides them."""
    out = tmp_path / "a100.toml"
    argv = ["calibrate", "compute", str(SAMPLED), "--gpu", "A100-SXM4-80GB", "-o", str(out)]
    fitted = _json(capsys, [*argv, "--json"])["gpus"]["A100-SXM4-80GB"]["params"]  # type: ignore[index]
    sim = ["simulate", str(CONFIG), "--json"]
    base = _json(capsys, sim)["step_time_s"]
    with_file = _json(capsys, [*sim, "--compute", str(out)])["step_time_s"]
    sets = [a for k, v in fitted.items() for a in ("--set", f"compute.{k}={v!r}")]
    assert with_file != base
    assert _json(capsys, [*sim, *sets])["step_time_s"] == pytest.approx(with_file, rel=1e-6)
    # --set after the file wins: setting every fitted value back to the default restores it.
    defaults = compute_params_for(gpu_preset("A100-SXM4-80GB"))
    back = [a for k in fitted for a in ("--set", f"compute.{k}={getattr(defaults, k)!r}")]
    restored = _json(capsys, [*sim, "--compute", str(out), *back])["step_time_s"]
    assert restored == pytest.approx(base, rel=1e-9)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [str(SAMPLES / "hta_nccl" / "nccl_data.json.gz")],
            "the traces need record_shapes=True",
        ),
        ([str(SAMPLED)], "no trace names a GPU this version has a preset for"),
        ([str(DLRM), "--gpu", "Z100"], "error: --gpu: unknown GPU preset 'Z100'"),
    ],
)
def test_errors(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.toml"
    assert main(["calibrate", "compute", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_output_must_be_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "compute", str(DLRM), "-o", str(tmp_path / "c.json")]) == 2
    assert ".toml" in capsys.readouterr().err


def test_simulate_compute_file_without_the_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v100.toml"
    assert main(["calibrate", "compute", str(DLRM), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(CONFIG), "--compute", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no parameters for A100-SXM4-80GB" in err and "V100-SXM2-32GB" in err
