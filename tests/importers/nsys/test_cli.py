"""Every ``echo-view`` command that reads traces accepts an Nsight Systems export."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from echo_view.cli import main
from echo_view.formats import Progress
from echo_view.loading import build_registry
from echo_view.model import EventKind, Job
from importers.nsys import NsysImporter
from tests.importers.nsys.helpers import sample, unpacked

BEFORE, AFTER = str(sample("mfu_2gpu_before")), str(sample("mfu_2gpu_after"))


def _json_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_registry_picks_the_nsys_importer(tmp_path: Path) -> None:
    reg = build_registry()
    assert reg.importer_for(sample("h100_2gpu_1s")).name == "nsys"
    assert reg.importer_for(unpacked("h100_2gpu_1s", tmp_path)).name == "nsys"


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(_json_out(capsys, ["info", "--json", BEFORE]))
    assert '"send_recv"' in text
    assert main(["info", BEFORE]) == 0
    out = capsys.readouterr().out
    assert "ranks 0, 1" in out and "send_recv 66" in out
    # The samples directory: three runs, not one job of six ranks.
    assert main(["info", str(Path(BEFORE).parent)]) == 0
    out = capsys.readouterr().out
    assert "ranks 0-5 (6 from captures of different runs)" in out
    assert "clock alignment: separate-runs" in out


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_export(tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"trace{suffix}"
    assert main(["export", BEFORE, "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    if suffix == ".json":
        events = json.loads(out.read_text())["traceEvents"]
        names = {e.get("name") for e in events}
        assert "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)" in names
        assert "cudaLaunchKernel" in names and "aten::copy_" in names
        # The export passes the validator (warnings only: launches cut by the capture window).
        capsys.readouterr()
        assert main(["check", str(out)]) == 0


def test_simulate_replay_matches_the_measured_window(capsys: pytest.CaptureFixture[str]) -> None:
    replay = _json_out(capsys, ["simulate", "--json", BEFORE])
    measured = _json_out(capsys, ["info", "--json", BEFORE])
    ranks, truth = replay["ranks"], measured["ranks"]
    assert isinstance(ranks, list) and isinstance(truth, list) and len(ranks) == len(truth) == 2
    for got, want in zip(ranks, truth, strict=True):
        assert got["rank"] == want["rank"]
        assert abs(got["error_pct"]) < 2.0
        # GPU busy time per device (compute + exposed communication + copies/sets) of the
        # replay against the measured window's, with the same definitions.
        busy = (got["compute_s"] + got["exposed_comm_s"] + got["memory_s"]) * 1e9
        want_busy = want["compute_ns"] + want["exposed_comm_ns"] + want["memory_ns"]
        assert abs(busy - want_busy) <= 0.02 * want_busy


def test_no_replay_of_captures_of_different_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # Their collectives were matched across the runs: "collective send_recv (group ranks
    # [0..5], seq 0) never completes: rank(s) 0, 1 never arrive".
    assert main(["simulate", str(Path(BEFORE).parent)]) == 2  # samples/nsys: three runs
    err = capsys.readouterr().err
    assert "a replay needs the ranks of one run, and these files are captures of different" in err
    assert "(replay one run's files at a time)" in err and len(err.strip().splitlines()) == 1


def test_diff(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", BEFORE, AFTER]) == 0
    assert "Step time per rank" in capsys.readouterr().out


def test_tui_loads_an_export() -> None:
    from tests.tui.appkit import run_app

    reg = build_registry()

    def load(path: Path, progress: Progress) -> Job:
        return reg.importer_for(path).read([path], progress)

    async def body(app: object, pilot: object) -> None:
        return None

    app = run_app([Path(BEFORE)], body, loader=load)
    assert app.error is None
    assert app.loaded is not None


def test_processes_sharing_a_gpu_keep_their_launches_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # CUPTI numbers correlation ids per process. With both processes of the sample on GPU 0
    # (one rank), 11 ids occur in both: matched on the id alone, a launch met the other
    # process's kernel and the replay refused the job ("the dependencies form a cycle").
    path = unpacked("h100_2gpu_1s", tmp_path)
    con = sqlite3.connect(path)
    for table in ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION"):
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_{table} SET deviceId = 0")
    con.commit()
    con.close()
    replay = _json_out(capsys, ["simulate", "--json", str(path)])
    ranks = replay["ranks"]
    assert isinstance(ranks, list) and len(ranks) == 1
    assert abs(ranks[0]["error_pct"]) < 2.0
    t = NsysImporter().read([path]).traces[0]
    # The trace's correlation ids name one launch each (the TUI and the exporter match on them).
    ev = t.events
    launches = ev.correlation[(ev.kind == int(EventKind.RUNTIME)) & (ev.correlation >= 0)]
    assert len(launches) > 2000 and len(np.unique(launches)) == len(launches)
    assert (ev.correlation[t.flows.src] == ev.correlation[t.flows.dst]).all()
