"""``echo-view interference``, ``echo-view calibrate interference`` and ``--set interference``
of ``echo-view simulate``, on the samples."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from echo_view.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
DLRM = str(SAMPLES / "dlrm_kineto")
HTA = str(SAMPLES / "hta_nccl" / "nccl_data.json.gz")
SAMPLED = str(SAMPLES / "hta_sampled_128")


def test_interference_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["interference", DLRM, HTA, "--json", "--holdout", "trace"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "echo-view.interference/1"
    assert rep["inputs"] == sorted([DLRM, HTA])
    assert len(rep["traces"]) == 9 and rep["samples"] == sum(t["samples"] for t in rep["traces"])
    rows = {c["class"]: c for c in rep["classes"]}
    assert sum(c["samples"] for c in rows.values()) == rep["samples"]
    for c in rows.values():
        if c["samples"]:
            assert c["median_slowdown"] > 0 and c["p90_slowdown"] >= c["median_slowdown"]
            assert 0 < c["median_overlap_fraction"] <= 1 and c["constant_factor"] >= 1
            assert sum(c["comm_kinds"].values()) == c["samples"]
    h = rep["holdout"]
    assert h["split"] == "trace"
    assert h["none"]["samples"] == h["constant"]["samples"] == h["fitted"]["samples"] > 0


def test_interference_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["interference", DLRM]) == 0
    out = capsys.readouterr().out
    assert "elementwise" in out and "overlapped kernels with a solo reference" in out


def test_calibrate_then_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "interference.toml"
    assert main(["calibrate", "interference", HTA, SAMPLED, "-o", str(model), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "echo-view.calibrate-interference/1"
    assert rep["chosen"] in ("constant", "fitted") and rep["holdout"]["split"] == "job"
    doc = tomllib.loads(model.read_text())
    assert doc["kind"] == rep["chosen"] and set(doc["evaluation"]["job"]) >= {"constant", "fitted"}
    assert main(["simulate", DLRM, "--set", f"interference={model}", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["interference"]["kind"] == rep["chosen"]
    assert main(["simulate", DLRM, "--set", "interference=off", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["interference"] is None
    assert main(["simulate", DLRM, "--json"]) == 0
    on = json.loads(capsys.readouterr().out)["interference"]
    assert on["kind"] == "constant" and on["source"].startswith("published (volta)")


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", DLRM, "--set", "interference=sometimes"]) != 0
    assert (
        "interference must be on, off or a model file, got 'sometimes'" in capsys.readouterr().err
    )
    missing = tmp_path / "gone.toml"
    assert main(["simulate", DLRM, "--set", f"interference={missing}"]) == 2
    assert f"--set interference: no such model file: '{missing}'" in capsys.readouterr().err
    assert main(["calibrate", "interference", DLRM, "-o", str(tmp_path / "m.json")]) != 0
    assert ".toml" in capsys.readouterr().err


def test_a_rank_file_of_two_inputs_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its kernels were counted twice (16 samples -> 24), and a held-out split by job fitted
    # and tested on the same kernels.
    rank0 = sorted(Path(DLRM).iterdir())[0]
    link = tmp_path / "rank0.json.gz"
    link.symlink_to(rank0)
    for extra in (rank0, link):
        assert main(["interference", DLRM, str(extra)]) == 2
        err = capsys.readouterr().err
        assert f"{extra} is given twice: it is also read as part of {DLRM}" in err
    assert main(["info", DLRM, str(rank0)]) == 2
    assert "the rank file is given twice" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--holdout", "--split"])
def test_calibrate_names_its_split_holdout_like_interference(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.toml"
    assert main(["calibrate", "interference", HTA, SAMPLED, "-o", str(out), option, "trace"]) == 0
    err = capsys.readouterr().err
    warning = "echo-view: warning: --split is deprecated: use --holdout\n"
    assert (warning in err) == (option == "--split")
    assert "trace" in tomllib.loads(out.read_text())["evaluation"]


def test_calibrate_on_one_step_of_one_job_holds_out_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DLRM is one job of one step: split by step (the default for one job), nothing was held
    out, every model read "0 kernels", and the constant model was written "because the
    fitted one did not beat it". The ranks are the split; the model file reads back."""
    from echo_view.model.toml_file import read_toml_doc
    from echo_view.sim.interference import model_from_doc

    out = tmp_path / "m.toml"
    dlrm = str(SAMPLES / "dlrm_kineto")
    assert main(["calibrate", "interference", dlrm, "-o", str(out)]) == 0
    assert "held-out duration error (split by trace)" in capsys.readouterr().out
    model = model_from_doc(read_toml_doc(out))
    assert model.fit.kind == "fitted"
    for split in ("job", "step"):
        for argv in (["calibrate", "interference", dlrm, "-o", str(out)], ["interference", dlrm]):
            assert main([*argv, "--holdout", split]) == 2
            err = capsys.readouterr().err
            assert f"--holdout {split}: the overlapped kernels come from one " in err


def test_ranks_measured_where_read_report_what_the_whole_jobs_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank is measured where its file is read (the job's events never held at once):
    the report is byte for byte that of measuring the jobs read whole."""
    from echo_view.cli.interference import load_samples, report
    from echo_view.formats import json_text
    from echo_view.loading import SERIAL, build_registry, read_job
    from echo_view.sim.compute import classify_kernel
    from echo_view.sim.interference.measure import OverlapSamples, measure
    from tests.cli.many_ranks import many_ranks

    paths = [Path(DLRM), many_ranks(tmp_path / "many", 12), Path(HTA)]
    whole = OverlapSamples.concat([measure(read_job([p]), classify_kernel, str(p)) for p in paths])

    def no_whole_job(*args: object, **kwargs: object) -> None:
        raise AssertionError("a whole job was read")

    monkeypatch.setattr("echo_view.loading.read_job", no_whole_job)
    apart = load_samples(paths, build_registry(), SERIAL)
    assert len(apart) == len(whole) > 0 and len(apart.sources) == 8 + 12 + 1
    for split in (None, "job"):
        assert json_text(report(apart, split)) == json_text(report(whole, split))
