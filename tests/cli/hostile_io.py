"""Helpers for the I/O hostile-input tests: fingerprints of inputs, and the contract a refused
command must keep (exit 2, exactly one line on stderr, no traceback, inputs unchanged, no output
and no temporary file left)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from echo_view.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DLRM = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
CONFIGS = SAMPLES / "configs" / "megatron-ci-small"


def fingerprint(*paths: Path) -> dict[str, tuple[str, int]]:
    """SHA-256 and mtime (ns) of every file under ``paths``."""
    out: dict[str, tuple[str, int]] = {}
    for p in paths:
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                out[str(f)] = (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
    return out


def listing(directory: Path) -> list[str]:
    """Every name under ``directory``, hidden temporary files included."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def refused(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    workdir: Path,
    inputs: list[Path],
    expect: str,
) -> str:
    """Run ``main(argv)`` in-process and check the refusal contract; returns the error line."""
    before, names = fingerprint(*inputs), listing(workdir)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("echo-view: error: "), err
    assert "Traceback" not in err
    assert expect in err, err
    assert fingerprint(*inputs) == before
    assert listing(workdir) == names  # no output, no hidden .tmp
    return err.strip()


def run_cli(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m echo_view ARGV`` in a subprocess (for inputs that would block or exhaust
    memory in-process if a check regressed: the timeout then fails the test)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "echo_view", *argv],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
    )


def gzip_bomb(
    path: Path, inflated: int, head: bytes = b"", tail: bytes = b"", fill: bytes = b" "
) -> Path:
    """A gzip file of ``head``, ``inflated`` bytes of ``fill`` and ``tail``: whitespace or zero
    bombs compress about 1000x, the ratio of the multi-GB bombs, at a size fit for tests."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = fill * (1 << 20)
    with path.open("wb") as fh:
        fh.write(z.compress(head))
        for start in range(0, inflated, len(block)):
            fh.write(z.compress(block[: min(len(block), inflated - start)]))
        fh.write(z.compress(tail) + z.flush())
    return path
