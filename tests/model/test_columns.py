"""Column helpers: byte-bounded row ranges."""

from __future__ import annotations

import itertools

import numpy as np

from echo_view.model.columns import byte_slices, groups


def test_byte_slices_cover_the_rows_within_the_budget() -> None:
    rng = np.random.default_rng(5)
    sizes = rng.integers(0, 50, 1000)
    sizes[[10, 500]] = 400  # rows larger than the budget alone
    parts = list(byte_slices(sizes, 100))
    assert parts[0][0] == 0 and parts[-1][1] == len(sizes)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    for i, j in parts:
        assert j > i
        assert j - i == 1 or int(sizes[i:j].sum()) <= 100
        # Greedy: the next row would not have fitted.
        if j < len(sizes):
            assert int(sizes[i : j + 1].sum()) > 100
    assert list(byte_slices(np.zeros(0, dtype=np.int64), 10)) == []
    assert list(byte_slices(np.array([5, 5, 5]), 10**9)) == [(0, 3)]


def test_groups_are_the_rows_of_each_key_in_order() -> None:
    rng = np.random.default_rng(7)
    for n, spread in ((0, 1), (1, 1), (50, 3), (1000, 1000), (500, 2**40)):
        keys = rng.integers(-spread, spread, size=n, dtype=np.int64)
        got = list(groups(keys))
        assert [k for k, _ in got] == sorted(set(keys.tolist()))
        for key, idx in got:
            assert idx.tolist() == np.flatnonzero(keys == key).tolist()
