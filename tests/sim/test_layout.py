"""Megatron rank layout (tp-cp-dp-pp) arithmetic."""

from __future__ import annotations

import itertools

from echo_view.sim.layout import Layout


def test_rank_coords_round_trip_and_groups() -> None:
    lay = Layout(tp=4, pp=3, dp=2, cp=1)
    assert lay.world == 24
    for r in range(lay.world):
        assert lay.rank(*lay.coords(r)) == r
    assert lay.group("tp", 5) == (4, 5, 6, 7)
    assert lay.group("dp", 5) == (1, 5)
    assert lay.group("pp", 5) == (5, 13, 21)
    assert lay.rank(2, 1, 0, 3) == 23


def test_context_parallel_sits_between_tp_and_dp() -> None:
    lay = Layout(tp=2, pp=1, dp=2, cp=2)
    assert lay.group("cp", 0) == (0, 2)
    assert lay.group("dp", 0) == (0, 4)
    # Gradients are reduced over data and context parallel ranks together.
    assert lay.group("dp_cp", 0) == (0, 2, 4, 6)
    assert lay.group("dp_cp", 3) == (1, 3, 5, 7)
    assert Layout(tp=2, pp=1, dp=2, cp=1).group("dp_cp", 1) == (1, 3)
    # The sequence's shards: tensor and context parallel ranks together (tp fastest).
    assert lay.group("tp_cp", 5) == (4, 5, 6, 7)
    assert Layout(tp=2, pp=1, dp=2, cp=1).group("tp_cp", 2) == (2, 3)


def test_groups_are_shared_and_are_the_groups_each_rank_computes() -> None:
    axes = ("tp", "dp", "cp", "pp", "tp_cp", "dp_cp", "ep", "etp", "edp", "etp_ep")
    for tp, pp, dp, cp in itertools.product((1, 2, 4), (1, 3), (1, 2, 6), (1, 2)):
        for ep, etp in ((1, 1), (2, 1), (2, 2), (4, 1)):
            if (tp * cp * dp) % (ep * etp):
                continue
            lay = Layout(tp, pp, dp, cp, ep, etp)
            for axis in axes:
                for r in range(lay.world):
                    group = lay.group(axis, r)
                    assert group == lay._members(axis, r)
                    # the least member names the group; every member gets the same tuple
                    assert r in group and group is lay.group(axis, group[-1])


def test_only_the_latest_layouts_groups_are_kept() -> None:
    from echo_view.sim import layout as module

    big = Layout(tp=1, pp=1, dp=4096)
    assert len(big.group("dp", 7)) == 4096
    small = Layout(tp=2, pp=2, dp=2)
    for r in range(small.world):
        small.group("tp", r)
    # a search's thousands of layouts do not pile up: the 4,096-rank group is gone
    assert set(module._GROUPS) == {("tp", 0), ("tp", 2), ("tp", 4), ("tp", 6)}
