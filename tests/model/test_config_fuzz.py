"""Workload configs with random mistakes: parsing (and building the cluster from the parsed
config) either succeeds or raises a one-line ConfigError naming the file - never another
exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from echo_view.errors import EchoViewError
from echo_view.model.config_parse import parse_workload_config
from echo_view.sim.cluster import cluster_from_config
from tests.fuzz_data import ODD_VALUES, SETTINGS

BASE: dict[str, Any] = {
    "model": {"kind": "gpt", "layers": 8, "hidden": 1024, "heads": 16, "seq_len": 512,
              "vocab": 32000},
    "parallel": {"tp": 2, "pp": 2, "dp": 2, "virtual_stages": 2, "recompute": "selective",
                 "sequence_parallel": True},
    "batch": {"global": 16, "micro": 2},
    "cluster": {"gpu": "H100", "gpus_per_node": 4, "nodes": 2, "nic_gbytes_per_s": 50},
    "precision": {"dtype": "bf16"},
    "reference": {"step_time_s": 1.5, "source": "paper"},
}  # fmt: skip
KEYS = [(sec, key) for sec, table in BASE.items() for key in table] + [
    ("model", "ffn_hidden"), ("model", "kv_heads"), ("parallel", "cp"),
    ("parallel", "distributed_optimizer"), ("parallel", "first_stage_layers"),
    ("parallel", "last_stage_layers"), ("parallel", "account_for_embedding_in_pipeline_split"),
    ("parallel", "account_for_loss_in_pipeline_split"), ("cluster", "topology"),
    ("model", "bogus"),
]  # fmt: skip
VALUES = st.one_of(st.just("<delete>"), ODD_VALUES, st.integers(-2, 64))


@SETTINGS
@given(picks=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3))
def test_random_mistakes_are_config_errors(picks: list[tuple[tuple[str, str], Any]]) -> None:
    data = {k: dict(v) for k, v in BASE.items()}
    for (section, key), value in picks:
        if value == "<delete>":
            data[section].pop(key, None)
        else:
            data[section][key] = value
    try:
        cfg = parse_workload_config(data, "run.toml")
        cluster_from_config(cfg.cluster, cfg.source)
    except EchoViewError as err:
        assert "\n" not in str(err) and "run.toml" in str(err), str(err)
