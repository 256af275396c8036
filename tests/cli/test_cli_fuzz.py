"""The commands on damaged traces that still import: a real trace with fields removed or
retyped goes through ``simulate`` (replay), ``export``, ``interference``, ``diff`` (against
its own export) and ``check --fix``, which exit 0, 1 (check's findings) or 2
(a one-line error) and never fail with an exception of their own."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from hypothesis import given

from echo_view.cli import main
from tests.fuzz_data import (
    EVENT_FIELDS,
    SETTINGS,
    Pick,
    damaged,
    field_picks,
)

FIELDS = [f for f in EVENT_FIELDS if f != "args"]
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
@given(picks=field_picks(FIELDS + [f"args.{a}" for a in ARGS]))
def test_commands_on_damaged_traces(picks: list[Pick]) -> None:
    doc = damaged(picks)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json"
        path.write_bytes(doc)
        if _run(["info", str(path), "--json"]) != 0:
            return  # not importable: the importer's one-line error, tested elsewhere
        _run(["simulate", str(path), "--json"])
        _run(["simulate", str(path), "--json", "--set", "comm.scale=0.5"])
        _run(["export", str(path), "-o", str(Path(tmp) / "out.json")])
        _run(["export", str(path), "-o", str(Path(tmp) / "out.pftrace")])
        _run(["interference", str(path), "--json"])
        _run(["diff", str(path), str(Path(tmp) / "out.json"), "--json"])
        _run(["check", str(path), "--fix", "-o", str(Path(tmp) / "fixed.json")])
