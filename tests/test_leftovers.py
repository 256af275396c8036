"""Temporary files of killed commands: removed by the next command that makes one of a kind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from echo_view.formats import atomic_output
from echo_view.leftovers import alive, sweep, tagged


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_sweep_removes_what_a_gone_process_left_and_nothing_else(tmp_path: Path) -> None:
    dead = _dead_pid()
    assert not alive(dead) and alive(os.getpid())
    stale_file = tmp_path / f".out.json.{dead}-x1.tmp"
    stale_file.write_text("half")
    stale_dir = tmp_path / f"echo-view-nsys-{dead}-y"
    stale_dir.mkdir()
    (stale_dir / "db.sqlite").write_bytes(b"x" * 10)
    keep = [
        tmp_path / f".out.json.{os.getpid()}-x2.tmp",  # a living command's
        tmp_path / f".out.json.gz.{dead}-x3.tmp",  # another output's
        tmp_path / f".out.json.{dead}-x4.part",  # not a temporary of this kind
        tmp_path / "out.json",
    ]
    for path in keep:
        path.write_text("k")
    assert sweep(tmp_path, ".out.json.", ".tmp") == [stale_file]
    assert sweep(tmp_path, "echo-view-nsys-") == [stale_dir]
    assert all(p.exists() for p in keep) and not stale_file.exists() and not stale_dir.exists()
    assert tagged("p-") == f"p-{os.getpid()}-"


def test_an_output_write_removes_what_a_killed_write_of_it_left(tmp_path: Path) -> None:
    # A SIGKILL during a write left the hidden temporary (150-270 MB for a large export); no
    # later write removed it.
    out = tmp_path / "big.json"
    stale = tmp_path / f".big.json.{_dead_pid()}-k.tmp"
    stale.write_bytes(b"x" * 1000)
    with atomic_output(out) as tmp:
        assert tmp.name.startswith(f".big.json.{os.getpid()}-")
        tmp.write_text("{}")
    assert out.read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]
