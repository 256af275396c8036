"""``--set parallel.KEY=VALUE`` on a workload config (echo_view.model.config_settings)."""

from __future__ import annotations

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config import SIMULATION_ONLY
from echo_view.model.config_keys import tracing_key
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.config_settings import (
    PARALLEL_SET_KEYS,
    setting_value,
    with_parallel_settings,
)

BASE = {
    "model": {"kind": "gpt", "layers": 8, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 100},
    "parallel": {
        "tp": 1,
        "pp": 4,
        "dp": 2,
        "virtual_stages": 2,
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
    },
    "batch": {"global": 8, "micro": 1},
    "cluster": {"gpu": "H100", "gpus_per_node": 8, "nodes": 1},
    "precision": {"dtype": "bf16"},
}


def test_values_read_as_toml_with_either_case_booleans() -> None:
    assert setting_value("true") is True and setting_value("False") is False
    assert setting_value("40000000") == 40_000_000
    assert setting_value('"ring"') == "ring" and setting_value("ring") == "ring"
    # One scalar only: arrays, tables and extra lines stay text (refused by the key's check).
    deep = "[" * 50_000
    assert setting_value(deep) == deep and setting_value("1\nv = 2") == "1\nv = 2"
    assert setting_value("{a = 1}") == "{a = 1}"
    assert setting_value("9" * 5000) == "9" * 5000  # past int()'s digit limit: text


def test_settings_apply_and_keep_the_tracing_key() -> None:
    cfg = parse_workload_config(BASE, "x.toml")
    out = with_parallel_settings(
        cfg,
        {
            "parallel.align_param_gather": "false",
            "parallel.ddp_bucket_size": "1000000",
            "compute.scale.gemm": "2",  # (not this function's)
        },
    )
    assert cfg.parallel.align_param_gather is True
    assert out.parallel.align_param_gather is False and out.parallel.ddp_bucket_size == 10**6
    assert tracing_key(out) == tracing_key(cfg) and out.source == cfg.source
    assert with_parallel_settings(cfg, {}) is cfg


def test_settings_are_checked_as_the_file_is() -> None:
    cfg = parse_workload_config(BASE, "x.toml")
    # A key that needs another setting the config lacks.
    with pytest.raises(ConfigError, match="fsdp_grad_sync: applies to FSDP only"):
        with_parallel_settings(cfg, {"parallel.fsdp_grad_sync": "last_microbatch"})
    bad = {"parallel.overlap_param_gather": "true", "parallel.ddp_bucket_size": "-1"}
    with pytest.raises(ConfigError, match="ddp_bucket_size") as err2:
        with_parallel_settings(cfg, bad)
    assert err2.value.where == "--set" and err2.value.path == "x.toml"
    # A long value is quoted cut short: the message stays one short line.
    with pytest.raises(ConfigError) as err3:
        with_parallel_settings(cfg, {"parallel.ddp_bucket_size": "[" * 50_000})
    assert "expected int, got str '[[[" in err3.value.message
    assert len(err3.value.one_line()) < 200


def test_only_keys_that_keep_the_graph_are_settable() -> None:
    assert "parallel.fsdp" not in PARALLEL_SET_KEYS
    assert {k.removeprefix("parallel.") for k in PARALLEL_SET_KEYS} == set(SIMULATION_ONLY) - {
        "fsdp"
    }
