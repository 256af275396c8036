"""MoE keys of a workload config: defaults, round trip, and the layout rules (one-line errors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config import moe_dense_prefix
from echo_view.model.config_keys import config_to_mapping, tracing_key
from echo_view.model.config_parse import parse_workload_config
from tests.moe_data import moe_data

ROOT = Path(__file__).resolve().parents[2]


def _data(model: dict[str, Any] | None = None, **par: Any) -> dict[str, Any]:
    shape = {"layers": 4, "hidden": 256, "seq_len": 128, "vocab": 1024, "ffn_hidden": 1024}
    data = moe_data({**shape, "activation": "gelu", **(model or {})}, {"pp": 2, **par}, nodes=2)
    for key in ("top_k", "moe_ffn_hidden"):
        if key not in (model or {}):
            del data["model"][key]
    return data


def test_defaults_follow_megatron_core() -> None:
    cfg = parse_workload_config(_data())
    moe = cfg.model.moe
    assert moe is not None
    assert (moe.top_k, moe.moe_ffn_hidden, moe.shared_ffn_hidden) == (2, 1024, 0)
    assert (moe.router, moe.dispatcher, moe.capacity_factor) == ("softmax", "alltoall", None)
    assert moe.load_balancing == "aux_loss"
    assert moe.routing_imbalance == moe.imbalance == 1.0
    assert moe.moe_grouped_gemm  # grouped, as every shipped MoE config runs its experts
    # etp defaults to tp; the stage's 8 ranks fold into etp 1 x ep 4 x edp 2
    assert (cfg.parallel.expert_tp, cfg.parallel.expert_dp) == (1, 2)


def test_shared_ffn_defaults_to_shared_experts_times_expert_size() -> None:
    cfg = parse_workload_config(_data({"moe_ffn_hidden": 64, "shared_experts": 2}))
    assert cfg.model.moe is not None and cfg.model.moe.shared_ffn_hidden == 128


def test_capacity_factor_caps_the_imbalance() -> None:
    cfg = parse_workload_config(_data({"routing_imbalance": 3.0, "capacity_factor": 1.25}))
    assert cfg.model.moe is not None and cfg.model.moe.imbalance == 1.25


def test_round_trip_and_dense_configs_keep_their_key() -> None:
    data = _data({"top_k": 1, "first_dense_layers": 1, "dispatcher": "deepep"}, etp=1)
    cfg = parse_workload_config(data)
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg)["parallel"]["ep"] == 4
    dense = _data()
    del dense["model"]["experts"]
    del dense["parallel"]["ep"]
    key = tracing_key(parse_workload_config(dense))
    assert "experts" not in key["model"] and "ep" not in key["parallel"]


def test_node_limit_round_trips_and_leaves_the_traced_graph_alone() -> None:
    """The node limit changes only how DeepEP's traffic is timed, not a rank's ops."""
    data = _data({"dispatcher": "deepep", "moe_node_limit": 1}, etp=1)
    cfg = parse_workload_config(data)
    assert cfg.model.moe is not None and cfg.model.moe.moe_node_limit == 1
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    del data["model"]["moe_node_limit"]
    free = parse_workload_config(data)
    assert free.model.moe is not None and free.model.moe.moe_node_limit is None
    assert tracing_key(cfg) == tracing_key(free)
    assert "moe_node_limit" not in config_to_mapping(free)["model"]


def test_sequential_experts_round_trip_and_enter_the_tracing_key_only_when_set() -> None:
    """``moe_grouped_gemm = false`` traces other ops (one GEMM per expert), so it is part of
    the tracing key; left at its default it is not, and configs traced before keep their key."""
    data = _data({"moe_grouped_gemm": False})
    cfg = parse_workload_config(data)
    assert cfg.model.moe is not None and not cfg.model.moe.moe_grouped_gemm
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg)["model"]["moe_grouped_gemm"] is False
    del data["model"]["moe_grouped_gemm"]
    grouped = parse_workload_config(data)
    assert "moe_grouped_gemm" not in tracing_key(grouped)["model"]
    assert "moe_grouped_gemm" not in config_to_mapping(grouped)["model"]


def test_load_balancing_round_trips_and_enters_the_tracing_key_only_when_set() -> None:
    data = _data({"load_balancing": "none"})
    cfg = parse_workload_config(data)
    assert cfg.model.moe is not None and cfg.model.moe.load_balancing == "none"
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg)["model"]["load_balancing"] == "none"
    del data["model"]["load_balancing"]
    assert "load_balancing" not in tracing_key(parse_workload_config(data))["model"]


def test_dense_layers_lie_in_the_first_chunk() -> None:
    cfg = parse_workload_config(_data({"first_dense_layers": 2}))
    assert [moe_dense_prefix(cfg, c) for c in range(2)] == [2, 0]


@pytest.mark.parametrize(
    ("model", "par", "where", "text"),
    [
        ({"experts": 6}, {}, "parallel.ep", "6 experts do not split over ep = 4"),
        ({}, {"ep": 8, "etp": 2, "tp": 2, "dp": 4, "sequence_parallel": True}, "parallel.ep",
         "does not divide"),
        ({"experts": None, "top_k": 2}, {"ep": 1}, "model.top_k", "needs model.experts"),
        ({"experts": None}, {}, "parallel.ep", "needs an MoE model"),
        ({"routing_imbalance": 0.5}, {}, "model.routing_imbalance", "between 1 and"),
        ({"routing_imbalance": 9.0}, {}, "model.routing_imbalance", "between 1 and"),
        ({"capacity_factor": 0.5}, {}, "model.capacity_factor", "between 1 and"),
        ({"top_k": 9}, {}, "model.top_k", "from 1 to 8"),
        ({"first_dense_layers": 3}, {}, "model.first_dense_layers", "first model chunk"),
        ({"first_dense_layers": 4}, {"pp": 1, "dp": 16}, "model.first_dense_layers",
         "no MoE layer"),
        ({"shared_ffn_hidden": 64}, {}, "model.shared_ffn_hidden", "shared_experts >= 1"),
        ({}, {"tp": 2, "dp": 4}, "parallel.sequence_parallel", "sequence_parallel = true"),
        ({"dispatcher": "deepep"}, {"etp": 2, "sequence_parallel": True}, "model.dispatcher",
         "etp = 1"),
        ({"dispatcher": "ring"}, {}, "model.dispatcher", "alltoall, allgather, deepep"),
        ({"load_balancing": "sinkhorn"}, {}, "model.load_balancing",
         "aux_loss, seq_aux_loss, none"),
        ({"moe_node_limit": 0}, {}, "model.moe_node_limit", "from 1 to 8"),
        ({"experts": None, "moe_node_limit": 2}, {"ep": 1}, "model.moe_node_limit",
         "needs model.experts"),
        ({"moe_grouped_gemm": "no"}, {}, "model.moe_grouped_gemm", "expected bool"),
        ({"experts": None, "moe_grouped_gemm": False}, {"ep": 1}, "model.moe_grouped_gemm",
         "needs model.experts"),
        ({}, {"tp": 2, "dp": 4, "sequence_parallel": True, "tp_comm_overlap": True},
         "parallel.tp_comm_overlap", "not modelled with MoE"),
    ],
)  # fmt: skip
def test_layout_errors_name_the_key(
    model: dict[str, Any], par: dict[str, Any], where: str, text: str
) -> None:
    data = _data({k: v for k, v in model.items() if v is not None}, **par)
    if "experts" in model and model["experts"] is None:
        del data["model"]["experts"]
    with pytest.raises(ConfigError) as err:
        parse_workload_config(data, "moe.toml")
    assert err.value.where == where
    assert text in str(err.value)
    assert "\n" not in str(err.value)


def test_the_command_line_says_one_line_and_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "moe.toml"
    cfg.write_text(
        '[model]\nkind = "gpt"\nlayers = 4\nhidden = 256\nheads = 4\nseq_len = 128\n'
        "vocab = 1024\nexperts = 8\n[parallel]\ntp = 1\npp = 1\ndp = 16\nep = 3\n"
        '[batch]\nglobal = 16\nmicro = 1\n[cluster]\ngpu = "H100"\ngpus_per_node = 8\n'
        'nodes = 2\n[precision]\ndtype = "bf16"\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "echo_view", "simulate", str(cfg)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert "parallel.ep: 8 experts do not split over ep = 3" in run.stderr
