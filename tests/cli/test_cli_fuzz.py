"""The commands on damaged traces that still import: a real trace with fields removed or
retyped goes through ``simulate`` (replay), ``export``, ``interference``, ``diff`` (against
its own export) and ``check --fix``, which exit 0, 1 (check's findings) or 2
(a one-line error) and never fail with an exception of their own."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from echo_view.cli import main
from tests.fuzz_data import BASE, BASE_TEXT, ODD_VALUES, SETTINGS

FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s"]
ARGS = ["External id", "correlation", "device", "stream", "grid", "block", "Collective name",
        "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Ranks",
        "Process Group Name", "Seq", "bytes", "Input Dims"]  # fmt: skip


def _run(argv: list[str]) -> int:
    out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1, 2), (argv, code, err.getvalue())
    if code == 2:
        assert err.getvalue().count("\n") == 1, err.getvalue()
    return code


@SETTINGS
@given(
    picks=st.lists(
        st.tuples(
            st.integers(0, len(BASE["traceEvents"]) - 1),
            st.sampled_from(FIELDS + [f"args.{a}" for a in ARGS]),
            st.one_of(st.just("<delete>"), ODD_VALUES),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_commands_on_damaged_traces(picks: list[tuple[int, str, Any]]) -> None:
    doc = json.loads(BASE_TEXT)
    for i, key, value in picks:
        node = doc["traceEvents"][i]
        if key.startswith("args."):
            node = node.get("args")
            key = key[5:]
            if not isinstance(node, dict):
                continue
        if value == "<delete>":
            node.pop(key, None)
        else:
            node[key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        if _run(["info", str(path), "--json"]) != 0:
            return  # not importable: the importer's one-line error, tested elsewhere
        _run(["simulate", str(path), "--json"])
        _run(["simulate", str(path), "--json", "--set", "comm.scale=0.5"])
        _run(["export", str(path), "-o", str(Path(tmp) / "out.json")])
        _run(["export", str(path), "-o", str(Path(tmp) / "out.pftrace")])
        _run(["interference", str(path), "--json"])
        _run(["diff", str(path), str(Path(tmp) / "out.json"), "--json"])
        _run(["check", str(path), "--fix", "-o", str(Path(tmp) / "fixed.json")])
