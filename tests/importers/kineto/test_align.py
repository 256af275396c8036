"""Clock alignment from per-rank :class:`ClockFacts`: the same result from a job's traces, from
facts gathered rank by rank with their keys numbered job-wide, and on relative clocks."""

from __future__ import annotations

from dataclasses import replace

from echo_view.loading import read_job
from importers.kineto.align import ClockFacts, align, align_ranks, clock_facts
from tests.importers.kineto.files import DLRM


def _relative(facts: ClockFacts, shift: int) -> ClockFacts:
    """``facts`` of a rank whose clock is not epoch time and reads ``shift`` ns late."""
    return replace(facts, epoch=False, key_end=facts.key_end + shift, end=facts.end + shift)


def test_facts_give_the_alignment_of_the_traces() -> None:
    traces = list(read_job([DLRM]).traces)
    facts = [clock_facts(t) for t in traces]
    ids: dict[object, int] = {}
    interned = [f.interned(ids) for f in facts]
    assert align_ranks(interned) == align_ranks(facts) == align(traces)
    assert align(traces).method == "shared-host-clock"
    # One number per distinct collective: the 8 ranks' keys are shared, not held 8 times.
    distinct = {k for f in facts for k in f.keys}
    assert len(ids) == len(distinct) < sum(len(f.keys) for f in facts)
    assert all(len(f.key_end) == len(f.keys) for f in interned)


def test_relative_clocks_are_shifted_onto_the_lowest_rank() -> None:
    facts = [clock_facts(t) for t in read_job([DLRM]).traces]
    base = align_ranks([_relative(f, 0) for f in facts])
    assert base.method == "collective-end" and base.offsets_ns[0] == 0
    shifts = [0, 7_000_000, -3_000, 0, 12_345, 0, 0, 999]
    ids: dict[object, int] = {}
    moved = align_ranks([_relative(f, s).interned(ids) for f, s in zip(facts, shifts, strict=True)])
    assert moved.method == "collective-end"
    assert moved.offsets_ns == tuple(o - s for o, s in zip(base.offsets_ns, shifts, strict=True))
    assert moved.uncertainty_ns == base.uncertainty_ns and moved.note == base.note


def test_a_collective_of_another_kind_on_one_rank_is_not_common() -> None:
    facts = [_relative(clock_facts(t), 0) for t in read_job([DLRM]).traces]
    first = align_ranks(facts)
    n = int(first.note.split("first of ")[1].split()[0])
    # Rank 3 ran every collective as another kind: none is common to all ranks any more.
    odd = replace(facts[3], key_kind=facts[3].key_kind + 1)
    none = align_ranks([*facts[:3], odd, *facts[4:]])
    assert n > 1 and none.method == "none" and none.offsets_ns == (0,) * 8
