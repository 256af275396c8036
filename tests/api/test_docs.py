"""docs/api.md's worked example runs as written: each ```python block is executed in order
(one namespace, in the repository root) and prints exactly the ```text block after it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("pandas", reason="the API's DataFrames need the analysis extra (pandas)")

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)
NEEDS_HTA = "# needs the hta extra"


def examples() -> list[tuple[str, str]]:
    """``(code, expected output)`` pairs; a code block without output expects none."""
    blocks = BLOCK.findall((ROOT / "docs" / "api.md").read_text(encoding="utf-8"))
    pairs: list[tuple[str, str]] = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            follows = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
            pairs.append((body, follows[1] if follows[0] == "text" else ""))
    return pairs


def test_the_example_has_code_and_outputs() -> None:
    pairs = examples()
    assert len(pairs) >= 6
    assert sum(bool(out) for _, out in pairs) >= 5


def test_worked_example_prints_what_the_doc_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    has_hta = importlib.util.find_spec("hta") is not None
    namespace: dict[str, object] = {}
    ran = 0
    for code, expected in examples():
        if code.startswith(NEEDS_HTA) and not has_hta:
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/api.md", "exec"), namespace)
        assert out.getvalue() == expected, code
        ran += 1
    assert ran >= 6
    assert os.getcwd() == str(ROOT)
