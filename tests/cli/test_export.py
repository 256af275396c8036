"""``echo-view export`` through :func:`echo_view.cli.main`: format by suffix, several paths as
one job, the stderr summary, one-line errors; then the real 8-rank DLRM sample once the Kineto
importer is available."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import echo_view.cli as cli
import echo_view.loading as loading
from echo_view.formats import Progress, Registry, no_progress
from echo_view.model import EventKind, Job
from exporters.perfetto_json import PerfettoJsonExporter
from exporters.perfetto_proto import PerfettoProtoExporter
from tests.exporters.export_jobs import handmade_job, handmade_rank
from tests.exporters.perfetto_checks import json_slices, load_json, partial_overlaps, read_pftrace

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


class HandmadeImporter:
    """Any ``*.handmade`` file reads as the hand-made job (rank from the file name if given)."""

    name = "handmade"

    def __init__(self) -> None:
        self.calls: list[list[Path]] = []

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".handmade"

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        self.calls.append(list(paths))
        return handmade_job()


class TextImporter:
    name = "text"

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".txt"

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        raise AssertionError("not reached")


@pytest.fixture
def importer(monkeypatch: pytest.MonkeyPatch) -> HandmadeImporter:
    imp = HandmadeImporter()

    def registry() -> Registry:
        reg = Registry()
        reg.add_importer(imp)
        reg.add_importer(TextImporter())
        reg.add_exporter(PerfettoJsonExporter())
        reg.add_exporter(PerfettoProtoExporter())
        return reg

    monkeypatch.setattr(loading, "build_registry", registry)
    return imp


def inputs(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / "rank0.handmade", tmp_path / "rank1.handmade"]
    for p in paths:
        p.write_text("")
    return paths


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pftrace"])
def test_export_by_suffix(
    suffix: str,
    tmp_path: Path,
    importer: HandmadeImporter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = inputs(tmp_path)
    out = tmp_path / f"job{suffix}"
    assert cli.main(["export", *map(str, paths), "-o", str(out)]) == 0
    assert importer.calls == [paths]  # several paths are one job
    err = capsys.readouterr().err.strip().splitlines()
    ranks = [handmade_rank(r) for r in (0, 1)]
    events = sum(len(t) for t in ranks)
    # A viewer's slices: every event but counters, one per step, the pftrace's metadata instant.
    counter = int(EventKind.COUNTER)
    slices = sum(int((t.events.kind != counter).sum()) + len(t.steps) for t in ranks)
    slices += suffix == ".pftrace"
    fmt = "perfetto-proto" if suffix == ".pftrace" else "perfetto-json"
    # per rank: steps, thread 4100 (+ lane 2), thread 4200, stream 7 (+ lane 2), stream 13
    assert err == [
        f"echo-view: wrote {out} ({fmt}): "
        f"{events} events ({slices} slices), 4 processes, 14 threads, "
        "4 slices moved to 4 overlap lanes, "
        f"12 flows (2 skipped)"
    ]
    if suffix == ".pftrace":
        assert read_pftrace(out).errors == []
    else:
        assert partial_overlaps(json_slices(load_json(out))) == []


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("job.csv", "-o: cannot tell the output format from 'job.csv'"),
        ("missing/job.json", "output directory"),
    ],
)
def test_usage_errors_are_one_line(
    out: str,
    message: str,
    tmp_path: Path,
    importer: HandmadeImporter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = inputs(tmp_path)
    code = cli.main(["export", *map(str, paths), "-o", str(tmp_path / out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("echo-view: error: ") and message in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.handmade", "rank1.handmade"]


def test_mixed_formats_and_output_over_input_are_refused(
    tmp_path: Path, importer: HandmadeImporter, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = inputs(tmp_path)
    other = tmp_path / "notes.txt"
    other.write_text("")
    assert cli.main(["export", str(paths[0]), str(other), "-o", str(tmp_path / "o.json")]) == 2
    assert "is a text file" in capsys.readouterr().err
    twin = tmp_path / "twin.json"
    twin.write_text("{}")
    assert cli.main(["export", str(twin), "-o", str(twin)]) == 2
    assert "is also an input" in capsys.readouterr().err
    assert (
        cli.main(["export", str(tmp_path / "nope.handmade"), "-o", str(tmp_path / "o.json")]) == 2
    )
    assert "no such file" in capsys.readouterr().err
    assert importer.calls == []


def test_dlrm_sample_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    out = tmp_path / "dlrm.pftrace"
    assert cli.main(["export", *map(str, paths), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"echo-view: wrote {out} (perfetto-proto): ")
    assert read_pftrace(out).errors == []
