"""The docs quote today's numbers: ``bench/doc_numbers.py`` regenerates every step time, error
and example output a doc quotes from a deterministic command (speed numbers excluded: they are
measured) and reports the stale ones; here per file, plus the checker's own rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import bench_module

ROOT = Path(__file__).resolve().parents[1]


DN = bench_module("doc_numbers")


def test_precision_follows_the_doc() -> None:
    assert DN._matches("19.901 ms", 0.0199014)[0]
    assert not DN._matches("19.901 ms", 0.0199016)[0]
    assert DN._matches("6.885", 6.88512)[0] and not DN._matches("6.290", 6.88512)[0]
    assert DN._matches("-28.7%", -28.71)[0] and DN._matches("+0.00%", 0.001)[0]
    assert DN._matches("1,108.275", 1108.2749)[0]
    assert DN._matches("6.290", 6.88512)[1] == "6.885"


def test_example_blocks_allow_elision_and_catch_changes() -> None:
    out = ["head", "a 1", "b 2", "c 3", "tail"]
    assert list(DN._compare_block(["head", "...", "c 3"], out, "x.md", 1)) == []
    stale = list(DN._compare_block(["head", "a 9"], out, "x.md", 10))
    assert [(s.line, s.quoted, s.now) for s in stale] == [(11, "a 9", "a 1")]


def test_a_stale_table_row_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "| config | predicted step s |\n|---|---|\n| gpt175b-8192xH100.toml | 3.539 |\n",
        encoding="utf-8",
    )
    found = list(DN.check_tables(doc, "doc.md"))
    assert [(s.line, s.quoted) for s in found] == [(3, "3.539")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "rel",
    ["README.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md"))],
)
def test_doc_quotes_todays_numbers(rel: str) -> None:
    stale = DN.check([ROOT / rel])
    assert not stale, "\n".join(map(str, stale))
