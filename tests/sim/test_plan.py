"""Layout enumeration, memory pruning, grouping by traced graph, ranking and the Pareto front."""

from __future__ import annotations

from dataclasses import replace

import pytest

from echo_view.errors import UsageError
from echo_view.loading import load_config
from echo_view.model.config import chunk_key, config_to_mapping, parse_workload_config
from echo_view.sim.plan import (
    DIMENSIONS,
    Ranked,
    check_memory,
    enumerate_layouts,
    group_by_chunks,
    pareto_front,
    parse_dimensions,
    rank,
    retarget,
)
from tests.conftest import SAMPLES

KORTHIKANTI = SAMPLES / "configs" / "validation" / "korthikanti-175b-selective.toml"


def test_enumeration_keeps_exactly_the_configs_the_parser_accepts() -> None:
    base = retarget(load_config(KORTHIKANTI), 64, None)
    valid, total, invalid = enumerate_layouts(base, ("tp", "pp", "micro"))
    # tp in 1..8 (4 values) x pp in the divisors of 96 that divide 64 (6) x micro 1..8 (4).
    assert total == 4 * 6 * 4 and total - invalid == len(valid)
    for cfg in valid:
        p = cfg.parallel
        assert p.tp * p.pp * p.dp * p.cp == 64 and p.virtual_stages == 3
        assert parse_workload_config(config_to_mapping(cfg)) == replace(cfg, source="")
        assert cfg.reference is None  # the published time belongs to the base layout only
    assert any(c.parallel.tp == 8 and c.parallel.pp == 8 and c.batch.micro == 1 for c in valid)


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
    # Work: chunk passes per step, stages x virtual stages x micro-batches, summed.
    g = max(groups, key=lambda g: len(g.candidates))
    passes = [c.parallel.pp * c.parallel.virtual_stages * c.micro_batches for c in g.candidates]
    assert g.work() == sum(passes) > 0


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


def test_interleaving_is_searched_for_uneven_stages() -> None:
    # Llama 3 405B: 126 layers + embedding + loss = 8 slots per stage on pp 16, so the config
    # rules accept V = 1, 2, 4, 8 of the candidates 1..8 (Megatron-Core: V divides 8).
    llama = load_config(SAMPLES / "configs" / "validation" / "llama3-405b-8192.toml")
    valid, total, invalid = enumerate_layouts(llama, ("vp",))
    assert sorted(c.parallel.virtual_stages for c in valid) == [1, 2, 4, 8]
    assert (total, invalid) == (8, 4)
