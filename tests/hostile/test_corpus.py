"""Every hostile input of ``tests/hostile/corpus.py`` through the installed command line, in a
child process: one line on stderr and exit 2 (or the documented finding, or the text shown as
text), no traceback, no output file, and time and peak memory within a generous factor of the
same command on a tiny valid input measured in the same run (never an absolute time)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.hostile.corpus import CASES, Case, valid_trace

#: How much slower / larger than the valid baseline a refused input may be.
TIME_FACTOR = 15.0
MEMORY_FACTOR = 4.0
#: Address-space cap of each child (a runaway allocation fails fast instead of swapping).
ADDRESS_SPACE = 8 << 30


@dataclass(frozen=True)
class Run:
    code: int
    stdout: bytes
    stderr: str
    seconds: float
    peak_kib: int


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_measured(argv: list[str], cwd: Path, timeout: float) -> Run:
    """``python -m echo_view ARGV`` in a child, with its exit code, output, wall time and its
    own peak RSS (``os.wait4``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "ECHO_VIEW_CACHE": str(cwd)}
    out_path, err_path = cwd / ".stdout", cwd / ".stderr"
    t0 = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echo_view", *argv],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=_limit,
        )
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"{argv}: still running after {timeout:.0f} s (a hang)")
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    stdout, stderr = out_path.read_bytes(), err_path.read_text(errors="replace")
    out_path.unlink()
    err_path.unlink()
    return Run(proc.returncode, stdout, stderr, seconds, usage.ru_maxrss)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``info`` and ``check`` on the tiny valid trace: the slower of the two is the yardstick."""
    d = tmp_path_factory.mktemp("valid")
    valid_trace(d)
    runs = [run_measured([cmd, str(d / "t.json")], d, 300) for cmd in ("info", "check")]
    for r in runs:
        assert r.code == 0, r.stderr
    return max(runs, key=lambda r: r.seconds)


def _argv(template: tuple[str, ...], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in template]


def check_run(case: Case, argv: list[str], run: Run, d: Path) -> None:
    """The outcome ``case.expect`` asks for."""
    assert "Traceback" not in run.stderr, (argv, run.stderr)
    if case.expect == "error" and argv[0] == "check" and not run.stderr:
        # check's own contract: an unusable input is reported (EV1xx) with exit code 2.
        assert run.code == 2 and b"UNUSABLE" in run.stdout, (argv, run.code, run.stdout[-2000:])
    elif case.expect == "error":
        assert run.code == 2, (argv, run.code, run.stderr)
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("echo-view: error: "), (
            argv,
            run.stderr,
        )
        assert case.names.replace("{d}", str(d)) in run.stderr, ("no file named", run.stderr)
        assert not (d / case.output).exists(), "an output file was written"
    elif case.expect.startswith("finding:"):
        code = case.expect.split(":")[1]
        assert run.code == 1, (argv, run.code, run.stderr)
        assert code.encode() in run.stdout, (argv, run.stdout[-2000:])
    elif case.expect.startswith("note:"):
        code = case.expect.split(":")[1]
        assert run.code == 0, (argv, run.code, run.stderr)
        assert code.encode() in run.stdout, (argv, run.stdout[-2000:])
    elif case.expect == "ok":
        assert run.code in (0, 1), (argv, run.code, run.stderr)
    else:
        assert case.expect == "shown"
        assert run.code == 0, (argv, run.stderr)
        for byte in (b"\x1b", b"\x07", b"\x08", b"\r", "\x9b".encode()):
            assert byte not in run.stdout, (argv, byte)
        if argv[0] in ("info", "diff"):  # they list kernel names
            assert b"[/]" in run.stdout, argv
    assert case.absent not in run.stdout, (argv, case.absent)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, baseline: Run, tmp_path: Path) -> None:
    case.build(tmp_path)
    for template in case.argvs:
        argv = _argv(template, tmp_path)
        run = run_measured(argv, tmp_path, timeout=60 * baseline.seconds)
        check_run(case, argv, run, tmp_path)
        assert run.seconds <= TIME_FACTOR * baseline.seconds, (argv, run.seconds)
        assert run.peak_kib <= MEMORY_FACTOR * baseline.peak_kib, (argv, run.peak_kib)
