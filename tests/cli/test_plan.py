"""``echo-view plan``: serial and on a real local Dask cluster, text, JSON, plot and errors."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from echo_view.cli import main
from echo_view.sim.plan import SearchEnd
from tests.cli.sigint import as_a_terminal_job
from tests.conftest import ROOT, SAMPLES, TORCH_MISSING

SMALL = SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml"
KORTHIKANTI = SAMPLES / "configs" / "validation" / "korthikanti-175b-selective.toml"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=TORCH_MISSING)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["plan", *args, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_the_published_layout_is_found_without_tracing(capsys: pytest.CaptureFixture[str]) -> None:
    # Only tp and pp vary; of the two that fit in 80 GB (graphs beside the config) one is the
    # paper's, the other (tp4 pp16) predicted 1.4% faster (docs/accuracy.md, "Layout search").
    out = _plan(capsys, str(KORTHIKANTI), "--gpus", "64", "--search", "tp,pp", "--serial")
    assert out["schema"] == "echo-view.plan/1"
    counts = out["counts"]
    assert isinstance(counts, dict)
    assert counts["enumerated"] == sum(
        counts[k]
        for k in ("invalid", "out_of_memory", "simulated", "pruned", "too_large", "unsearched")
    )
    ranked = out["ranked"]
    assert isinstance(ranked, list) and ranked
    best = ranked[0]
    layouts = [row["layout"] for row in ranked]
    assert layouts == [
        "tp4 pp16 vp3 cp1 dp1 mb1 selective ddp",
        "tp8 pp8 vp3 cp1 dp1 mb1 selective ddp",
    ]
    assert all(row["needed_bytes"] <= 80 * 10**9 and 0 < row["mfu"] < 1 for row in ranked)
    assert out["pareto"][0] == best["layout"]  # type: ignore[index]


def test_repeated_search_options_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    # The last --search alone counted: "--search tp --search pp" searched pp only.
    args = [str(KORTHIKANTI), "--gpus", "64", "--serial"]
    joined = _plan(capsys, *args, "--search", "tp,pp")
    repeated = _plan(capsys, *args, "--search", "tp", "--search", "pp,tp")
    assert repeated["search"] == ["tp", "pp"] == joined["search"]
    assert repeated["counts"] == joined["counts"] and repeated["ranked"] == joined["ranked"]


@needs_torch
def test_text_table_top_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    plot = tmp_path / "pareto.png"
    args = [str(SMALL), "--gpus", "8", "--search", "micro", "--serial", "--top", "2"]
    assert main(["plan", *args, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "4 layouts enumerated, 0 invalid, 0 out of memory, 4 simulated" in out
    rows = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == 2 and rows[0].split()[0].startswith("1")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@needs_torch
def test_a_local_dask_cluster_ranks_like_a_serial_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    args = [str(SMALL), "--gpus", "8", "--search", "tp,micro"]
    serial = _plan(capsys, *args, "--serial")
    dask = _plan(capsys, *args, "--workers", "2")
    assert serial["counts"] == dask["counts"]
    assert len(serial["ranked"]) >= 6  # type: ignore[arg-type]
    assert serial["ranked"] == dask["ranked"]


@needs_torch
def test_pruning_keeps_the_top_and_the_pareto_front_of_the_exhaustive_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    args = [str(SMALL), "--gpus", "8", "--search", "micro,recompute", "--serial", "--top", "2"]
    every = _plan(capsys, *args, "--all")
    pruned = _plan(capsys, *args)
    c_all, c_pruned = every["counts"], pruned["counts"]
    assert isinstance(c_all, dict) and isinstance(c_pruned, dict)
    # With --json the Pareto front is kept too: on this small, host-bound model every layout
    # outside the top 2 is on it or not ruled out by its floor; the text run below prunes.
    assert c_all["pruned"] == 0
    assert c_pruned["simulated"] + c_pruned["pruned"] == c_all["simulated"]
    ranked_all, ranked_pruned = every["ranked"], pruned["ranked"]
    assert isinstance(ranked_all, list) and isinstance(ranked_pruned, list)
    assert ranked_pruned[:2] == ranked_all[:2]  # same layouts, same numbers
    assert pruned["pareto"] == every["pareto"]
    # Every reported layout is reported as the exhaustive search reports it.
    assert all(r in ranked_all for r in ranked_pruned)
    # The text table needs only the top 2 (and their Pareto marks): fewer layouts still.
    assert main(["plan", *args]) == 0
    text = capsys.readouterr().out
    assert main(["plan", *args, "--all"]) == 0
    text_all = capsys.readouterr().out

    def rows(out: str) -> list[str]:
        return [line for line in out.splitlines() if line[:3].strip().isdigit() and line[3] in " *"]

    assert len(rows(text)) == 2 and rows(text) == rows(text_all)
    assert "fit but their compute or kernel dispatch alone rules them out of the 2 fastest" in text


def test_bad_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["plan", str(KORTHIKANTI), "--serial"]
    cases = [
        (["--gpus", "12"], "whole number of 8-GPU nodes"),
        (["--gpus", "64", "--search", "tp,bogus"], "unknown dimension 'bogus'"),
        (["--gpus", "64", "--top", "0"], "--top must be at least 1"),
        # The name came from the command line: the error names --gpu, not the config file.
        (["--gpus", "64", "--gpu", "Z999"], "error: --gpu: unknown GPU preset 'Z999'"),
        (["--gpus", "64", "--plot", str(tmp_path / "p.bmp")], "--plot: cannot tell the plot"),
        (["--gpus", "64", "--max-passes", "0"], "--max-passes must be at least 1, got 0"),
        # Two layouts fit, global batch 64 of micro-batch 1: the paper's tp8 pp8 vp3 dp1 (a
        # forward and a backward of 8 stages x 3 chunks x 64 micro-batches, 3,072 passes) and
        # tp4 pp16 vp3 dp1 (16 x 3 x 64 x 2 = 6,144).
        (
            ["--gpus", "64", "--search", "tp,pp", "--all", "--max-passes", "9215"],
            "--all would simulate 9,216 forward and backward chunk passes (of 2 layouts that fit)",
        ),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.bmp").exists()


@pytest.mark.slow
@needs_torch
def test_ctrl_c_stops_the_workers_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    cache, plot = tmp_path / "cache", tmp_path / "pareto.png"
    argv = [str(KORTHIKANTI), "--gpus", "64", "--workers", "2", "--plot", str(plot), "--progress"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "echo_view", "plan", *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT), "ECHO_VIEW_CACHE": str(cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_a_terminal_job,
    )
    try:
        # A progress line: the workers are tracing and simulating (blocks until one comes;
        # an empty line if the command ended without one).
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("simulated "), (first, proc.communicate())
        # Worker processes are started from the cluster's threads: every thread's children.
        tasks = Path(f"/proc/{proc.pid}/task").glob("*/children")
        children = [c for t in tasks for c in t.read_text().split()]
        # To the whole group, as a terminal sends it: workers interrupted mid-task printed
        # KeyboardInterrupt tracebacks of their own.
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    *progress, last = err.strip().splitlines()
    assert out == "" and last == "echo-view: interrupted", err
    assert all(line.startswith("simulated ") for line in progress), err
    assert not plot.exists() and not list(tmp_path.glob(".pareto*"))
    assert children  # the worker processes and multiprocessing's resource tracker
    # The tracker exits when its pipe from the (now ended) command closes: allow it a moment.
    deadline = time.monotonic() + 60
    while (alive := [c for c in children if Path(f"/proc/{c}").exists()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert not alive, [Path(f"/proc/{c}/cmdline").read_bytes() for c in alive]


def test_a_gpu_count_no_layout_accepts_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """7 GPUs: no tp x pp x dp of the CI config gives 7, so every layout is invalid, not out of
    memory, and the advice says what to check."""
    cfg = SAMPLES / "configs" / "megatron-ci-small" / "tp2-pp2.toml"
    assert main(["plan", str(cfg), "--gpus", "7", "--search", "tp,pp", "--serial"]) == 1
    out = capsys.readouterr().out
    assert "invalid, 0 out of memory, 0 simulated" in out and "no valid layout" in out
    # The rules that refused them, not a guess that named the GPU count and the batch only.
    assert "7 GPUs are no multiple of tp x pp x cp = 1 x 2 x 1 (" in out


def test_refused_layouts_say_which_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 6 heads refuse tp 4 and 8; 8 sequences refuse dp 64 and 32: the advice named only the
    # GPU count and the batch.
    src = (SAMPLES / "configs" / "megatron-ci-small" / "tp2-pp2.toml").read_text()
    cfg = tmp_path / "heads6.toml"
    for old, new in (("heads = 8", "heads = 6"), ("hidden = 512", "hidden = 768"),
                     ("global = 32", "global = 8")):  # fmt: skip
        assert old in src
        src = src.replace(old, new)
    cfg.write_text(src)
    args = [str(cfg), "--gpus", "64", "--search", "tp", "--serial", "--json"]
    assert main(["plan", *args]) == 1
    refused = json.loads(capsys.readouterr().out)["refused"]
    assert refused["model.heads"] == {"count": 2, "first": "6 heads are not divisible by tp = 4"}
    assert refused["batch.global"]["count"] == 2


def test_a_model_no_layout_fits_exits_1_with_the_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Llama 3 405B on one 8-GPU node: valid layouts exist but none fits in 80 GB; the report
    (text or JSON) is printed and the exit code tells a script that nothing was ranked."""
    cfg = SAMPLES / "configs" / "validation" / "llama3-405b-8192.toml"
    args = ["plan", str(cfg), "--gpus", "8", "--search", "tp,pp,recompute", "--serial"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "0 simulated" in out and "no layout fits: try more GPUs" in out
    assert main([*args, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ranked"] == [] and report["counts"]["out_of_memory"] > 0
    assert report["counts"]["simulated"] == 0


@needs_torch
def test_layouts_too_large_to_simulate_are_counted_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from echo_view.loading import graph_for_config, load_config
    from echo_view.sim import compose

    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    base = load_config(SMALL)
    per_micro_batch = compose.micro_batch_ops(graph_for_config(base, SMALL)[0])
    # On 8 GPUs (dp 4, global batch 32) micro 1, 2, 4, 8 run 8, 4, 2, 1 micro-batches a step,
    # each of the same ops: a limit of two micro-batches' ops leaves micro 4 and 8.
    monkeypatch.setattr(compose, "MAX_STEP_OPS", 2 * per_micro_batch)
    args = [str(SMALL), "--gpus", "8", "--search", "micro", "--serial"]
    for extra in ([], ["--all"]):
        out = _plan(capsys, *args, *extra)
        counts = out["counts"]
        assert isinstance(counts, dict) and counts["too_large"] == 2, extra
        assert counts["simulated"] + counts["pruned"] == 2
        ranked = out["ranked"]
        assert isinstance(ranked, list)
        assert {r["layout"].split()[5] for r in ranked} <= {"mb4", "mb8"}
    assert main(["plan", *args]) == 0
    assert "2 more fit but one step of each would simulate more than" in capsys.readouterr().out
    monkeypatch.setattr(compose, "MAX_STEP_OPS", 0)
    assert main(["plan", *args]) == 1
    text = capsys.readouterr().out
    assert "4 more fit but one step" in text and "no layout that fits is small enough" in text


@needs_torch
def test_serial_floors_report_progress_as_they_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from echo_view.cli.plan import PlanGraphs, _InProcess, run_pruned
    from echo_view.loading import load_config
    from echo_view.sim.plan import DIMENSIONS, check_memory, enumerate_layouts, group_by_chunks

    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    base = load_config(SMALL)
    groups = group_by_chunks(check_memory(enumerate_layouts(base, ("micro", "recompute"))[0]))
    fitting = sum(len(g.candidates) for g in groups)
    assert fitting > 1 and set(DIMENSIONS) >= {"micro", "recompute"}
    graphs = PlanGraphs(SMALL, base)
    built: list[str] = []

    def graph_for(cfg: object) -> object:
        built.append("x")
        return graphs(cfg)  # type: ignore[arg-type]

    stream = run_pruned(_InProcess(), 1, groups, graph_for, 2)  # type: ignore[arg-type]
    _, _, known = next(stream)
    # The first floor arrives before the other layouts' graphs are built: progress moves.
    assert known == 1 and len(built) == 1
    *_, (reported, end, search_end) = stream
    assert end == -1 and search_end == SearchEnd() and reported


@needs_torch
def test_a_search_stops_at_its_pass_budget_exact_below_the_least_floor_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Layouts are taken in floor order until their passes reach --max-passes: the ones left
    are counted with the least of their floors, below which the ranking is the exhaustive
    search's, and which ones are taken does not depend on the order results come in."""
    from echo_view.cli.plan import PlanGraphs, _InProcess, run_pruned
    from echo_view.loading import load_config
    from echo_view.sim.plan import (
        check_memory,
        enumerate_layouts,
        floor_layouts,
        floor_order,
        group_by_chunks,
        passes,
    )

    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    args = [str(SMALL), "--gpus", "8", "--search", "micro,recompute", "--serial", "--top", "2"]
    every = _plan(capsys, *args, "--all")
    assert every["stopped"] is None
    base = load_config(SMALL)
    groups = group_by_chunks(check_memory(enumerate_layouts(base, ("micro", "recompute"))[0]))
    graphs = PlanGraphs(SMALL, base)
    order = floor_order(groups, [floor_layouts(g.candidates, graphs) for g in groups])
    assert len(order) == 12
    # A budget the first six layouts' passes reach (the sixth's crossing it): six taken.
    budget = sum(passes(cfg) for _, _, cfg in order[:5]) + 1
    out = _plan(capsys, *args, "--max-passes", str(budget))
    counts, stopped = out["counts"], out["stopped"]
    assert isinstance(counts, dict) and isinstance(stopped, dict)
    # With --json the front is kept: on this model no floor rules out a layout, and the six
    # left (micro-batches 1 and 2) need less memory than any simulated one.
    assert counts["simulated"] == 6 and counts["unsearched"] == 6
    assert stopped == {"max_passes": budget, "unsearched": 6, "exact_up_to_s": order[6][0] / 1e9}
    # Every layout of the exhaustive search faster than the least floor left is reported, in
    # the same place, with the same numbers.
    ranked_all, ranked = every["ranked"], out["ranked"]
    assert isinstance(ranked_all, list) and isinstance(ranked, list)
    sure = [r for r in ranked_all if r["step_time_s"] <= stopped["exact_up_to_s"]]
    assert len(sure) >= 2 and ranked[: len(sure)] == sure
    # The text table needs only the 2 fastest: the floors left rule them all out, so the
    # search is whole, and with a budget of one layout it says which rows are sure.
    assert main(["plan", *args, "--max-passes", str(budget)]) == 0
    text = capsys.readouterr().out
    assert "not simulated" not in text and "6 more fit but their compute" in text
    assert main(["plan", *args, "--max-passes", "1"]) == 0
    text = capsys.readouterr().out
    assert "11 more fit but were not simulated: the search stopped at --max-passes 1" in text
    assert f"none of them can be faster than {order[1][0] / 1e9:.3f} s" in text
    assert "no row below is sure of its rank" in text
    # Results coming back in any order (three threads) take the same layouts.
    serial = list(run_pruned(_InProcess(), 1, groups, graphs, 2, True, budget))[-1]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        threaded = list(run_pruned(pool, 3, groups, graphs, 2, True, budget))[-1]
    assert serial[2] == threaded[2] == SearchEnd(0, 6, order[6][0])
    assert sorted(serial[0], key=repr) == sorted(threaded[0], key=repr)


@needs_torch
@pytest.mark.slow
def test_every_layout_of_a_script_config_runs_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config whose [model] names a script: layouts other than the config's own were built
    from the built-in GPT's chunks, so the search ranked another model (and a missing script
    went unnoticed when the config's own layout did not fit)."""
    from dataclasses import replace

    from echo_view.cli.plan import PlanGraphs
    from echo_view.loading import load_config

    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    (tmp_path / "step.py").write_text(
        "import torch\n\n\ndef train_step(micro: int = 1) -> None:\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model(torch.ones(micro, 64)).sum().backward()\n    opt.step()\n"
    )
    config = tmp_path / "job.toml"
    config.write_text(
        '[model]\nscript = "step.py"\nlayers = 2\nhidden = 64\nheads = 1\nseq_len = 1\n'
        "vocab = 64\n[parallel]\ntp = 1\npp = 1\ndp = 1\n[batch]\nglobal = 4\nmicro = 4\n"
        '[cluster]\ngpu = "H100"\ngpus_per_node = 1\nnodes = 1\n[precision]\ndtype = "fp32"\n'
    )
    base = load_config(config)
    other = replace(base, batch=replace(base.batch, micro=2))
    graph = PlanGraphs(config, base)(other)
    names = set(graph.strings.strings)
    assert "aten::mm" in names or "aten::addmm" in names
    assert not any("softmax" in n or "embedding" in n for n in names)  # no GPT
