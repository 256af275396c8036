"""Fixtures for the TUI tests: the synthetic job and the real 8-rank DLRM sample."""

from __future__ import annotations

import pytest

from echo_view.model import Job
from importers.kineto import KinetoImporter
from tests.tui.appkit import DLRM, synth_job


@pytest.fixture(scope="session")
def synth() -> Job:
    return synth_job()


@pytest.fixture(scope="session")
def dlrm() -> Job:
    """The real 8-rank DLRM job, read by the Kineto importer."""
    return KinetoImporter().read([DLRM])
