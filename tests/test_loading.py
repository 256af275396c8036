"""``echo_view.loading``: which importer reads a job's paths, and one-line errors for paths that
are not one job."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.errors import InputError, UsageError
from echo_view.loading import build_registry, is_workload_input, job_importer, read_job

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_a_directory_of_ranks_is_one_job() -> None:
    job = read_job([SAMPLES / "dlrm_kineto"])
    assert job.ranks == tuple(range(8))
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[:2]
    assert read_job(files).ranks == (0, 1)


def test_paths_of_two_formats_or_none_are_refused() -> None:
    reg = build_registry()
    nsys = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"
    kineto = SAMPLES / "hta_nccl" / "nccl_data.json.gz"
    with pytest.raises(UsageError, match="one format"):
        job_importer(reg, [kineto, nsys])
    with pytest.raises(UsageError, match="no input path"):
        read_job([], reg)
    with pytest.raises(InputError, match="no such file"):
        read_job([SAMPLES / "absent.json"], reg)


def test_configs_and_graphs_are_workload_inputs() -> None:
    configs = SAMPLES / "configs"
    assert is_workload_input(configs / "gpt175b-1024xH100.toml")
    assert is_workload_input(configs / "gpt175b-1024xH100.graph.json.gz")
    assert not is_workload_input(SAMPLES / "hta_nccl" / "nccl_data.json.gz")
