"""Durations as the TUI writes them: three digits, never a negative zero, and view bounds that
differ when the view does."""

from __future__ import annotations

import pytest

from echo_view.tui.tables import interval_texts, short_duration


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (14_500_000, "14.5 ms"),
        (948_000, "948 µs"),
        (7, "7 ns"),
        (-0.3, "-0.30 ns"),
        (0.05, "0.05 ns"),
    ],
)
def test_short_durations(ns: float, text: str) -> None:
    # Below a nanosecond they read "0 ns" (a zoom of 0.05 ns a cell) and "-0 ns".
    assert short_duration(ns) == text
    assert short_duration(-0.4999) != "-0 ns" and short_duration(-0.0) == "0 ns"


@pytest.mark.parametrize(
    ("start", "end", "texts"),
    [
        # Three digits showed these views as "108 ms…108 ms" and "1694128201 s…1694128202 s".
        (108_084_000, 108_252_000, ("108.08 ms", "108.25 ms")),
        (-397_000, -396_738, ("-397.00 µs", "-396.74 µs")),
        (1_694_128_201e9, 1_694_128_201.5e9, ("1694128201.00 s", "1694128201.50 s")),
        # A view wider than 1% of its bounds keeps the short form.
        (1_000_000, 5_000_000, ("1.00 ms", "5.00 ms")),
        (0, 3, ("0 ns", "3 ns")),
    ],
)
def test_view_bounds_differ_when_the_view_does(
    start: float, end: float, texts: tuple[str, str]
) -> None:
    assert interval_texts(start, end) == texts


def test_a_name_is_cut_to_the_cells_it_may_take() -> None:
    # The width was counted in characters: a CJK name took twice its share and pushed the
    # delta columns off an 80-column screen.
    from rich.cells import cell_len

    from echo_view.tui.tables import name_cell

    wide = name_cell("漢字" * 40, 30)
    assert cell_len(wide.plain) <= 30 and wide.plain.endswith("…")
    assert name_cell("gemm_" * 10, 30).plain == ("gemm_" * 10)[:29] + "…"
    assert name_cell("short", 30).plain == "short"
    # A rank sorts as a number (r2 before r10), a name as text.
    assert name_cell("r10", value=10).value == 10 and name_cell("r10").value == "r10"
