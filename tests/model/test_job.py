"""Job: rank order, alignment offsets, lookups."""

from __future__ import annotations

import pytest

from echo_view.model import ClockAlignment, EventKind, Job, TraceBuilder
from echo_view.model.job import MAX_RANKS, group_ranks


def _trace(rank: int, start: int) -> TraceBuilder:
    b = TraceBuilder(rank)
    b.event(EventKind.KERNEL, "k", start, 10, b.gpu_stream(0, 7))
    return b


def test_traces_are_sorted_by_rank_with_their_offsets() -> None:
    t2, t0 = _trace(2, 100).build(), _trace(0, 50).build()
    job = Job((t2, t0), ClockAlignment("collective-end", (7, -3), 12))
    assert job.ranks == (0, 2)
    assert job.offset_ns(0) == -3 and job.offset_ns(2) == 7
    assert job.start_ns() == 47
    assert job.trace(2) is t2
    assert job.event_count() == 2


def test_duplicate_ranks_and_missing_offsets_are_rejected() -> None:
    t = _trace(1, 0).build()
    with pytest.raises(ValueError, match="each rank once"):
        Job((t, t), ClockAlignment("none", (0, 0), 0))
    with pytest.raises(ValueError, match="one offset per trace"):
        Job((t,), ClockAlignment("none", (), 0))


def test_unknown_rank_names_the_ranks_present() -> None:
    job = Job((_trace(0, 0).build(),), ClockAlignment("single-rank", (0,), 0))
    with pytest.raises(KeyError, match=r"rank 5 is not in this job \(ranks \[0\]\)"):
        job.trace(5)


def test_group_ranks_as_pytorch_records_them() -> None:
    """A list or the text "[0, 1]"; a group with any entry that is not a rank is unknown
    (a 5,000-digit rank made the importer's int() raise, one past int64 overflowed later)."""
    assert group_ranks([0, 1, 2]) == (0, 1, 2) and group_ranks("[0, 1]") == (0, 1)
    assert group_ranks(" [ 4,5 ] ") == (4, 5) and group_ranks("[]") == () and group_ranks([]) == ()
    assert group_ranks(["3", 4]) == (3, 4)
    for bad in ("[0, " + "9" * 5000 + "]", "[0, 99999999999999999999]", [0, 2**63], "[0, -1]",
                [True], [1.0], "[0, x]", "[0, ²]", None, 5, {"a": 1}, [MAX_RANKS]):  # fmt: skip
        assert group_ranks(bad) is None, bad
