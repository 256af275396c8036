"""Shared fixtures: where the real data lives, and skips when it is absent."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SHARED = ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"
#: Skip reason of tests that trace configs: torch is the optional ``trace`` extra.
TORCH_MISSING = "tracing needs torch, the optional extra: pip install -e '.[trace]'"


#: Folders of ../shared/data whose files samples/ ships (byte-identical; samples/README.md).
SHIPPED: dict[str, str] = {
    "param-et-replay/dlrm_kineto/": "dlrm_kineto/",
    "hta-tests/nccl_parser_config/": "hta_nccl/",
    "hta-tests/trace_filter/": "hta_sampled_128/",
    "nsys-ai-fixtures/": "nsys/",
    "echo-nccl-tests/": "echo_nccl_tests/",
}


def data_path(rel: str) -> Path:
    """A file of ``../shared/data`` by its path there: the copy in ``samples/`` when one ships,
    else the shared file (skipping the calling test when ``../shared`` is absent)."""
    for prefix, folder in SHIPPED.items():
        if rel.startswith(prefix) and (copy := SAMPLES / folder / rel[len(prefix) :]).is_file():
            return copy
    return shared_path("data", rel)


def shared_path(*parts: str) -> Path:
    """A path under ``../shared``; skips the calling test when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is not part of a user checkout)")
    return path


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as a module (the benches are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES
