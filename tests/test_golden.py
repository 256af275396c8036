"""Every byte echo-view makes of the shipped samples equals the golden dump
(``tests/golden.py``; update with ``python -m tests.golden --update`` after an intended change)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GOLDEN, compute, items


def _diff(old: Any, new: Any, where: str = "") -> list[str]:
    """The paths at which two dumps differ (a few, for the failure message)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _diff(old.get(k), new.get(k), f"{where}.{k}")
        return out
    return [] if old == new else [f"{where}: {str(old)[:80]} -> {str(new)[:80]}"]


@pytest.mark.parametrize("name", sorted(items()))
def test_sample_outputs_equal_the_golden_dump(name: str, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"{name} has no golden dump: run python -m tests.golden --update"
    now = compute(name, tmp_path)
    assert now == golden[name], "\n".join(_diff(golden[name], now)[:10])


def test_every_golden_item_is_still_produced() -> None:
    assert set(json.loads(GOLDEN.read_text())) == set(items())
