"""``import echo_view as ev`` on the samples: the DataFrames hold the numbers the command line
prints (``info --json``, ``simulate --json``, ``diff --json``), and errors are one line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import echo_view as ev
from echo_view.cli import main
from echo_view.errors import EchoViewError, InputError, UsageError

pd = pytest.importorskip("pandas", reason="the API's DataFrames need the analysis extra (pandas)")

ROOT = Path(__file__).resolve().parents[2]
DLRM = ROOT / "samples" / "dlrm_kineto"
NSYS = ROOT / "samples" / "nsys" / "h100_2gpu_1s.sqlite.gz"
GPT = ROOT / "samples" / "configs" / "gpt175b-1024xH100.toml"
CATEGORIES = ["compute_ns", "comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"]


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def dlrm() -> ev.Job:
    return ev.load(DLRM)


def test_import_loads_nothing_heavy() -> None:
    code = (
        "import sys, echo_view; "
        "print(sorted(m for m in ('numpy', 'pandas', 'textual', 'torch', 'rich') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", [DLRM, NSYS], ids=["kineto", "nsys"])
def test_frames_hold_info_numbers(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = ev.load(path)
    info = cli_json(capsys, "info", str(path), "--json", "--top", "1000")
    assert len(job.events()) == info["job"]["events"]
    assert list(job.ranks) == info["job"]["ranks"]

    kernels = job.kernels()
    by_name = kernels[kernels["kind"] == "kernel"].groupby("name")
    for k in info["top_kernels"]:
        assert by_name["dur_ns"].sum()[k["name"]] == k["total_ns"]
        assert by_name.size()[k["name"]] == k["count"]
        assert by_name["rank"].nunique()[k["name"]] == k["ranks"]

    colls = job.collectives()
    assert colls.groupby("collective").size().to_dict() == info["job"]["collectives"]["by_kind"]
    for c in info["top_collectives"]:
        mine = colls[colls["collective"] == c["kind"]]
        assert mine["gpu_dur_ns"].sum() == c["total_ns"]
        assert (-1 if (mine["bytes"] < 0).any() else mine["bytes"].sum()) == c["bytes"]

    steps = ev.summary(job)
    assert len(steps) == sum(len(r["per_step"]) for r in info["ranks"])
    per_rank = ev.summary(job, per="rank")
    assert per_rank.to_dict("records") == [
        {k: v for k, v in r.items() if k not in ("per_step", "total")} for r in info["ranks"]
    ]
    means = steps.groupby(["rank", "device"])[["step_ns", *CATEGORIES]].mean()
    for r in info["ranks"]:
        row = means.loc[(r["rank"], r["device"])]
        for col in ["step_ns", *CATEGORIES]:
            assert round(row[col]) == r[col], (r["rank"], col)


def test_columns_follow_hta_names(dlrm: ev.Job) -> None:
    events = dlrm.events()
    for col in ("index", "ts", "dur", "end", "name", "cat", "pid", "tid", "stream"):
        assert col in events.columns
    for col in ("correlation", "external_id", "iteration", "rank"):
        assert col in events.columns
    assert events["ts"].min() == 0.0  # the job's first event, as HTA aligns ranks
    assert (events["dur"] * 1000 == events["dur_ns"]).all()
    gpu = events[events["kind"] == "kernel"]
    assert (gpu["stream"] >= 0).all()
    assert (events.loc[events["kind"] == "cpu_op", "stream"] == -1).all()
    # DLRM has one ProfilerStep#10 per rank: GPU work it launched belongs to it.
    assert set(gpu["iteration"]) <= {10, -1}
    assert (gpu["iteration"] == 10).mean() > 0.9
    assert set(dlrm.kernels()["kernel_type"]) == {"COMPUTATION", "COMMUNICATION", "MEMORY"}


def test_simulate_matches_the_cli(dlrm: ev.Job, capsys: pytest.CaptureFixture[str]) -> None:
    knobs = {"compute.scale.all": 0.5}
    out = cli_json(capsys, "simulate", str(DLRM), "--set", "compute.scale.all=0.5", "--json")
    result = ev.simulate(dlrm, knobs)
    assert result.step_time_s == out["step_time_s"]
    assert result.measured_step_time_s == out["measured_step_time_s"]
    frame = result.frame()
    assert frame["step_time_s"].tolist() == [r["step_time_s"] for r in out["ranks"]]
    assert result.job.predicted and result.job.ranks == dlrm.ranks

    cfg = cli_json(capsys, "simulate", str(GPT), "--json")
    gpt = ev.simulate(GPT)
    assert gpt.step_time_s == cfg["step_time_s"]
    assert gpt.frame()["step_time_s"].tolist() == [s["step_time_s"] for s in cfg["stages"]]


def test_diff_matches_the_cli(
    dlrm: ev.Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    predicted = tmp_path / "faster.json.gz"
    argv = ["simulate", str(DLRM), "--set", "compute.scale.all=0.5", "-o", str(predicted)]
    assert main(argv) == 0
    capsys.readouterr()
    out = cli_json(capsys, "diff", str(DLRM), str(predicted), "--json")
    d = ev.diff(DLRM, predicted)
    assert d.to_json() == out
    assert d.ranks["b_ns"].tolist() == [r["step"]["b_ns"] for r in out["ranks"]]
    assert d.ranks["error_pct"].tolist() == [r["step"]["error_pct"] for r in out["ranks"]]
    cats = d.categories.set_index("category")
    for name, pair in out["categories"].items():
        assert cats.loc[name, "delta_ns"] == pair["delta_ns"]
    assert d.kernels["name"].tolist() == [k["name"] for k in out["kernels"]]
    assert d.collectives["delta_ns"].tolist() == [c["delta_ns"] for c in out["collectives"]]
    assert d.verdict == out["verdict"]["text"]


def test_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="simulate"):
        ev.load(GPT)
    with pytest.raises(EchoViewError, match="no such file"):
        ev.load(tmp_path / "absent.json")
    with pytest.raises(EchoViewError, match=r"unknown knob 'compute\.scale\.gem'"):
        ev.simulate(DLRM, {"compute.scale.gem": 0.5})
    with pytest.raises(UsageError, match="workload configs"):
        ev.simulate(DLRM, ranks="all")


def test_dataframes_without_pandas_name_the_extra(
    dlrm: ev.Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(UsageError) as err:
        dlrm.events()
    assert "pip install 'echo-view[analysis]'" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(
    importlib.util.find_spec("hta") is not None, reason="HTA is installed here (tests/api/test_hta)"
)
def test_the_hta_adapter_without_hta_names_the_extra(dlrm: ev.Job) -> None:
    with pytest.raises(UsageError, match=r"pip install 'echo-view\[hta\]'"):
        dlrm.to_hta()


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ("", "not a file or directory name: ''"),  # the current directory, read as a job
        ([""], "not a file or directory name: ''"),
        (None, "expected a path or a list of paths, got NoneType"),
        (b"trace.json", "expected a path or a list of paths, got bytes"),  # iterated as ints
        ([None], "not a file or directory name: None"),
    ],
)
def test_load_refuses_what_names_no_file(paths: Any, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        ev.load(paths)


class _BytesPath(os.PathLike[bytes]):
    def __fspath__(self) -> bytes:
        return b"/tmp"


def test_simulate_refuses_arguments_of_the_wrong_kind() -> None:
    # An AttributeError ('int' object has no attribute 'items') or a TypeError from pathlib.
    config = Path(__file__).resolve().parents[2] / "samples/configs/megatron-ci-small/tp2-pp2.toml"
    for overrides in (5, "compute.scale.all=0.5", ["a"]):
        with pytest.raises(UsageError, match="overrides must be a mapping of knob to value"):
            ev.simulate(config, overrides)  # type: ignore[arg-type]
    for compute in (5, b"x.toml", ""):
        with pytest.raises(UsageError, match="compute must name a calibration file"):
            ev.simulate(config, compute=compute)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not a file or directory name"):
        ev.load(_BytesPath())  # type: ignore[arg-type]
    # comm= on a config was ignored, whatever its value.
    for comm, says in (("model", "comm applies to a measured job's replay"), ("x", "got 'x'")):
        with pytest.raises(UsageError, match=says):
            ev.simulate(config, comm=comm)
    # AttributeError: 'str' object has no attribute 'importer_for'.
    with pytest.raises(UsageError, match="registry must be a Registry, got str"):
        ev.load(config, registry="x")  # type: ignore[arg-type]
    # OSError (File name too long) from pathlib's is_file() for one path without .toml.
    for call in (ev.load, ev.summary, ev.simulate):
        with pytest.raises(InputError, match="the name is too long for the file system"):
            call("a" * 300)
