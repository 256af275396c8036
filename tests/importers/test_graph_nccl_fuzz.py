"""Damaged traced graphs and nccl-tests logs: the readers return a result or raise a one-line
EchoViewError naming the file, never another exception."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from echo_view.errors import EchoViewError
from importers.graph import read_graph
from importers.nccl_tests import parse_nccl_tests
from tests.conftest import SAMPLES
from tests.fuzz_data import ODD_VALUES, SETTINGS, apply_edits, byte_edits

GRAPH = gzip.decompress(
    (SAMPLES / "configs" / "validation" / "megatron-ci-7b-tp4-pp1.graph.json.gz").read_bytes()
)
GRAPH_DOC = json.loads(GRAPH)
NCCL_LOG = SAMPLES / "echo_nccl_tests" / "nccl_16.log"


def _graph(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.graph.json"
        path.write_bytes(data)
        try:
            read_graph(path)
        except EchoViewError as err:
            assert "\n" not in str(err) and path.name in str(err), str(err)


def test_the_graph_reads() -> None:
    _graph(GRAPH)


@SETTINGS
@given(cut=st.integers(0, len(GRAPH) - 1))
def test_graph_truncated(cut: int) -> None:
    _graph(GRAPH[:cut])


@SETTINGS
@given(edits=byte_edits(len(GRAPH)))
def test_graph_bytes_replaced(edits: list[tuple[int, bytes]]) -> None:
    _graph(apply_edits(GRAPH, edits))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of ``doc`` (lists: their first three items)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _paths(v, (*prefix, i))
    return out


GRAPH_PATHS = _paths(GRAPH_DOC)


@SETTINGS
@given(picks=st.lists(st.tuples(st.sampled_from(GRAPH_PATHS), ODD_VALUES), min_size=1,
                      max_size=3))  # fmt: skip
def test_graph_values_retyped(picks: list[tuple[tuple[Any, ...], Any]]) -> None:
    doc = json.loads(GRAPH)
    for keys, value in picks:
        node = doc
        try:
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier pick changed the shape above this path
    _graph(json.dumps(doc).encode())


@SETTINGS
@given(data=st.data())
def test_nccl_tests_log_lines_damaged(data: st.DataObject) -> None:
    lines = NCCL_LOG.read_text(encoding="utf-8").splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        words = lines[i].split()
        if words and data.draw(st.booleans()):
            j = data.draw(st.integers(0, len(words) - 1))
            words[j] = data.draw(st.sampled_from(["", "-", "nan", "1e999", "-5", "x", "0"]))
            lines[i] = " ".join(words)
        else:
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    try:
        parse_nccl_tests(NCCL_LOG, "\n".join(lines))
    except EchoViewError as err:
        assert "\n" not in str(err) and NCCL_LOG.name in str(err), str(err)
