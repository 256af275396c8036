"""Simulating workload configs: symmetry rule, what-if directions, the predicted job, and the
accuracy guard against the published step times (on the traced graphs shipped in samples/)."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.analysis.summary import summarize
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.kinds import EventKind
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose import COMPUTE_STREAM
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.compute_presets import compute_params_for
from echo_view.sim.config_sim import (
    BESIDE_LANE,
    ConfigSimulation,
    draw_beside,
    expanded_times,
    issued_starts,
    predicted_config_job,
    simulate_config,
)
from importers.graph import read_graph
from tests.conftest import SAMPLES, TORCH_MISSING

CONFIGS = SAMPLES / "configs"
VALIDATION = CONFIGS / "validation"


def _small(**par: Any) -> Any:
    return parse_workload_config(
        {
            "model": {
                "kind": "gpt",
                "layers": 8,
                "hidden": 1024,
                "heads": 16,
                "seq_len": 512,
                "vocab": 32000,
            },
            "parallel": {"tp": 2, "pp": 2, "dp": 2, **par},
            "batch": {"global": 16, "micro": 2},
            "cluster": {"gpu": "H100", "gpus_per_node": 4, "nodes": 2},
            "precision": {"dtype": "bf16"},
        }
    )


def _run(cfg: Any, graph: Any, **kw: Any) -> ConfigSimulation:
    cluster = kw.pop("cluster", None) or cluster_from_config(cfg.cluster)
    return simulate_config(
        graph, cfg, cluster, default_comm_model(), compute_params_for(cluster.gpu), **kw
    )


def _shipped(stem: str) -> tuple[Any, Any]:
    path = VALIDATION / f"{stem}.toml"
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    return cfg, read_graph(VALIDATION / f"{stem}.graph.json.gz")


@pytest.mark.parametrize(
    "par",
    [
        {},
        {"virtual_stages": 2, "overlap_grad_reduce": True},
        {
            "pp": 1,
            "dp": 4,
            "distributed_optimizer": True,
            "overlap_grad_reduce": True,
            "sequence_parallel": True,
        },
        {"dp": 1, "cp": 2, "sequence_parallel": True, "distributed_optimizer": True},
        {
            "pp": 1,
            "dp": 4,
            "distributed_optimizer": True,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "sequence_parallel": True,
            "tp_comm_overlap": True,
        },
        {"pp": 1, "dp": 4, "fsdp": "full_shard", "sequence_parallel": True},
        {"pp": 1, "dp": 2, "cp": 2, "fsdp": "shard_grad_op", "recompute": "full"},
    ],
)
def test_one_rank_per_stage_equals_all_ranks(par: dict[str, Any]) -> None:
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from echo_view.tracing.roles import trace_workload

    cfg = _small(**par)
    graph = trace_workload(cfg)
    stages = _run(cfg, graph, ranks="stages")
    every = _run(cfg, graph, ranks="all")
    assert len(every.composed.simulated_ranks) == cfg.parallel.world_size
    assert len(stages.composed.simulated_ranks) == cfg.parallel.pp
    assert stages.step_ns == every.step_ns
    # every rank of a stage ends when that stage's representative does
    for stage, t in stages.stage_ns().items():
        assert every.stage_ns()[stage] == t


def test_context_parallel_ranks_reduce_gradients_together() -> None:
    """dp = 1, cp = 2: the two context-parallel ranks of a stage hold the same weights, so
    their gradients are reduce-scattered between them and the parameters all-gathered (the
    distributed optimizer's shards span data and context parallel ranks); with cp = 1 and
    dp = 1 there is nothing to reduce."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from echo_view.tracing.roles import trace_workload

    def dp_collectives(**par: Any) -> list[str]:
        cfg = _small(**par)
        sim = _run(cfg, trace_workload(cfg), ranks="all")
        t = predicted_config_job(sim, ranks=[0]).traces[0]
        names = [t.strings[int(n)] for n in t.events.name[t.collectives.event].tolist()]
        return sorted(n for n in names if n.endswith(("(grads)", "(params)")))

    assert dp_collectives(dp=1, cp=2, distributed_optimizer=True) == [
        "ncclDevKernel_AllGather (params)",
        "ncclDevKernel_ReduceScatter (grads)",
    ]
    assert dp_collectives(dp=1, tp=4, distributed_optimizer=True) == []


def test_what_if_moves_the_right_way() -> None:
    cfg, graph = _shipped("megatron-ci-7b-tp1-pp4")
    base = _run(cfg, graph)
    cluster = cluster_from_config(cfg.cluster)
    faster_nic = _run(cfg, graph, cluster=cluster.with_overrides({"nvlink_gbytes_per_s": 900}))
    assert faster_nic.step_ns <= base.step_ns
    no_comm = _run(cfg, graph, comm_scale=0.0)
    assert no_comm.step_ns < base.step_ns
    half_gemm = _run(cfg, graph, scales={0: 0.5})
    assert half_gemm.step_ns < base.step_ns
    # halving the GEMMs saves less than half the step: the rest of the step does not shrink
    assert half_gemm.step_ns > base.step_ns / 2


def test_two_times_nic_bandwidth_never_slows_a_multi_node_step() -> None:
    cfg, graph = _shipped("korthikanti-175b-selective")
    cluster = cluster_from_config(cfg.cluster)
    base = _run(cfg, graph, cluster=cluster)
    fast = _run(cfg, graph, cluster=cluster.with_overrides({"nic_gbytes_per_s": 50}))
    assert fast.step_ns <= base.step_ns


def test_predicted_job_breakdown_partitions_the_step() -> None:
    cfg, graph = _shipped("megatron-ci-7b-tp4-pp1")
    sim = _run(cfg, graph)
    job = predicted_config_job(sim)
    assert job.predicted and job.ranks == sim.composed.simulated_ranks
    rows = summarize(job).to_json()["ranks"]
    assert rows
    for row in rows:
        total = row["compute_ns"] + row["exposed_comm_ns"] + row["memory_ns"] + row["idle_ns"]
        assert total == row["step_ns"]
        assert row["comm_ns"] > 0  # tensor-parallel all-reduces and DP reduce-scatters
    end = max(int((t.events.start_ns + t.events.dur_ns).max()) for t in job.traces)
    # The run logs the parameters' norm: the host's launches for it, then its wait for the
    # GPU, end the step.
    assert cfg.training.log_params_norm and end == sim.step_ns
    # Without it the step ends with the optimizer's last kernel (the parameter all-gather
    # overlaps the next forward), shown without the launch gap that follows it.
    quiet = replace(cfg, training=replace(cfg.training, log_params_norm=False))
    sim = _run(quiet, graph)
    job = predicted_config_job(sim)
    end = max(int((t.events.start_ns + t.events.dur_ns).max()) for t in job.traces)
    assert end == sim.step_ns - sim.params.kernel_gap_ns


def test_expanded_kernels_stretch_to_a_slowed_pass_by_hand() -> None:
    """Pass 0 (kernels 10 + 30 µs) ran its solo 40 µs; pass 1 (kernels 20 + 20 + 40) ran 120
    µs instead of 80 (slowed by 1.5x): its kernels stretch to 30, 30, 60 µs and end with it;
    pass 2 ran faster than its kernels' sum (never happens) and is not compressed."""
    start = np.array([0, 100_000, 300_000])
    end = np.array([40_000, 220_000, 305_000])
    lengths = np.array([2, 3, 1])
    solo = np.array([10_000, 30_000, 20_000, 20_000, 40_000, 10_000])
    fstart, fdur = expanded_times(start, end, lengths, solo)
    assert fstart.tolist() == [0, 10_000, 100_000, 130_000, 160_000, 300_000]
    assert fdur.tolist() == [10_000, 30_000, 30_000, 30_000, 60_000, 10_000]
    empty = expanded_times(start[:0], end[:0], lengths[:0], solo[:0])
    assert [len(a) for a in empty] == [0, 0]


def test_kernels_wait_for_their_issue_by_hand() -> None:
    """Pass 0: kernels of 10, 20, 30 µs drawn back to back from 0, issued at 5, 50, 55 µs:
    the first waits 5 µs, the second starts at its issue (50), the third after the second
    ends (70), not at its issue. Pass 1 (no host op, -1) keeps its starts."""
    fstart = np.array([0, 10_000, 30_000, 100_000, 150_000])
    lengths = np.array([3, 2])
    issued = np.array([5_000, 50_000, 55_000, -1, -1])
    assert issued_starts(fstart, lengths, issued).tolist() == [
        5_000,
        50_000,
        70_000,
        100_000,
        150_000,
    ]
    # A delay never moves a later pass, and a late issue in pass 1 moves only its own kernels.
    issued = np.array([0, 0, 0, 120_000, 0])
    assert issued_starts(fstart, lengths, issued).tolist() == [0, 10_000, 30_000, 120_000, 170_000]


def test_a_host_bound_pass_draws_each_kernel_after_its_launch() -> None:
    """Megatron-LM CI's hidden-512 GPT on one H100 is host-bound: each kernel of the first
    forward runs shorter than the 73.7 µs its launch costs the host, so it starts when it is
    issued: the embedding at 73.7 µs, the next kernel at 147.4, two fills of new buffers (10.5
    µs of host time each, no Python) at 157.9 and 168.4, the next launch at 242.1. They were
    drawn back to back from the pass's start (73.7, 105.3, 113.3, ...) with the stream idle
    at the pass's end."""
    path = CONFIGS / "megatron-ci-small" / "tp1-pp2.toml"
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    sim = _run(cfg, read_graph(path.with_suffix(".graph.json.gz")))
    job = predicted_config_job(sim)
    t = job.traces[0]
    ev = t.events
    names = [lane.name for lane in t.lanes]
    on = (ev.lane == names.index(f"stream {COMPUTE_STREAM} (compute)")) & (
        ev.kind == int(EventKind.KERNEL)
    )
    starts = ev.start_ns[on]
    assert (starts[:5] / 1000).round(1).tolist() == [73.7, 147.4, 157.9, 168.4, 242.1]
    ends = starts + ev.dur_ns[on]
    assert (ends[:-1] <= starts[1:]).all()  # still one after another on their stream


def test_a_slowed_pass_keeps_its_collectives_own_time() -> None:
    """A pass of a 10 µs collective and 20 + 30 µs of compute that ran 90 µs: interference
    slowed the compute, so the collective keeps 10 µs and the compute takes 80 (x1.6); a
    pass of collectives alone stretches them (nothing else can take the time). It stretched
    every kernel alike: Nemotron-4's all-gathers read 225.6 µs against the model's 193.9."""
    fstart, fdur = expanded_times(
        [0, 200_000],
        [90_000, 240_000],
        [3, 2],
        [10_000, 20_000, 30_000, 10_000, 10_000],
        [True, False, False, True, True],
    )
    assert fdur.tolist() == [10_000, 32_000, 48_000, 20_000, 20_000]
    assert fstart.tolist() == [0, 10_000, 42_000, 200_000, 220_000]


def _beside(
    dur: list[int],
    solo: list[int],
    beside: list[int],
    alone: list[int],
    table: list[int],
    slows: list[bool] | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """:func:`draw_beside` on kernels back to back from 0, all on one lane, rows in order."""
    d = np.array(dur, dtype=np.int64)
    start = np.cumsum(d) - d
    n = len(d)
    moved = draw_beside(
        np.array(beside, dtype=np.int64),
        np.array(alone, dtype=np.int64),
        np.array(solo, dtype=np.int64),
        np.arange(n, dtype=np.int64),
        np.array(table, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        start,
        d,
        None if slows is None else np.array(slows),
    )
    return start.tolist(), d.tolist(), np.flatnonzero(moved).tolist()


def test_collectives_beside_a_gemm_drawn_by_hand() -> None:
    """The pass holds a GEMM (1,000 ns), a bias sum (20 ns) and the share (100 ns) of the
    all-reduce beside the GEMM that the GEMM did not hide."""
    no = -1
    # GEMM-bound (the all-reduce alone 400 ns, less than GEMM + share): the GEMM, slowed while
    # the all-reduce ran, lasts the share longer, the sum follows it; the all-reduce starts
    # with the GEMM and lasts its own 400 ns.
    assert _beside([1000, 20, 100], [1000, 20, 100], [no, no, 0], [0, 0, 400], [0, 0, 0]) == (
        [0, 1100, 0],
        [1100, 20, 400],
        [2],
    )
    # Communication-bound (1,500 ns = GEMM + share): the GEMM keeps its time and the all-reduce
    # ends where the pass holds it (after the sum, which does not wait for it).
    assert _beside([1000, 20, 500], [1000, 20, 500], [no, no, 0], [0, 0, 1500], [0, 0, 0]) == (
        [0, 1000, 0],
        [1000, 20, 1500],
        [2],
    )
    # A pass stretched 2x by interference: shares and GEMM twice as long, the collective its
    # own time (solo times decide which ends the pair).
    assert _beside([2000, 40, 200], [1000, 20, 100], [no, no, 0], [0, 0, 400], [0, 0, 0]) == (
        [0, 2200, 0],
        [2200, 40, 400],
        [2],
    )
    # The weight-gradient all-gather before its GEMM (a cast between): the cast and the GEMM
    # move up to the pair's start, which the all-gather shares; communication-bound here.
    assert _beside([200, 10, 1000], [200, 10, 1000], [2, no, no], [1210, 0, 0], [0, 0, 0]) == (
        [0, 0, 10],
        [1210, 10, 1000],
        [0],
    )
    # ... and GEMM-bound: the GEMM takes the share.
    assert _beside([200, 10, 1000], [200, 10, 1000], [2, no, no], [500, 0, 0], [0, 0, 0]) == (
        [0, 0, 10],
        [500, 10, 1200],
        [0],
    )
    # Userbuffers' reduce-scatter after its GEMM does not slow it: the share (the pipeline's
    # drain) stays idle, the GEMM keeps its time.
    assert _beside(
        [1000, 20, 100], [1000, 20, 100], [no, no, 0], [0, 0, 400], [0, 0, 0], [False] * 3
    ) == ([0, 1000, 0], [1000, 20, 400], [2])
    # A partner row that is another table's kernel (another pass) is left as it is.
    assert _beside([1000, 100], [1000, 100], [no, 0], [0, 400], [0, 1]) == (
        [0, 1000],
        [1000, 100],
        [],
    )


@pytest.mark.parametrize("interference", ["on", "off"])
def test_collectives_beside_a_gemm_are_drawn_for_their_own_time(interference: str) -> None:
    """Megatron-LM's input-gradient all-reduce (GPT-13B, tp 4, no sequence parallelism) runs
    beside the weight-gradient GEMM: the step charges what the GEMM does not hide (0 ns without
    interference), the timeline draws each for its whole time, the comm model's, on a lane of
    its own, and the breakdown still partitions the step."""
    from echo_view.model.kinds import CollectiveKind
    from echo_view.sim.interference import model_from_setting
    from echo_view.sim.interference.features import gpu_generation

    path = CONFIGS / "echo-gpt13b-64xH800.toml"
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    graph = read_graph(CONFIGS / "echo-gpt13b-64xH800.graph.json.gz")
    cluster = cluster_from_config(cfg.cluster)
    model = model_from_setting(interference, gpu_generation(cluster.gpu.name))
    sim = _run(cfg, graph, interference=model)
    t = predicted_config_job(sim).traces[0]
    names = [ln.name for ln in t.lanes]
    lane = next(i for i, n in enumerate(names) if BESIDE_LANE in n)
    on_it = np.flatnonzero(t.events.lane == lane)
    # Two column-parallel linears a layer (QKV and FC1), 5 layers a stage, 256 micro-batches.
    assert len(on_it) == 2 * 5 * 256 == 2 * cfg.model.layers // cfg.parallel.pp * 256
    bytes_ = {int(b) for b in t.collectives.bytes[np.isin(t.collectives.event, on_it)]}
    assert len(bytes_) == 1
    tp = tuple(range(cfg.parallel.tp))
    expected = CollectiveCache(default_comm_model(), cluster).time_ns(
        CollectiveKind.ALL_REDUCE, bytes_.pop(), tp
    )
    assert set(t.events.dur_ns[on_it].tolist()) == {expected}
    # The compute stream holds no two kernels at once.
    comp = np.flatnonzero(t.events.lane == names.index(f"stream {COMPUTE_STREAM} (compute)"))
    ends = t.events.start_ns[comp] + t.events.dur_ns[comp]
    assert (t.events.start_ns[comp][1:] >= ends[:-1]).all()
    row = summarize(predicted_config_job(sim)).to_json()["ranks"][0]
    total = row["compute_ns"] + row["exposed_comm_ns"] + row["memory_ns"] + row["idle_ns"]
    assert total == row["step_ns"]
    assert row["comm_ns"] - row["exposed_comm_ns"] >= len(on_it) * expected * 0.9


def test_the_bubble_is_measured_when_every_rank_is_simulated() -> None:
    """With every rank simulated a pass is one op a kernel: the bubble read 0.0% (it looked
    for ops named after passes). Both modes find the idle share of the compute stream."""
    cfg, graph = _shipped("megatron-ci-7b-tp1-pp4")
    stages = _run(cfg, graph).bubble()
    every = _run(cfg, graph, ranks="all").bubble()
    assert stages["ideal"] == every["ideal"] > 0
    assert every["simulated"] == pytest.approx(stages["simulated"], abs=0.05)
    assert every["simulated"] > 0.5 * stages["ideal"]


def test_slower_links_never_draw_userbuffers_pipelines_as_compute() -> None:
    """Nemotron-4 15B with tp_comm_overlap (userbuffers): at a ninth of the NVLink bandwidth
    the collectives take longer, the GEMMs beside them do not (they drew the pipelines' extra
    time as compute: 0.3063 s at 900 GB/s, 0.6437 s at 100)."""
    cfg, graph = _shipped("nemotron4-15b-768")
    assert cfg.parallel.tp_comm_overlap
    cluster = cluster_from_config(cfg.cluster)
    rows = []
    for gbs in (900, 100):
        sim = _run(cfg, graph, cluster=cluster.with_overrides({"nvlink_gbytes_per_s": gbs}))
        rows.append(summarize(predicted_config_job(sim)).to_json()["ranks"][0])
    fast, slow = rows
    assert slow["comm_ns"] > 2 * fast["comm_ns"]
    assert slow["compute_ns"] <= fast["compute_ns"]


@pytest.mark.parametrize(
    "path",
    sorted(CONFIGS.rglob("*.toml")),
    ids=lambda p: str(p.relative_to(CONFIGS)),
)
def test_every_shipped_config_has_its_graph_beside(path: Path) -> None:
    """`simulate` on a shipped config needs no torch: the graph beside it matches it."""
    from echo_view.loading import graph_for_config

    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    _graph, origin = graph_for_config(cfg, path)
    assert origin == "beside"


KORTHIKANTI = sorted(p.stem for p in VALIDATION.glob("korthikanti-*.toml"))


def test_published_step_times_regression_guard() -> None:
    """Mean |error| over Korthikanti et al.'s eight runs stays <= 6.5% (A100: one step-time
    fit; 6.0% here, without interference, since tensor-parallel all-reduces run in place), and
    the Megatron-CI 7B runs stay where docs/accuracy.md reports them: Hopper kernels come from
    kernel measurements, not from these runs, which they under-predict (here tp1-pp4 by 6.1%,
    tp4-pp1 by 1.5%, with deterministic mode's fills, cuDNN's filled dP workspace and the DDP
    hook's gradient additions). A value outside the ranges below means the model changed:
    regenerate the doc's tables."""
    errors = {}
    for stem in [*KORTHIKANTI, "megatron-ci-7b-tp1-pp4", "megatron-ci-7b-tp4-pp1"]:
        cfg, graph = _shipped(stem)
        sim = _run(cfg, graph)
        errors[stem] = 100 * (sim.step_ns / 1e9 / cfg.reference.step_time_s - 1)
    kor = [abs(errors[s]) for s in KORTHIKANTI]
    assert len(kor) == 8
    assert sum(kor) / len(kor) <= 6.5, errors
    assert -12.0 <= errors["megatron-ci-7b-tp1-pp4"] <= -2.0, errors
    assert -8.0 <= errors["megatron-ci-7b-tp4-pp1"] <= 2.0, errors


def test_uneven_stage_sample_simulates(tmp_path: Path) -> None:
    path = CONFIGS / "echo-gpt70b-96xH800.toml"
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    graph = read_graph(CONFIGS / "echo-gpt70b-96xH800.graph.json.gz")
    assert {r.stages for r in graph.roles} == {(0,), tuple(range(1, 11)), (11,)}
    sim = _run(cfg, graph)
    assert sim.step_ns > 0 and len(sim.stage_ns()) == 12


def test_predicted_job_links_each_collective_across_its_ranks() -> None:
    """Every simulated collective instance becomes one chain of export flows over its group:
    (group size - 1) arrows per instance, each between two members of that group."""
    from exporters.layout import build_layout

    cfg, graph = _shipped("megatron-ci-7b-tp4-pp1")
    sim = _run(cfg, graph, ranks="all")
    wl = sim.composed.workload
    job = predicted_config_job(sim)
    links = build_layout(job).links
    sizes = np.array([wl.groups[int(g)].size for g in wl.collectives.group])
    assert len(wl.collectives) > 0
    assert links.collective == int((sizes - 1).sum()) == len(links)
    for t in job.traces:
        named = t.collectives.group >= 0
        assert named.sum() == np.count_nonzero(
            [t.rank in wl.groups[int(g)].ranks for g in wl.collectives.group]
        )
    ranks = np.array(job.ranks)
    src, dst = ranks[links.src_rank], ranks[links.dst_rank]
    same_group = [
        any(a in pg.ranks and b in pg.ranks for pg in wl.groups)
        for a, b in zip(src.tolist(), dst.tolist(), strict=True)
    ]
    assert all(same_group) and (src != dst).all()


def test_the_predicted_step_ends_where_the_simulated_step_does() -> None:
    """Nemotron-4 15B (pp 1): the step ends with a host-bound tail (a zero-length op that holds
    the stream until the host's last issue lets the pass end), which the timeline does not
    draw; `info` of the predicted job read the step 30.5 µs short of `simulate`'s."""
    cfg, graph = _shipped("nemotron4-15b-768")
    sim = _run(cfg, graph)
    job = predicted_config_job(sim)
    (row,) = summarize(job).to_json()["ranks"]
    assert row["step_ns"] == sim.step_ns
    t = job.traces[0]
    drawn_end = int((t.events.start_ns + t.events.dur_ns).max())
    assert drawn_end < sim.step_ns  # the tail is not drawn


def test_data_parallel_and_pipeline_collectives_carry_their_bytes() -> None:
    """The coarse collectives (bucket reductions, parameter gathers, pipeline transfers) had
    no payload in the predicted job: `info` listed their bytes as unknown."""
    from echo_view.model.config import grad_reduce_bytes

    cfg, graph = _shipped("megatron-ci-7b-tp1-pp4")
    job = predicted_config_job(_run(cfg, graph))
    t = job.traces[0]
    names = [t.strings[int(t.events.name[i])] for i in t.collectives.event.tolist()]
    nbytes = t.collectives.bytes.tolist()
    coarse = [(n, b) for n, b in zip(names, nbytes, strict=True) if "(" in n]
    assert coarse and all(b > 0 for _, b in coarse)
    m = cfg.model
    act = m.seq_len * cfg.batch.micro * m.hidden * 2  # bf16 activations, tp 1
    assert {b for n, b in coarse if n.startswith("ncclDevKernel_SendRecv")} == {act}
    # The distributed optimizer: the stage's gradients reduce-scattered in fp32, its bf16
    # parameters all-gathered bucket by bucket (each bucket's share rounded down).
    params = graph.roles[0].params
    grads = sum(b for n, b in coarse if n.startswith("ncclDevKernel_ReduceScatter"))
    gathered = sum(b for n, b in coarse if n.startswith("ncclDevKernel_AllGather"))
    assert grads == params * grad_reduce_bytes(cfg) == params * 4
    assert gathered == pytest.approx(params * 2, rel=1e-6)
