"""``echo-view diff``: text and JSON output, ``--fail-above`` exit codes, ``--plot``, errors."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from echo_view.cli import build_parser
from echo_view.errors import InputError, OutputError, UsageError
from echo_view.formats import Progress, Registry, no_progress
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)
from tests.conftest import ROOT, SAMPLES

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _rank(rank: int, gemm_ns: int) -> Trace:
    b = TraceBuilder(rank)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7, s9 = b.gpu_stream(0, 7), b.gpu_stream(0, 9)
    for n in range(2):
        t = 10_000 * n
        b.event(EventKind.USER_ANNOTATION, f"ProfilerStep#{n}", t, 4000, cpu)
        b.step(n, t, t + 4000)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t, 10, cpu, correlation=2 * n + 1)
        b.event(EventKind.KERNEL, "gemm_kernel", t + 100, gemm_ns, s7, correlation=2 * n + 1)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t + 20, 10, cpu, correlation=2 * n + 2)
        k = b.event(EventKind.KERNEL, NCCL, t + 500, 1000, s9, correlation=2 * n + 2)
        b.collective(k, CollectiveKind.ALL_REDUCE, nbytes=1 << 20, seq=n)
    return b.build()


class PairImporter:
    """``*.pair`` files: ``fast.pair`` is a measured job with 3 µs GEMMs; ``slow.pair`` a
    predicted one whose GEMMs take ``gemm_ns`` from the file name (``slow-4200.pair``)."""

    name = "pair"

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".pair"

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        stem = paths[0].stem
        gemm = int(stem.split("-")[1]) if "-" in stem else 3000
        traces = (_rank(0, gemm), _rank(1, gemm))
        return Job(traces, ClockAlignment("none", (0, 0), 0), 2, str(paths[0]), "-" in stem)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = build_parser().parse_args(argv)
    reg = Registry()
    reg.add_importer(PairImporter())
    code = args.func(args, reg)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    a, b, same = tmp_path / "fast.pair", tmp_path / "slow-4200.pair", tmp_path / "slow-3000.pair"
    for p in (a, b, same):
        p.write_text("x")
    return a, b, same


def test_text_output(pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _ = pair
    code, out, _ = _run(["diff", str(a), str(b)], capsys)
    assert code == 0
    # Step window: CPU 4000 ns vs GPU end 100 + gemm; 4000 -> 4300 with 4200 ns GEMMs.
    assert "B is 7.5% slower than A" in out
    assert "Step time per rank" in out and "Categories" in out and "gemm_kernel" in out


def test_json_output(pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _ = pair
    code, out, _ = _run(["diff", str(a), str(b), "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["schema"] == "echo-view.diff/1"
    assert d["step_time"]["a_ns"] == 4000 and d["step_time"]["b_ns"] == 4300
    assert d["step_time"]["error_pct"] == 7.5
    assert d["reference"] == "a" and d["b"]["predicted"] is True
    assert d["verdict"]["code"] == "b_slower"
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert d["kernels"][0]["name"] == "gemm_kernel"
    assert d["kernels"][0]["delta_ns"] == 2 * 1200


@pytest.mark.parametrize(("pct", "want"), [("5", 1), ("7.5", 0), ("10", 0), ("0", 1)])
def test_fail_above(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], pct: str, want: int
) -> None:
    a, b, _ = pair
    code, _, err = _run(["diff", str(a), str(b), "--json", "--fail-above", pct], capsys)
    assert code == want
    assert ("exceeds --fail-above" in err) == (want == 1)


@pytest.mark.parametrize("pct", ["-1", "nan", "inf", "1e400"])
def test_fail_above_must_be_a_percentage(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], pct: str
) -> None:
    """nan passed the old `< 0` check and then never failed anything. The words nan and inf
    are not numbers to the option's type (a usage error, exit 2); 1e400 overflows to inf."""
    a, b, _ = pair
    if pct in ("nan", "inf"):
        with pytest.raises(SystemExit) as usage:
            _run(["diff", str(a), str(b), "--fail-above", pct], capsys)
        assert usage.value.code == 2
        assert "--fail-above: expected a number" in capsys.readouterr().err
        return
    with pytest.raises(UsageError, match="--fail-above must be a percentage"):
        _run(["diff", str(a), str(b), "--fail-above", pct], capsys)


def test_fail_above_passes_on_a_match(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, same = pair
    code, out, _ = _run(["diff", str(a), str(same), "--fail-above", "0"], capsys)
    assert code == 0 and "matches A" in out


def test_fail_above_through_main(pair: tuple[Path, Path, Path]) -> None:
    """The exit status reaches the process through ``main`` (real registry: a wrong path)."""
    from echo_view.cli import main

    assert main(["diff", "no/such/a", "no/such/b"]) == 2


def test_plot_is_written_atomically(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    a, b, _ = pair
    out = tmp_path / "diff.png"
    code, _, _ = _run(["diff", str(a), str(b), "--plot", str(out)], capsys)
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_plot_that_cannot_be_written_stops_before_the_report(
    pair: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A read-only folder (which root writes anyway, so the refusal is made here): the report
    # was printed whole before the error.
    pytest.importorskip("matplotlib")

    def denied(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("echo_view.formats.tempfile.mkstemp", denied)
    a, b, _ = pair
    with pytest.raises(OutputError, match="Permission denied"):
        _run(["diff", str(a), str(b), "--plot", str(tmp_path / "diff.png")], capsys)
    assert capsys.readouterr().out == ""


def test_a_home_folder_matplotlib_cannot_write_adds_nothing_to_stderr(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME")}
    job = str(SAMPLES / "hta_sampled_128")
    run = subprocess.run(
        [sys.executable, "-m", "echo_view", "diff", job, job, "--plot", str(tmp_path / "d.png")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**env, "HOME": str(home)},
    )
    assert run.returncode == 0 and run.stderr == ""  # matplotlib logged two lines here
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_title_is_whole_and_legends_cover_no_bar(pair: tuple[Path, Path, Path]) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from echo_view.analysis.diff import diff_jobs
    from echo_view.cli.diff import plot_figure

    a, b, _ = pair
    imp = PairImporter()
    one = Job((_rank(0, 4200),), ClockAlignment("none", (0,), 0), 1, "one rank", True)
    for diff in (diff_jobs(imp.read([a]), imp.read([b])), diff_jobs(imp.read([a]), one)):
        fig = plot_figure(diff)
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        title = fig.get_suptitle()
        expected = " ".join([*(f"warning: {w}" for w in diff.warnings), diff.verdict[1]])
        assert title.replace("\n", " ") == expected  # wrapped, not cut
        (text,) = [t for t in fig.findobj(Text) if t.get_text() == title]
        box = text.get_window_extent(renderer)
        assert len(title) > 130 and fig.bbox.contains(*box.p0) and fig.bbox.contains(*box.p1)
        for ax in fig.axes:
            legend = ax.get_legend().get_window_extent(renderer)
            bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_height() > 0]
            assert bars and not any(legend.overlaps(bar) for bar in bars)
            assert fig.bbox.contains(*legend.p1)


def test_plot_suffix_and_missing_matplotlib(
    pair: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, _ = pair
    with pytest.raises(UsageError, match="plot format"):
        _run(["diff", str(a), str(b), "--plot", str(tmp_path / "x.bmp")], capsys)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError) as err:
        _run(["diff", str(a), str(b), "--plot", str(tmp_path / "x.png")], capsys)
    assert "echo-view[plot]" in err.value.one_line()
    assert not (tmp_path / "x.png").exists()


def test_bad_arguments(pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _ = pair
    with pytest.raises(UsageError, match="--fail-above"):
        _run(["diff", str(a), str(b), "--fail-above", "-1"], capsys)
    for bad in ("-1", "1e400"):  # -1 and nan gave "B is 0.0% faster than A" for A vs A
        with pytest.raises(UsageError, match="--tolerance must be a percentage"):
            _run(["diff", str(a), str(a), "--tolerance", bad], capsys)
    with pytest.raises(SystemExit):  # not a number to the option's type
        _run(["diff", str(a), str(a), "--tolerance", "nan"], capsys)
    with pytest.raises(InputError, match="no such file"):
        _run(["diff", str(a), str(a.parent / "missing.pair")], capsys)


def test_predicted_vs_measured_from_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real pair: the DLRM sample and ``echo-view simulate``'s what-if with 1.5x slower
    compute, written to a file and read back like any input."""
    from echo_view.cli import main

    dlrm = Path(__file__).resolve().parents[2] / "samples" / "dlrm_kineto"
    out = tmp_path / "predicted.json"
    what_if = ["simulate", str(dlrm), "--set", "compute.scale.all=1.5", "-o", str(out), "--json"]
    assert main(what_if) == 0
    sim = json.loads(capsys.readouterr().out)
    assert main(["diff", str(dlrm), str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["b"]["predicted"] is True and d["a"]["predicted"] is False
    assert d["reference"] == "a"
    assert [r["rank"] for r in d["ranks"]] == list(range(8))
    # The simulator's own report and the diff of the files agree on both step times.
    assert d["step_time"]["a_ns"] == round(sim["measured_step_time_s"] * 1e9)
    assert d["step_time"]["b_ns"] == pytest.approx(sim["step_time_s"] * 1e9, abs=1000)
    compute = d["categories"]["compute"]
    assert compute["b_ns"] / compute["a_ns"] == pytest.approx(1.5, rel=0.02)
    scaled = [k for k in d["kernels"] if not k["name"].startswith("nccl:") and k["a_ns"] > 50_000]
    assert scaled and all(k["b_ns"] / k["a_ns"] == pytest.approx(1.5, rel=0.02) for k in scaled)
    err = d["step_time"]["error_pct"]
    assert main(["diff", str(dlrm), str(out), "--json", "--fail-above", str(err + 0.5)]) == 0
    if err > 0:
        assert main(["diff", str(dlrm), str(out), "--json", "--fail-above", str(err / 2)]) == 1


def test_unrelated_jobs_are_warned_above_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from echo_view.cli import main

    samples = Path(__file__).resolve().parents[2] / "samples"
    argv = ["diff", str(samples / "dlrm_kineto"), str(samples / "hta_nccl" / "nccl_data.json.gz")]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: "))
    verdict = next(i for i, line in enumerate(lines) if "slower than A" in line)
    assert warning < verdict and "look like different jobs" in lines[warning]
