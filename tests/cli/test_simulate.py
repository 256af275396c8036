"""``echo-view simulate``: JSON report, text report, export that passes ``check``, what-if knobs,
and one-line errors for unknown knobs, presets, malformed ``--set`` and unsupported inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo_view.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
DLRM = str(SAMPLES / "dlrm_kineto")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["simulate", *argv, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    assert out["schema"] == "echo-view.simulate/1"
    return out


def test_json_report_of_a_replay(capsys: pytest.CaptureFixture[str]) -> None:
    rep = _json(capsys, DLRM)
    assert rep["mode"] == "replay" and rep["comm"] == "measured"
    ranks = rep["ranks"]
    assert isinstance(ranks, list) and [r["rank"] for r in ranks] == list(range(8))
    for r in ranks:
        for key in ("step_time_s", "compute_s", "comm_s", "exposed_comm_s", "idle_s"):
            assert isinstance(r[key], float) and r[key] >= 0
        assert abs(r["error_pct"]) <= 2.0
    step = rep["step_time_s"]
    assert isinstance(step, float)
    assert step == max(r["step_time_s"] for r in ranks)
    assert abs(rep["error_pct"]) <= 2.0  # type: ignore[arg-type]
    assert rep["cluster"]["gpu"] == "V100-SXM2-32GB"  # type: ignore[index]
    bound = rep["step_bound"]
    assert isinstance(bound, dict) and bound["bound"] == "cpu-dispatch"
    assert bound["gpu_2x_gain"] < 0.01 < 0.2 < bound["cpu_2x_gain"]


def test_what_if_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    base = _json(capsys, DLRM, "--comm", "model")
    wide = _json(capsys, DLRM, "--comm", "model", "--set", "cluster.nic_gbytes_per_s=50")
    none = _json(capsys, DLRM, "--set", "comm.scale=0")
    fast = _json(capsys, DLRM, "--set", "compute.scale.all=0.5", "--set", "compute.scale.cpu=0.5")
    assert base["collectives"]["modelled"] == 8  # type: ignore[index]
    assert wide["cluster"]["nic_gbytes_per_s"] == 50  # type: ignore[index]
    assert wide["mode"] == "what-if"
    for other in (wide, none, fast):
        assert other["step_time_s"] <= base["step_time_s"] + 1e-9  # type: ignore[operator]
    assert fast["step_time_s"] < base["step_time_s"]  # type: ignore[operator]


def test_text_report_and_export_that_passes_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json.gz"
    assert main(["simulate", DLRM, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("replay of ") and "step time" in text and "measured" in text
    said = " ".join(text.split())
    assert "bound by CPU dispatch: 2x faster GPU work" in said
    assert "GPU-side knobs (compute.scale.<class>, comm.scale, cluster.*) cannot help" in said
    assert out.exists()
    assert main(["check", str(out)]) == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--set", "cluster.nic=1"], "unknown knob 'cluster.nic'"),
        (
            ["--set", "compute.scale.gem=0.5"],
            "did you mean 'compute.scale.gemm'? known keys: cluster.gpu",
        ),
        (["--set", "cluster.gpu=Z100"], "unknown GPU preset 'Z100'"),
        (["--set", "comm.scale"], "--set expects KEY=VALUE"),
        (["--set", "comm.scale=fast"], "expected a number"),
        (["--set", "compute.scale.all=-1"], "between 0 and 1000"),
        (["--set", "comm.scale=1e308"], "between 0 and 1000"),
        # The last value won, unreported.
        (["--set", "comm.scale=0.5", "--set", "comm.scale=2"], "comm.scale is given twice"),
        (["--set", "comm.scale=x", "--set", "comm.scale=y"], "comm.scale is given twice"),
        # Accepted, and the replay printed as a "what-if": they change modelled times only.
        (
            ["--set", "cluster.nic_gbytes_per_s=0.001"],
            "--set cluster.nic_gbytes_per_s: the cluster times the modelled collectives only",
        ),
        # Accepted, and the 8-rank job replayed on a 3-GPU cluster.
        (
            ["--set", "cluster.gpus_per_node=3", "--set", "cluster.nodes=1"],
            "--set cluster.nodes: 1 node(s) of 3 GPUs hold fewer GPUs than the job's 8 ranks",
        ),
    ],
)
def test_bad_knobs_are_one_line_errors(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", DLRM, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_bad_inputs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["simulate", DLRM, "-o", str(tmp_path / "out.txt")]) == 2
    assert not (tmp_path / "out.txt").exists()


def test_model_needs_a_known_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    sampled = str(SAMPLES / "hta_sampled_128")
    assert main(["simulate", sampled, "--comm", "model"]) == 2
    assert "cluster.gpu" in capsys.readouterr().err
    rep = _json(capsys, sampled, "--comm", "model", "--set", "cluster.gpu=A100-40GB")
    assert rep["cluster"]["nodes"] == 16  # type: ignore[index]
    assert rep["collectives"]["absent_ranks"] == 126  # type: ignore[index]


def test_a_gigabit_key_warns_in_one_line_naming_the_gigabyte_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", DLRM, "--comm", "model", "--set", "cluster.nvlink_gbps=600"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("echo-view: warning:")]
    assert warnings == [
        "echo-view: warning: cluster.nvlink_gbps is deprecated: use cluster.nvlink_gbytes_per_s "
        "in GB/s (600 Gb/s was read as 75 GB/s)"
    ]


def test_comm_model_says_why_collectives_are_not_modelled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nsys = str(SAMPLES / "nsys" / "mfu_2gpu_before.sqlite.gz")
    argv = ["--comm", "model", "--set", "cluster.gpu=H100"]
    colls = _json(capsys, nsys, *argv)["collectives"]
    assert colls["modelled"] == 0 and colls["measured"] == colls["total"] == 33  # type: ignore[index]
    why = colls["not_modelled_because"]  # type: ignore[index]
    assert why.startswith(
        "64 of 66 NCCL kernels in mfu_2gpu_before.sqlite.gz: its NCCL NVTX "
        "ranges (ncclRecv, ncclSend) carry no payload (NVTX_EVENTS.binaryData"
    )
    assert "2 of 66 NCCL kernels" in why
    assert main(["simulate", nsys, *argv]) == 0
    assert (
        "note: 33 collective(s) keep their measured time (the comm model needs the message "
        "size): 64 of 66" in capsys.readouterr().out
    )
    modelled = _json(capsys, DLRM, "--comm", "model")["collectives"]
    assert modelled["modelled"] == 8 and modelled["not_modelled_because"] is None  # type: ignore[index]
