"""Shared fixtures: where the real data lives, and skips when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SHARED = ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"
#: Skip reason of tests that trace configs: torch is the optional ``trace`` extra.
TORCH_MISSING = "tracing needs torch, the optional extra: pip install -e '.[trace]'"


def shared_path(*parts: str) -> Path:
    """A path under ``../shared``; skips the calling test when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is not part of a user checkout)")
    return path


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES
