"""``echo-view comm`` and ``echo-view calibrate comm`` end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from echo_view.cli import main
from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import NcclModel, comm_model_from_toml
from tests.conftest import SAMPLES

ECHO_LOGS = SAMPLES / "echo_nccl_tests"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert main([*argv, "--json"]) == 0
    out: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    command = argv[0] if argv[0] == "comm" else f"{argv[0]}-{argv[1]}"
    assert out["schema"] == f"echo-view.{command}/1"
    return out


def test_comm_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "comm", "all_reduce", "--bytes", "64MiB", "--ranks", "16",
        "--gpu", "A100-SXM4-40GB", "--nic-gbytes-per-s", "25",
    )  # fmt: skip
    assert out["collective"] == "all_reduce" and out["bytes"] == 64 << 20
    assert (out["ranks"], out["nodes"]) == (16, 2)
    assert out["time_us"] > 0 and out["algorithm"] in ("RING", "TREE")
    assert out["protocol"] in ("LL", "LL128", "SIMPLE") and out["channels"] >= 1
    algbw, busbw = out["algbw_gbytes_per_s"], out["busbw_gbytes_per_s"]
    assert algbw == pytest.approx((64 << 20) / out["time_us"] / 1e3, rel=1e-6)
    assert busbw == pytest.approx(algbw * 2 * 15 / 16)
    assert out["cluster"]["nic_gbytes_per_s"] == 25 and out["cluster"]["nodes"] == 2
    sweep = run_json(capsys, "comm", "all_gather", "--bytes", "1KiB:1MiB", "--ranks", "8")
    assert [r["bytes"] for r in sweep["results"]] == [1 << (10 + i) for i in range(11)]
    spread = run_json(
        capsys, "comm", "all_reduce", "--bytes", "1GiB", "--ranks", "4", "--ranks-per-node", "1"
    )
    packed = run_json(capsys, "comm", "all_reduce", "--bytes", "1GiB", "--ranks", "4")
    assert spread["nodes"] == 4 and packed["nodes"] == 1
    assert spread["time_us"] > packed["time_us"]


def test_comm_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["comm", "broadcast", "--bytes", "1MiB,1GiB", "--ranks", "8", "--gpu", "H100"]) == 0
    text = capsys.readouterr().out
    assert "broadcast over 8 ranks" in text and "H100-SXM5-80GB" in text
    assert "1 MiB" in text and "1 GiB" in text and "RING" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["comm", "all_mix", "--bytes", "1", "--ranks", "2"], "unknown collective"),
        # The name came from the command line: the error names --gpu, not a config key.
        (
            ["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--gpu", "Z1"],
            "error: --gpu: unknown GPU preset 'Z1' (known presets:",
        ),
        (["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--set", "nic=1"], "known keys"),
        (["comm", "all_reduce", "--bytes", "1", "--ranks", "0"], "between 1 and 1,000,000"),
        (["comm", "all_reduce", "--bytes", "1", "--ranks", "9" * 20], "--ranks must be between"),
        (
            ["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--ranks-per-node", "9"],
            "between",
        ),
        # A config's bounds (1,024 GPUs a node): 99,999,999 ran before. The flag is named
        # (the error named the config key), and the key when --set gave it.
        (
            ["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--gpus-per-node", "99999999"],
            "error: --gpus-per-node must be a number from 1 to 1024 GPUs, got '99999999'",
        ),
        (
            ["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--nic-gbytes-per-s", "0"],
            "error: --nic-gbytes-per-s must be a number from 0.001 to 1e+09 GB/s, got 0.0",
        ),
        (
            ["comm", "all_reduce", "--bytes", "1", "--ranks", "2", "--set", "gpus_per_node=0"],
            "cluster.gpus_per_node: cluster key 'gpus_per_node' must be a number from 1 to 1024",
        ),
        (
            [
                "comm",
                "all_reduce",
                "--bytes",
                "1",
                "--ranks",
                "2",
                "--set",
                "cpu=amd",
                "--set",
                "cluster.cpu=intel",
            ],
            "--set cpu is given twice: 'amd' and 'intel'",
        ),
        # Timed as a 1 GiB all-reduce, though a barrier moves one element.
        (["comm", "barrier", "--bytes", "4,1GiB", "--ranks", "8"], "--bytes: a barrier moves"),
    ],
)
def test_comm_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("echo-view: error:") and message in err and err.count("\n") == 1


def test_calibrate_warns_of_rows_faster_than_the_hardware(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A row 1,000x too fast (busbw 1 GiB x 2 x 7/8 / 8.1 µs = 231,981 GB/s over 300 GB/s
    # NVLink) was fitted without a word; the real log draws no warning.
    real = SAMPLES / "echo_nccl_tests" / "nccl_8.log"
    assert main(["calibrate", "comm", str(real), "-o", str(tmp_path / "a.toml")]) == 0
    assert "warning" not in capsys.readouterr().err
    fast = tmp_path / "nccl_8.log"
    text = real.read_text()
    fast.write_text(text.replace("  8139.2  131.92  230.86", "     8.1  131.92  230.86"))
    assert main(["calibrate", "comm", str(fast), "-o", str(tmp_path / "b.toml")]) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warning == [
        "echo-view: warning: nccl_8.log: 1 row(s) move data faster than twice the "
        "A100-SXM4-40GB's 300 GB/s links (first at line 43: busbw 231,981 GB/s); check --gpu "
        "and the log"
    ]


def test_calibrate_warns_of_more_constants_than_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A one-row log "fitted" its constants at 0.0% error without a word.
    real = (SAMPLES / "echo_nccl_tests" / "nccl_8.log").read_text().splitlines(keepends=True)
    rows = [i for i, line in enumerate(real) if line.strip()[:1].isdigit()]
    one = tmp_path / "nccl_8.log"
    one.write_text("".join(line for i, line in enumerate(real) if i not in rows[1:]))
    argv = ["calibrate", "comm", str(one), "-o", str(tmp_path / "a.toml")]
    assert main([*argv, "--collective", "all_reduce"]) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "constant(s) fitted to 1 row(s)" in warning[0]


def test_calibrate_then_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = [str(SAMPLES / "echo_nccl_tests" / f"nccl_{n}.log") for n in (8, 16, 32)]
    out = tmp_path / "comm.toml"
    report = run_json(
        capsys, "calibrate", "comm", *logs, "-o", str(out), "--set", "cpu=amd", "--holdout"
    )
    assert set(report["fit"]) == {"nccl_8.log", "nccl_16.log", "nccl_32.log"}
    for name, stats in report["fit"].items():
        assert stats["mae_ge_1mib"] < 0.10, name
        assert report["holdout"][name]["mae_ge_1mib"] < 0.15, name
    model = comm_model_from_toml(out.read_text(), str(out))
    assert isinstance(model, NcclModel)
    assert model.params.flat()["net_eff"] == pytest.approx(report["params"]["net_eff"], rel=1e-5)
    assert "nccl_16.log" in out.read_text()  # [fit] table records the logs
    # The calibrated constants change the answer of `comm`.
    args = ["comm", "all_reduce", "--bytes", "1GiB", "--ranks", "16", "--gpu", "A100-SXM4-40GB"]
    default = run_json(capsys, *args)  # the shipped constants, calibrated on all the logs
    calibrated = run_json(capsys, *args, "--model", str(out))
    cluster = make_cluster("A100-SXM4-40GB", gpus_per_node=8, nodes=2)
    uncalibrated_us = (
        NcclModel().collective_time_ns(CollectiveKind.ALL_REDUCE, 1 << 30, range(16), cluster) / 1e3
    )
    assert calibrated["time_us"] > 1.2 * uncalibrated_us  # 64 % NIC efficiency, not 96 %
    assert default["time_us"] == pytest.approx(calibrated["time_us"], rel=0.1)
    assert calibrated["model"].startswith("calibrated on nccl_8.log")
    # The alpha-beta baseline writes a file `comm --model` reads as well.
    ab = tmp_path / "ab.toml"
    assert main(["calibrate", "comm", logs[0], "-o", str(ab), "--model", "alphabeta"]) == 0
    capsys.readouterr()
    assert run_json(capsys, *args, "--model", str(ab))["algorithm"] == "alpha_beta"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Read as the defaults and labelled "calibrated (empty.toml)".
        ("", "the file holds no model"),
        # Accepted: 38,187 GB/s over a 300 GB/s NVLink.
        ("[bandwidth]\nnvlink_eff = 5.0\n", "bandwidth.nvlink_eff: comm parameter 'nvlink_eff'"),
        ("[bandwidth]\nprotocol_eff = { LL = 0.5, LL128 = 0.9, SIMPLE = 1.5 }\n", "to 1, got"),
    ],
)
def test_model_files_that_are_no_model(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text)
    assert main(["comm", "send_recv", "--bytes", "1GiB", "--ranks", "2", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_calibrate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sample = Path(__file__).parents[1] / "importers" / "nccl_tests_data" / "all_gather_2ranks.log"
    assert main(["calibrate", "comm", str(sample), "-o", str(tmp_path / "x.json")]) == 2
    assert "must be a .toml" in capsys.readouterr().err
    bad = tmp_path / "bad.log"
    bad.write_text(sample.read_text().replace("21.00    0.20", "21.00    oops"))
    assert main(["calibrate", "comm", str(bad), "-o", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert "bad.log: line 15:" in err
    odd = tmp_path / "odd.log"
    odd.write_text(sample.read_text().replace("NVIDIA H100 80GB HBM3", "Mystery GPU 9000"))
    assert main(["calibrate", "comm", str(odd), "-o", str(tmp_path / "c.toml")]) == 2
    assert "--gpu" in capsys.readouterr().err
    assert main(["calibrate", "comm", str(odd), "-o", str(tmp_path / "c.toml"), "--gpu", "Z1"]) == 2
    assert "error: --gpu: unknown GPU preset 'Z1'" in capsys.readouterr().err
    assert not (tmp_path / "c.toml").exists()  # nothing half-written
    # With the GPU named, the same log calibrates.
    copy = tmp_path / "all_gather_perf.log"
    shutil.copy(odd, copy)
    target = tmp_path / "c.toml"
    assert main(["calibrate", "comm", str(copy), "-o", str(target), "--gpu", "H100"]) == 0
    assert "[latency_us]" in target.read_text()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--set", "gpus_per_node=1.5"], "--set gpus_per_node: cluster key 'gpus_per_node' must"),
        (["--set", "gpus_per_node=abc"], "'gpus_per_node' needs a number, got 'abc'"),
        (["--set", "gpus_per_node="], "'gpus_per_node' needs a number, got ''"),
        (["--gpus-per-node", "0"], "--gpus-per-node: cluster key 'gpus_per_node' must be"),
        (["--set", "nodes=abc"], "--set nodes: cluster key 'nodes' needs a number"),
        (["--set", "nodes=3"], "--set nodes=3: the log ran on 1 host(s)"),
    ],
)
def test_calibrate_refuses_cluster_sizes_it_cannot_use(
    option: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1.5 was a traceback (int("1.5")); 0, an empty value and nodes were silently ignored.
    log = ECHO_LOGS / "nccl_8.log"
    out = tmp_path / "c.toml"
    assert main(["calibrate", "comm", str(log), "-o", str(out), *option]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_calibrate_bounds_the_rows_it_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fit costs time per row and ``--holdout`` one fit per log, so both are bounded: past
    the bound one line says what to give instead, and no output is written."""
    from echo_view.cli import calibrate

    logs = [str(ECHO_LOGS / "nccl_8.log"), str(ECHO_LOGS / "nccl_4.log")]  # 28 rows each
    out = tmp_path / "c.toml"
    monkeypatch.setattr(calibrate, "MAX_FIT_ROWS", 50)
    assert main(["calibrate", "comm", *logs, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the logs hold 56 timed rows, more than the 50 one fit takes" in err
    assert err.count("\n") == 1 and not out.exists()
    monkeypatch.setattr(calibrate, "MAX_FIT_ROWS", 56)
    monkeypatch.setattr(calibrate, "MAX_HOLDOUT_ROW_FITS", 111)  # 2 logs x 56 rows = 112
    assert main(["calibrate", "comm", *logs, "-o", str(out), "--holdout"]) == 2
    assert "--holdout refits once per log: 2 fits of up to 56 rows" in capsys.readouterr().err
    assert not out.exists()
    assert main(["calibrate", "comm", *logs, "-o", str(out)]) == 0
    assert out.exists()
