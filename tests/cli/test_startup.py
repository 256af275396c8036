"""``echo-view --help`` and ``--version`` import no command's heavy dependencies (numpy, rich's
tables, textual, msgspec, the simulator): each command's module loads only when it runs.
Checked on ``sys.modules`` in a fresh interpreter, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "rich", "textual", "msgspec", "perfetto", "echo_view.model", "echo_view.sim")

_PROBE = """
import contextlib, io, json, sys
from echo_view.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def _modules(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("argv", [["--help"], ["--version"]], ids=["help", "version"])
def test_top_level_help_and_version_import_nothing_heavy(argv: list[str]) -> None:
    loaded = _modules(*argv)
    assert "echo_view.cli" in loaded
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []
    assert not any(m.startswith("echo_view.cli.") for m in loaded)  # no command module


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _modules("comm", "--help")
    assert "echo_view.cli.comm" in loaded
    assert "numpy" in loaded  # what comm uses
    assert "echo_view.cli.tui" not in loaded and "textual" not in loaded
    assert "echo_view.cli.check" not in loaded
