"""The shared trace-event rules: flow ids, Perfetto's nesting order and stack, flow binding."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.model.trace_rules import (
    SCAN_LANES,
    WALK_LIMIT,
    bind_points,
    first_fit_lanes,
    nesting_order,
    open_at,
    parse_flow_id,
    partial_overlaps,
    thread_order,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        (-1, 2**64 - 1),  # uint64, as Perfetto stores it
        (2**64 + 5, 5),
        ("1f", 31),
        ("0x1F", 31),
        (" 0xff ", 255),
        ("0x", None),
        ("", None),
        ("zz", None),
        (True, None),
        (1.5, None),
        (None, None),
        ({"global": "0x10"}, 16),
        ({"local": 16}, 16 | 1 << 63),  # local and global ids never meet
        ({"local": "zz"}, None),
        ({"other": 1}, None),
    ],
)
def test_flow_ids_as_perfetto_reads_them(value: object, expected: int | None) -> None:
    assert parse_flow_id(value) == expected


def _random_slices(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    # Few distinct starts and durations: many ties, zero-length slices included.
    return rng.integers(0, 20, n).astype(np.int64), rng.integers(0, 6, n).astype(np.int64)


def test_thread_order_is_the_nesting_order_of_one_thread() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        start, dur = _random_slices(rng, int(rng.integers(1, 40)))
        rows = np.arange(len(start), dtype=np.int32)
        got, starts = thread_order(rows, start, dur)
        want = nesting_order(start, dur, np.zeros(len(start), dtype=np.int64))
        assert got.tolist() == want.tolist()
        assert starts.tolist() == start[want].tolist()


def test_nesting_order_groups_then_start_then_longest_then_row() -> None:
    start = np.array([5, 0, 0, 0, 2])
    dur = np.array([1, 3, 9, 3, 1])
    group = np.array([0, 1, 1, 1, 0])
    assert nesting_order(start, dur, group).tolist() == [4, 0, 2, 1, 3]


def test_partial_overlaps_pop_at_the_end_and_do_not_push_the_spilled() -> None:
    # [0,10) holds [2,5); [4,12) starts inside [2,5), the top of the stack, and ends after it.
    assert partial_overlaps([0, 2, 4, 11], [10, 5, 12, 13]) == [(2, 1)]
    # A slice starting exactly where another ends is its sibling, not an overlap.
    assert partial_overlaps([0, 3], [3, 6]) == []
    # Equal slices nest.
    assert partial_overlaps([0, 0], [8, 8]) == []
    # Once spilled, the slice does not close others: [6,9) nests in [0,10) again.
    assert partial_overlaps([0, 4, 6], [10, 12, 9]) == [(1, 0)]


def test_open_at_edges() -> None:
    starts = np.array([0, 2, 20], dtype=np.int64)
    ends = np.array([10, 4, 20], dtype=np.int64)
    ts = np.array([-1, 0, 3, 5, 10, 15, 20, 21], dtype=np.int64)
    # Before any slice no; the end is exclusive; an ancestor is still open after its child
    # ended; a zero-length slice holds a point at its own start only.
    assert open_at(starts, ends, ts).tolist() == [
        False,
        True,
        True,
        True,
        False,
        False,
        True,
        False,
    ]
    assert open_at(starts[:0], ends[:0], ts).tolist() == [False] * len(ts)


def test_bind_points_deepest_enclosing_or_next() -> None:
    # Rows in file order: an outer slice, a child, a grandchild, a later sibling of the child.
    start = np.array([0, 2, 3, 6, 6], dtype=np.int64)
    dur = np.array([10, 3, 1, 2, 0], dtype=np.int64)
    rows, starts = thread_order(np.arange(5, dtype=np.int32), start, dur)
    ts = np.array([3, 4, 5, 6, 9, 10, -1, 3, 10], dtype=np.int64)
    enc = np.array([True] * 7 + [False] * 2)
    got = bind_points(rows, starts, dur, ts, enc).tolist()
    # 3: the grandchild; 4: its parent (walked back); 5: the outer; 6: the zero-length slice
    # (the deepest, last at its start); 9: the outer; 10, -1: none; without "bp": the next
    # slice that begins at or after ts, none after the last.
    assert got == [2, 1, 0, 4, 0, -1, -1, 2, -1]


def test_binding_and_open_at_agree() -> None:
    """A point binds to an enclosing slice exactly when :func:`open_at` says one holds it."""
    rng = np.random.default_rng(11)
    for _ in range(100):
        start, dur = _random_slices(rng, int(rng.integers(1, 30)))
        rows, starts = thread_order(np.arange(len(start), dtype=np.int32), start, dur)
        ts = rng.integers(-2, 28, 40).astype(np.int64)
        bound = bind_points(rows, starts, dur, ts, np.ones(len(ts), dtype=np.bool_))
        inside = open_at(starts, (start + dur)[rows], ts)
        assert ((bound >= 0) == inside).all()
        hit = bound[bound >= 0]
        t = ts[bound >= 0]
        # The slice bound holds the point, and no later-ordered slice that holds it is deeper.
        assert ((start[hit] <= t) & ((t < start[hit] + dur[hit]) | (t == start[hit]))).all()


def test_walk_back_is_bounded() -> None:
    """An ancestor more than WALK_LIMIT closed siblings back is not searched for (bounded time
    per point); one within the limit is found."""
    n = WALK_LIMIT + 2
    start = np.concatenate(([0], np.arange(1, n) * 2)).astype(np.int64)
    dur = np.concatenate(([10 * n], np.ones(n - 1))).astype(np.int64)
    rows, starts = thread_order(np.arange(n, dtype=np.int32), start, dur)
    # After the last sibling ended (the outer slice is n - 1 siblings back), after the second.
    ts = np.array([2 * (n - 1) + 1, 5], dtype=np.int64)
    got = bind_points(rows, starts, dur, ts, np.ones(2, dtype=np.bool_)).tolist()
    assert got == [-1, 0]


def _first_fit_by_scan(starts: list[int], ends: list[int]) -> list[int]:
    """First fit by its definition: every lane scanned for each slice."""
    stacks: list[list[int]] = []
    out = []
    for s, e in zip(starts, ends, strict=True):
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(k)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out


def _peeled(starts: list[int], ends: list[int]) -> list[int]:
    """Lanes by peeling: lane 1 is what Perfetto's stack spills from lane 0, lane 2 what it
    spills from lane 1, ... (how ``check --fix`` numbered its overlap lanes before)."""
    lane = [0] * len(starts)
    rest = list(range(len(starts)))
    k = 0
    while rest:
        spilled = [rest[j] for j, _ in partial_overlaps([starts[i] for i in rest],
                                                          [ends[i] for i in rest])]  # fmt: skip
        if not spilled:
            break
        k += 1
        for i in spilled:
            lane[i] = k
        rest = spilled
    return lane


def test_first_fit_lanes_are_the_scanned_and_the_peeled_lanes() -> None:
    # Dense slices with many equal times, past SCAN_LANES (where the tree takes over) and past
    # the tree's first size (where it grows).
    rng = np.random.default_rng(5)
    widest = 0
    for _ in range(150):
        n = int(rng.integers(1, 300))
        s = rng.integers(0, int(rng.integers(5, 200)), n)
        d = rng.integers(0, int(rng.integers(1, 300)), n)  # zero-length slices too
        order = nesting_order(s, d, np.zeros(n, dtype=np.int64))
        starts, ends = s[order].tolist(), (s + d)[order].tolist()
        lanes = first_fit_lanes(starts, ends)
        assert lanes == _first_fit_by_scan(starts, ends) == _peeled(starts, ends)
        widest = max(widest, *lanes)
    assert widest > 2 * SCAN_LANES  # past the scanned lanes, into the tree


def test_first_fit_lanes_by_hand() -> None:
    # a [0, 10) b [2, 12) c [3, 5) d [4, 14) e [12, 13): b crosses a (lane 1); c nests in a;
    # d crosses a, and b on lane 1 (lane 2); e starts after a and b ended (lane 0).
    assert first_fit_lanes([0, 2, 3, 4, 12], [10, 12, 5, 14, 13]) == [0, 1, 0, 2, 0]
