"""Strict workload configs: the shipped and published configs parse; mistakes name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config import parse_workload_config
from tests.conftest import SAMPLES

BASE: dict[str, Any] = {
    "model": {
        "kind": "gpt",
        "layers": 96,
        "hidden": 12288,
        "heads": 96,
        "seq_len": 2048,
        "vocab": 51200,
    },
    "parallel": {"tp": 8, "pp": 8, "dp": 1, "virtual_stages": 3, "recompute": "selective"},
    "batch": {"global": 64, "micro": 1},
    "cluster": {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "nodes": 8, "nic_gbps_per_gpu": 200},
    "precision": {"dtype": "fp16"},
    "reference": {"step_time_s": 13.75, "source": "paper"},
}


def _with(section: str, **changes: Any) -> dict[str, Any]:
    data = {k: dict(v) for k, v in BASE.items()}
    for key, value in changes.items():
        if value is None:
            data[section].pop(key, None)
        else:
            data[section][key] = value
    return data


def test_a_valid_config_parses_with_defaults() -> None:
    cfg = parse_workload_config(BASE, "x.toml")
    assert cfg.model.ffn_hidden == 4 * 12288 and cfg.model.kv_heads == 96
    assert cfg.parallel.world_size == 64 and cfg.cluster.gpus == 64
    assert cfg.micro_batches == 64
    assert cfg.reference is not None and cfg.reference.step_time_s == 13.75


def _published_runs() -> list[Path]:
    # The shipped copies of ../shared/validation/runs (byte-identical).
    return sorted((SAMPLES / "configs" / "validation").glob("*.toml"))


@pytest.mark.parametrize("path", _published_runs(), ids=lambda p: p.name)
def test_every_published_run_parses(path: Path) -> None:
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    assert cfg.reference is not None


def test_published_runs_are_all_there() -> None:
    assert len(_published_runs()) == 10


@pytest.mark.parametrize(
    ("data", "where", "text"),
    [
        (_with("model", layres=3), "model.layres", "unknown key"),
        (_with("model", layers=None), "model.layers", "required key is missing"),
        (_with("model", layers="96"), "model.layers", "expected int"),
        (_with("parallel", tp=4), "parallel", "tp*pp*dp*cp = 4*8*1*1 = 32 GPUs"),
        (_with("model", layers=100), "model.layers", "do not split into pp*virtual_stages = 24"),
        (_with("model", heads=100, hidden=12200), "model.heads", "not divisible by tp = 8"),
        (_with("batch", micro=2, **{"global": 63}), "batch.global", "not divisible by micro*dp"),
        (_with("parallel", recompute="some"), "parallel.recompute", "must be one of"),
        (_with("precision", dtype="fp64"), "precision.dtype", "must be one of"),
        (_with("reference", step_time_s=-1), "reference.step_time_s", "must be positive"),
        (_with("model", kv_heads=7), "model.kv_heads", "not divisible by 7"),
    ],
)
def test_mistakes_name_the_key(data: dict[str, Any], where: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_workload_config(data, "bad.toml")
    assert info.value.where == where
    assert text in info.value.message
    assert info.value.one_line().startswith("bad.toml: ")


def test_unknown_and_missing_tables() -> None:
    with pytest.raises(ConfigError, match=r"unknown table \[modle\]"):
        parse_workload_config({**BASE, "modle": {}})
    data = dict(BASE)
    del data["batch"]
    with pytest.raises(ConfigError, match=r"required table \[batch\] is missing"):
        parse_workload_config(data)


def test_other_cluster_keys_are_kept_for_the_cluster_model() -> None:
    cfg = parse_workload_config(_with("cluster", nvlink_gbps=300))
    assert dict(cfg.cluster.overrides) == {"nvlink_gbps": 300}
