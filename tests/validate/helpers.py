"""Helpers for the validator tests: run ``check`` on paths the way the CLI does."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.cli.check import check_paths
from echo_view.validate import Report

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_check(*paths: Path, as_job: bool = False) -> Report:
    """The report ``echo-view check PATHS`` would print."""
    report = Report(keep=50)
    check_paths(list(paths), report, as_job)
    return report


def fixture(code: str, tag: str) -> Path:
    """The ``fail`` or ``pass`` fixture of ``code`` (a file or a job directory)."""
    hits = sorted(FIXTURES.glob(f"{code}_{tag}*"))
    if not hits:
        pytest.fail(f"{code} has no {tag} fixture in {FIXTURES}")
    return hits[0]
