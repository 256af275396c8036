"""One schema-name convention for every ``--json`` output, built in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from echo_view.model.schema import SCHEMA_PATTERN, json_schema

ROOT = Path(__file__).resolve().parents[2]


def test_json_schema_names() -> None:
    assert json_schema("check") == "echo-view.check/1"
    assert json_schema("calibrate-comm", 2) == "echo-view.calibrate-comm/2"
    for bad in ("Check", "check/1", "a b", ""):
        with pytest.raises(ValueError):
            json_schema(bad)


def test_no_schema_name_is_spelt_by_hand() -> None:
    name = re.compile(r"echo-view[./][a-z-]+/\d+")
    for path in (ROOT / "echo_view").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not name.fullmatch(node.value), f"{path}:{node.lineno}"


@pytest.mark.parametrize("doc", ["docs/cli.md", "docs/validation-codes.md"])
def test_documented_names_follow_the_convention(doc: str) -> None:
    names = re.findall(r"echo-view[./][a-z-]+/\d+", (ROOT / doc).read_text(encoding="utf-8"))
    assert names and all(SCHEMA_PATTERN.fullmatch(n) for n in names), names
