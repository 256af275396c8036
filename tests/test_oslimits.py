"""The limit on open files: raised within the hard limit, never lowered (each case in a
subprocess, so that this one's limit stays as it is)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest


def _after(hard: int, ask: str) -> tuple[int, int]:
    """(what ``raise_open_files(ask)`` returned, the soft limit then) in a process started at
    a soft limit of 256 and a hard one of ``hard``."""
    code = (
        "import resource\n"
        "from echo_view.oslimits import raise_open_files\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard}))\n"
        f"got = raise_open_files({ask})\n"
        "print(got, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got, soft = done.stdout.split()
    return int(got), int(soft)


@pytest.fixture
def hard() -> int:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if limit != resource.RLIM_INFINITY and limit < 1024:
        pytest.skip(f"this machine's hard limit on open files is {limit}")
    return 1024  # a process may lower its hard limit to this and test under it


def test_the_soft_limit_is_raised_to_what_is_asked(hard: int) -> None:
    assert _after(hard, "300") == (300, 300)


def test_by_default_the_soft_limit_is_raised_to_the_hard_one(hard: int) -> None:
    assert _after(hard, "") == (1024, 1024)


def test_a_limit_above_the_hard_one_leaves_the_soft_one(hard: int) -> None:
    assert _after(hard, "5000") == (256, 256)


def test_the_soft_limit_is_never_lowered(hard: int) -> None:
    assert _after(hard, "100") == (256, 256)
