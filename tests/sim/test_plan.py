"""Layout enumeration, memory pruning, grouping by traced graph, ranking and the Pareto front."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from types import SimpleNamespace

import pytest

from echo_view.errors import UsageError
from echo_view.loading import load_config
from echo_view.model.config_keys import chunk_key, config_to_mapping
from echo_view.model.config_parse import parse_workload_config
from echo_view.sim.plan import (
    DIMENSIONS,
    Frontier,
    Ranked,
    SerialReplay,
    check_memory,
    compute_floor_ns,
    enumerate_layouts,
    floor_order,
    group_by_chunks,
    layout_name,
    pareto_front,
    parse_dimensions,
    passes,
    pipeline_floor_ns,
    rank,
    retarget,
)
from echo_view.sim.runs import simulate_workload
from tests.conftest import SAMPLES, TORCH_MISSING

KORTHIKANTI = SAMPLES / "configs" / "validation" / "korthikanti-175b-selective.toml"


def test_enumeration_keeps_exactly_the_configs_the_parser_accepts() -> None:
    base = retarget(load_config(KORTHIKANTI), 64, None)
    valid, total, invalid = enumerate_layouts(base, ("tp", "pp", "micro"))
    # tp in 1..8 (4 values) x pp in the divisors of 96 that divide 64 (6) x the micro-batch
    # sizes 1..8 that divide a data-parallel rank's 64 / dp sequences: tp * pp = 1 (one
    # combination, dp 64: micro 1), 2 (two: 1-2), 4 (three: 1, 2, 4), 8 and more (18: 1, 2,
    # 4, 8).
    assert total == 1 * 1 + 2 * 2 + 3 * 3 + 18 * 4 and total - invalid == len(valid)
    for cfg in valid:
        p = cfg.parallel
        assert p.tp * p.pp * p.dp * p.cp == 64 and p.virtual_stages == 3
        assert parse_workload_config(config_to_mapping(cfg)) == replace(cfg, source="")
        assert cfg.reference is None  # the published time belongs to the base layout only
    assert any(c.parallel.tp == 8 and c.parallel.pp == 8 and c.batch.micro == 1 for c in valid)
    # Sizes that are not powers of two are tried too (3 and 6 were not): tp 2, pp 2 on 8 GPUs
    # (dp 2) with 12 sequences, 6 a data-parallel rank.
    small = load_config(SAMPLES / "configs" / "megatron-ci-small" / "tp2-pp2.toml")
    wide = replace(small, batch=replace(small.batch, global_batch=12, micro=1))
    valid, _, _ = enumerate_layouts(wide, ("micro",))
    assert sorted(c.batch.micro for c in valid) == [1, 2, 3, 6]


def test_one_data_parallel_rank_has_no_distributed_optimizer_twin() -> None:
    # With dp * cp = 1 the distributed optimizer shards nothing: "ddp" and "distopt" were
    # enumerated, simulated and ranked as two rows with the same step time and memory.
    base = retarget(load_config(KORTHIKANTI), 64, None)
    valid, _, _ = enumerate_layouts(base, ("tp", "pp", "dist_opt"))
    names = [layout_name(c) for c in valid]
    assert len(names) == len(set(names))
    solo = [c for c in valid if c.parallel.dp * c.parallel.cp == 1]
    assert solo and all(
        c.parallel.distributed_optimizer == base.parallel.distributed_optimizer for c in solo
    )
    assert any(c.parallel.distributed_optimizer for c in valid if c.parallel.dp > 1)


def test_memory_pruning_and_grouping() -> None:
    base = retarget(load_config(KORTHIKANTI), 64, None)
    valid, _, _ = enumerate_layouts(base, DIMENSIONS)
    cands = check_memory(valid)
    fits = [c for c in cands if c.fits]
    assert 0 < len(fits) < len(cands)
    # No recomputation, no distributed optimizer, tp 1: 175B parameters cannot fit in 80 GB.
    assert not any(c.fits for c in cands if c.cfg.parallel.tp * c.cfg.parallel.pp == 1)
    groups = group_by_chunks(cands)
    assert sum(len(g.candidates) for g in groups) == len(fits)
    # One chunk key per group, a different one for each group; a group spans pipelines.
    keys = [{chunk_key(cfg) for cfg in g.candidates} for g in groups]
    assert all(len(k) == 1 for k in keys) and len(set.union(*keys)) == len(groups)
    assert any(len({cfg.parallel.pp for cfg in g.candidates}) > 1 for g in groups)
    # Work: a forward and a backward per chunk and micro-batch on every stage, summed.
    g = max(groups, key=lambda g: len(g.candidates))
    each = [2 * c.parallel.pp * c.parallel.virtual_stages * c.micro_batches for c in g.candidates]
    assert g.work() == sum(each) > 0
    # The paper's layout: 8 stages of 3 chunks, 64 micro-batches of 1 (dp 1).
    paper = next(c.cfg for c in fits if layout_name(c.cfg) == "tp8 pp8 vp3 cp1 dp1 mb1 none ddp")
    assert passes(paper) == 2 * 8 * 3 * 64


def test_retarget_and_dimensions_are_checked() -> None:
    base = load_config(KORTHIKANTI)
    assert retarget(base, 128, "H100-SXM5-80GB").cluster.nodes == 16
    with pytest.raises(UsageError, match="whole number of 8-GPU nodes"):
        retarget(base, 12, None)
    with pytest.raises(UsageError, match="unknown dimension 'zz'"):
        parse_dimensions("tp,zz")
    assert parse_dimensions(" tp , vp") == ("tp", "vp")


def _r(name: str, step: float, mem: int) -> Ranked:
    return Ranked(name, step, 1.0, 0.5, mem, mem, {})


def test_ranking_and_pareto_front() -> None:
    rs = [_r("c", 2.0, 10), _r("a", 1.0, 50), _r("b", 1.0, 40), _r("d", 3.0, 20), _r("e", 4, 5)]
    assert [r.layout for r in rank(rs)] == ["a", "b", "c", "d", "e"]
    # b is as fast as a and lighter; d is slower and heavier than c.
    assert [r.layout for r in pareto_front(rs)] == ["b", "c", "e"]


def test_the_base_layout_is_always_a_candidate() -> None:
    # BLOOM's 70 layers on 12 uneven stages (5 on the first and last): 12 divides no layer
    # count, yet the published layout must be among the candidates.
    bloom = load_config(SAMPLES / "configs" / "validation" / "bloom-176b-384.toml")
    valid, _, _ = enumerate_layouts(retarget(bloom, 384, None), ("tp", "pp"))
    assert replace(bloom, reference=None, source=valid[0].source) in valid


def test_the_frontier_rules_out_what_cannot_reach_the_top_or_the_front() -> None:
    f = Frontier(2)
    f.add(_r("a", 1.0, 50))
    assert not f.excludes(5 * 10**9, 100)  # one result: the top 2 is still open
    f.add(_r("b", 2.0, 30))
    # Two results faster than the floor, and one of them lighter: out.
    assert f.excludes(3 * 10**9, 30) and f.excludes(3 * 10**9, 60)
    # Lighter than every faster result: it could be on the front.
    assert not f.excludes(3 * 10**9, 29)
    # A floor not above the 2nd fastest (ties included) could still be in the top 2.
    assert not f.excludes(2 * 10**9, 100) and not f.excludes(1_500_000_000, 100)
    # Only b (2.0 s) is faster than a 2.5 s floor and lighter than 40; a (1.0 s) is faster
    # than 1.5 s but heavier than 40.
    assert f.excludes(2_500_000_000, 40) and not f.excludes(1_500_000_001, 40)
    top_only = Frontier(2, keep_front=False)
    for r in (_r("a", 1.0, 50), _r("b", 2.0, 30)):
        top_only.add(r)
    assert top_only.excludes(3 * 10**9, 1) and not top_only.excludes(2 * 10**9, 1)
    with pytest.raises(ValueError, match="at least 1"):
        Frontier(0)


def test_the_serial_replay_decides_as_a_serial_search_whatever_the_order() -> None:
    """Top 1, a budget of 10 passes, layouts of 4 passes with floors 1, 2, 3, 4 s: serially A
    (2.5 s) and B (2.2 s) are simulated, C and D ruled out by B, 8 passes charged."""
    r = SerialReplay(1, keep_front=False, budget=10)
    a, b = r.take(10**9, 0, 4, True), r.take(2 * 10**9, 0, 4, True)
    assert r.may_take()  # 8 undecided passes: under 10
    c = r.take(3 * 10**9, 0, 4, True)
    assert not r.may_take()  # 12: a fourth could be past the serial search's stop
    r.done(c, _r("C", 3.5, 1))
    r.done(a, _r("A", 2.5, 1))  # C waits for B, which could rule it out
    assert (r.charge, r.undecided) == (4, 8) and not r.may_take()
    r.done(b, _r("B", 2.2, 1))  # B's 2.2 s is below C's floor: C was not needed
    assert (r.charge, r.undecided) == (8, 0) and r.may_take() and not r.stopped()
    r.take(4 * 10**9, 0, 4, False)  # D, skipped when taken: not charged
    assert (r.charge, r.undecided) == (8, 0) and not r.stopped()
    # With a budget of 6, B's passes spend it: the serial search stops after B.
    r = SerialReplay(1, keep_front=False, budget=6)
    a, b = r.take(10**9, 0, 4, True), r.take(2 * 10**9, 0, 4, True)
    r.done(b, _r("B", 2.2, 1))
    assert not r.stopped() and not r.may_take()
    r.done(a, _r("A", 2.5, 1))
    assert r.stopped() and r.charge == 8 and not r.may_take()
    # A layout too large to simulate (no result) is not charged.
    r = SerialReplay(1, keep_front=False, budget=6)
    r.done(r.take(10**9, 0, 4, True), None)
    assert (r.charge, r.undecided) == (0, 0) and r.may_take()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=TORCH_MISSING)
def test_the_compute_floor_bounds_the_simulated_step() -> None:
    """Over pipelines, interleaving, recomputation, micro-batches, the distributed optimizer
    and FSDP, the floor is at most the step and the ascending-floor order holds every layout."""
    from echo_view.tracing.chunks import ChunkCache
    from echo_view.tracing.roles import trace_workload

    small = load_config(SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml")
    base = retarget(small, 8, None)
    valid, _, _ = enumerate_layouts(base, ("tp", "pp", "vp", "micro", "recompute", "dist_opt"))
    mapping = config_to_mapping(base)
    mapping["parallel"] |= {"pp": 1, "dp": 8, "fsdp": "full_shard", "distributed_optimizer": True}
    fsdp = parse_workload_config(mapping)
    cfgs = [*valid[:: max(1, len(valid) // 10)], fsdp]
    groups = group_by_chunks(check_memory(cfgs))
    cache = ChunkCache()
    floors = []
    for g in groups:
        floors.append([])
        for cfg in g.candidates:
            graph = trace_workload(cfg, cache)
            floor, step = compute_floor_ns(cfg, graph), simulate_workload(cfg, graph).step_ns
            assert 0 < floor <= step, cfg
            assert step < 2 * floor  # a floor, not a guess: the compute is most of the step
            floors[-1].append(floor)
    order = floor_order(groups, floors)
    assert [r[0] for r in order] == sorted(r[0] for r in order)
    assert len(order) == sum(len(g.candidates) for g in groups) > 5
    assert any(cfg.parallel.fsdp != "none" for _, _, cfg in order)


def test_interleaving_is_searched_for_uneven_stages() -> None:
    # Llama 3 405B: 126 layers + embedding + loss = 8 slots per stage on pp 16, so the config
    # rules accept V = 1, 2, 4, 8 of the candidates 1..8 (Megatron-Core: V divides 8).
    llama = load_config(SAMPLES / "configs" / "validation" / "llama3-405b-8192.toml")
    valid, total, invalid = enumerate_layouts(llama, ("vp",))
    assert sorted(c.parallel.virtual_stages for c in valid) == [1, 2, 4, 8]
    assert (total, invalid) == (8, 4)


def test_fsdp_keeps_the_base_configs_pipelining() -> None:
    """An FSDP config without pipeline stages (llm-foundry's) is searched at pp = 1 only; one
    with stages (torchtitan's FSDP under pipeline parallelism) over every pp."""
    small = load_config(SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml")
    mapping = config_to_mapping(retarget(small, 8, None))
    dims = ("tp", "pp")
    pps = {}
    for pp in (1, 2):
        mapping["parallel"] |= {"pp": pp, "dp": 8 // pp, "fsdp": "full_shard"}
        mapping["parallel"] |= {"distributed_optimizer": True}
        valid, _, _ = enumerate_layouts(parse_workload_config(mapping), dims)
        pps[pp] = {cfg.parallel.pp for cfg in valid}
    assert pps[1] == {1} and pps[2] > {1, 2}


def _pipeline(pp: int, v: int, m: int, roles: list[tuple[tuple[int, ...], int, int, int]]) -> int:
    """:func:`pipeline_floor_ns` with ``roles`` of (stages, forward, backward, optimizer) ns
    per chunk pass (stand-ins for the graph, its costs and the config)."""
    graph = SimpleNamespace(roles=[SimpleNamespace(stages=r[0]) for r in roles])
    costs = {}
    for ri, (_, f, b, opt) in enumerate(roles):
        for c in range(v):
            costs[(ri, "forward", c)] = SimpleNamespace(total_ns=f)
            costs[(ri, "backward", c)] = SimpleNamespace(total_ns=b)
        costs[(ri, "optimizer", 0)] = SimpleNamespace(total_ns=opt)
    parallel = SimpleNamespace(pp=pp, virtual_stages=v, microbatch_group=None)
    cfg = SimpleNamespace(parallel=parallel, micro_batches=m)
    return pipeline_floor_ns(cfg, graph, costs)  # type: ignore[arg-type]


def test_the_pipeline_floor_is_the_fill_and_drain() -> None:
    # 1F1B, 4 equal stages, 8 micro-batches of 10 ns forward and 20 backward: the last stage
    # waits 3 forwards, runs 8 x 30 ns, then 3 backwards drain: (m + pp - 1)(F + B) = 330.
    assert _pipeline(4, 1, 8, [((0, 1, 2, 3), 10, 20, 5)]) == 330
    # Interleaved, 2 stages of 2 chunks: one chunk pass of fill and one of drain around 240.
    assert _pipeline(2, 2, 4, [((0, 1), 10, 20, 5)]) == 10 + 240 + 20
    # A heavier last stage (the loss): 3 forwards of 10, 8 x 40, 3 backwards of 20 = 410,
    # where its own passes and optimizer, the per-stage floor, are 325.
    assert _pipeline(4, 1, 8, [((0, 1, 2), 10, 20, 5), ((3,), 15, 25, 5)]) == 410
    # A stage's optimizer after its passes, when it outlasts the drain.
    assert _pipeline(2, 1, 1, [((0, 1), 10, 20, 50)]) == 10 + 30 + 50
    assert _pipeline(1, 1, 8, [((0,), 10, 20, 5)]) == 0  # no pipeline: the per-stage floor
