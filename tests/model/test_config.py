"""Strict workload configs: the shipped and published configs parse; mistakes name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config import (
    WorkloadConfig,
    chunk_layers,
    ddp_bucket_params,
    grad_reduce_bytes,
)
from echo_view.model.config_keys import chunk_key, config_to_mapping, tracing_key
from echo_view.model.config_parse import parse_workload_config
from tests.conftest import SAMPLES, SHARED

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
    "cluster": {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "nodes": 8, "nic_gbytes_per_s": 25},
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


def test_reference_source_id_groups_runs_and_round_trips() -> None:
    data = _with("reference", source_id="korthikanti2022")
    cfg = parse_workload_config(data, "x.toml")
    assert cfg.reference is not None and cfg.reference.source_id == "korthikanti2022"
    assert config_to_mapping(cfg)["reference"]["source_id"] == "korthikanti2022"
    assert parse_workload_config(config_to_mapping(cfg), "y.toml") == parse_workload_config(
        data, "y.toml"
    )
    assert parse_workload_config(BASE, "x.toml").reference.source_id == ""  # type: ignore[union-attr]


def test_every_shipped_validation_run_names_its_source() -> None:
    for path in sorted((SAMPLES / "configs" / "validation").glob("*.toml")):
        cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
        assert cfg.reference is not None and cfg.reference.source_id, path.name


def _published_runs() -> list[Path]:
    # The shipped validation configs, ../shared/validation/runs' ten among them.
    return sorted((SAMPLES / "configs" / "validation").glob("*.toml"))


@pytest.mark.parametrize("path", _published_runs(), ids=lambda p: p.name)
def test_every_published_run_parses(path: Path) -> None:
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    assert cfg.reference is not None


def test_published_runs_are_all_there() -> None:
    """63 shipped runs (docs/accuracy.md: 48 dense, 15 MoE), every one of
    ../shared/validation/runs among them."""
    names = {p.name for p in _published_runs()}
    assert len(names) == 63
    assert len({n for n in names if n.startswith("moe-")}) == 15
    shared = {p.name for p in (SHARED / "validation" / "runs").glob("*.toml")}
    assert shared <= names


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
        (_with("parallel", ddp_bucket_size=0), "parallel.ddp_bucket_size", "positive integer"),
        (_with("precision", dtype="fp64"), "precision.dtype", "must be one of"),
        (_with("reference", step_time_s=-1), "reference.step_time_s", "must be > 0 and <= 1e+06"),
        (_with("batch", **{"global": 10**12}), "batch.global", "limit of 16,777,216"),
        (_with("batch", **{"global": 2**64}), "batch.global", "limit of 16,777,216"),
        (_with("model", layers=16 * 10**8), "model.layers", "limit of 10,000"),
        (_with("batch", **{"global": 2**16 * 24, "micro": 1}), "batch.global", "micro-batches"),
        (_with("model", kv_heads=7), "model.kv_heads", "not divisible by 7"),
        # (tracing had failed with a RuntimeError: a rank held no row of the output layer)
        (_with("model", vocab=7), "model.vocab", "a vocabulary of 7 does not split over tp = 8"),
        # (it was rounded down per rank: ffn_hidden 5460 and 5461 simulated the same step)
        (_with("model", ffn_hidden=5461), "model.ffn_hidden", "5461 is not divisible by tp = 8"),
        (_with("model", activation="relu"), "model.activation", "must be one of gelu, swiglu"),
        (_with("model", tie_embeddings=1), "model.tie_embeddings", "expected bool"),
        (_with("precision", fp8_recipe="delayed"), "precision.fp8_recipe", 'needs dtype = "fp8"'),
        (_with("parallel", tp_comm_overlap=True), "parallel.tp_comm_overlap", "sequence_parallel"),
        (
            _with("parallel", microbatch_group_size_per_vp_stage=4),
            "parallel.microbatch_group_size_per_vp_stage",
            "between pp = 8 and the micro-batches per step (64)",
        ),
        (
            _with("parallel", microbatch_group_size_per_vp_stage=30),
            "parallel.microbatch_group_size_per_vp_stage",
            "(64 mod 30 = 4) must be empty or hold at least pp = 8",
        ),
        (
            _with("parallel", microbatch_group_size_per_vp_stage=8, virtual_stages=1),
            "parallel.microbatch_group_size_per_vp_stage",
            "only the interleaved schedule",
        ),
        (
            _with("parallel", overlap_p2p_comm=False, pp=2, dp=4),
            "parallel.overlap_p2p_comm",
            "needs pp > 2",
        ),
        (
            _with("parallel", overlap_param_gather=True),
            "parallel.overlap_param_gather",
            "distributed_optimizer",
        ),
        (
            _with("parallel", first_stage_layers=10, last_stage_layers=14),
            "parallel.first_stage_layers",
            "10 layers do not split into virtual_stages = 3",
        ),
        (
            _with("parallel", last_stage_layers=5),
            "parallel.last_stage_layers",
            "5 layers do not split into virtual_stages = 3",
        ),
        (
            _with("parallel", first_stage_layers=6, last_stage_layers=6),
            "parallel.virtual_stages",
            "the other stages' 14 layers each do not split into virtual_stages = 3",
        ),
        (
            _with("parallel", first_stage_layers=12, account_for_loss_in_pipeline_split=True),
            "parallel.first_stage_layers",
            "cannot be combined with account_for_embedding/loss_in_pipeline_split",
        ),
        (
            _with("parallel", account_for_embedding_in_pipeline_split=True),
            "model.layers",
            "96 layers + 1 (embedding/loss) = 97 do not split evenly over pp = 8",
        ),
        (
            _with(
                "model",
                layers=102,
            )
            | {
                "parallel": {
                    **BASE["parallel"],
                    "account_for_embedding_in_pipeline_split": True,
                    "account_for_loss_in_pipeline_split": True,
                }
            },
            "parallel.virtual_stages",
            "13 layers per stage (embedding/loss counted) do not split into virtual_stages = 3",
        ),
        (_with("parallel", fsdp="zero3"), "parallel.fsdp", "none, full_shard, shard_grad_op"),
        (BASE | {"training": {"clip_grad": -1.0}}, "training.clip_grad", "a number >= 0"),
        (
            BASE | {"training": {"clip_grad_norm": "apex"}},
            "training.clip_grad_norm",
            "megatron, torch; got 'apex'",
        ),
        (_with("model", cross_entropy="fused"), "model.cross_entropy", "megatron, torch"),
        (_with("model", cross_entropy="torch"), "model.cross_entropy", "needs tp = 1"),
        (_with("parallel", ddp="fsdp"), "parallel.ddp", "megatron, torch; got 'fsdp'"),
        (_with("parallel", ddp="torch"), "parallel.ddp", "fp32 parameters"),
        (_with("precision", autocast="yes"), "precision.autocast", "expected bool"),
        (_with("precision", autocast=True), "precision.autocast", "pp = 1, no experts"),
        (
            _with("precision", dtype="fp8", autocast=True),
            "precision.autocast",
            'needs dtype = "bf16" or "fp16"',
        ),
        (
            BASE | {"training": {"log_timers_to_tensorboard": True}},
            "training.log_timers_to_tensorboard",
            "unknown",
        ),
        (
            _with("parallel", fsdp="full_shard", fsdp_grad_sync="every"),
            "parallel.fsdp_grad_sync",
            "every_microbatch",
        ),
        (
            _with("parallel", fsdp_grad_sync="last_microbatch"),
            "parallel.fsdp_grad_sync",
            "applies to FSDP only",
        ),
        (
            _with(
                "parallel",
                fsdp="shard_grad_op",
                pp=1,
                dp=8,
                virtual_stages=1,
                distributed_optimizer=False,
            ),
            "parallel.fsdp",
            "distributed_optimizer = false",
        ),
        (
            _with(
                "parallel",
                fsdp="full_shard",
                pp=1,
                dp=8,
                virtual_stages=1,
                overlap_grad_reduce=True,
                overlap_param_gather=True,
            ),
            "parallel.overlap_param_gather",
            "FSDP gathers each unit's parameters itself",
        ),
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
    cfg = parse_workload_config(_with("cluster", nvlink_gbytes_per_s=300))
    assert dict(cfg.cluster.overrides) == {"nic_gbytes_per_s": 25, "nvlink_gbytes_per_s": 300}


@pytest.mark.parametrize(
    ("section", "key", "typo"),
    [
        ("model", "seq_len", "seqlen"),  # required: reported as missing, the typo named
        ("model", "ffn_hidden", "ffn_hiden"),  # optional: reported as unknown, the key suggested
        ("parallel", "virtual_stages", "virtual_stage"),
        ("parallel", "sequence_parallel", "sequence_paralel"),
        ("batch", "micro", "mirco"),
        ("cluster", "gpus_per_node", "gpu_per_node"),
        ("precision", "dtype", "dtyp"),
        ("reference", "source", "sorce"),
    ],
)
def test_a_misspelt_key_is_named_with_the_nearest_valid_one(
    section: str, key: str, typo: str
) -> None:
    data = {k: dict(v) for k, v in BASE.items()}
    data[section][typo] = data[section].pop(key, 1)
    with pytest.raises(ConfigError) as info:
        parse_workload_config(data, "bad.toml")
    line = info.value.one_line()
    assert f"did you mean {key!r}?" in line or f"is {typo!r} a misspelling of it?" in line, line
    assert key in (info.value.where or "") or typo in (info.value.where or "")


def test_a_misspelt_table_is_named_with_the_nearest_valid_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'parallel'\?"):
        parse_workload_config({**BASE, "paralel": {}})


def test_new_keys_default_to_megatron_gpt_and_leave_the_tracing_key_alone() -> None:
    cfg = parse_workload_config(BASE)
    m, p = cfg.model, cfg.parallel
    assert (m.activation, m.normalization, m.position, m.tie_embeddings) == (
        "gelu",
        "layernorm",
        "learned",
        True,
    )
    assert (p.tp_comm_overlap, p.overlap_param_gather, p.grad_reduce_in_fp32) == (
        False,
        False,
        None,
    )
    assert p.overlap_p2p_comm is True and p.batch_p2p_sync is True
    assert (cfg.training.clip_grad, cfg.training.log_num_zeros_in_grad) == (1.0, False)
    assert cfg.training.grad_checks == "fused"
    assert cfg.training.master_copies == "fused"
    assert "training" not in config_to_mapping(cfg)
    assert "master_copies" not in tracing_key(cfg)
    # The key of a config that sets none of them is the key graphs were shipped with.
    assert set(tracing_key(cfg)["model"]) == {
        "kind",
        "layers",
        "hidden",
        "heads",
        "seq_len",
        "vocab",
        "ffn_hidden",
        "kv_heads",
        "attention",
    }
    assert "fp8_recipe" not in tracing_key(cfg)


def test_simulation_only_keys_share_the_graph_and_model_keys_do_not() -> None:
    base = tracing_key(parse_workload_config(BASE))
    sim_only = _with(
        "parallel",
        overlap_p2p_comm=False,
        grad_reduce_in_fp32=False,
        sequence_parallel=True,
        tp_comm_overlap=True,
        ddp_bucket_size=1_000_000,
        batch_p2p_sync=False,
    ) | {"training": {"clip_grad": 0.0, "log_num_zeros_in_grad": True, "grad_checks": "per_tensor"}}
    fsdp = _with("parallel", pp=1, dp=8, virtual_stages=1, distributed_optimizer=True)
    fsdp_cfg = parse_workload_config(
        {**fsdp, "parallel": {**fsdp["parallel"], "fsdp": "full_shard"}}
    )
    assert fsdp_cfg.parallel.fsdp == "full_shard"
    # FSDP's graph lacks the additions to Megatron's main_grad, so it is traced on its own;
    # its sharding mode is the simulator's alone.
    assert tracing_key(fsdp_cfg) != tracing_key(parse_workload_config(fsdp))
    assert tracing_key(fsdp_cfg) == tracing_key(fsdp_cfg) | {"fsdp": True}
    grad_op = {**fsdp, "parallel": {**fsdp["parallel"], "fsdp": "shard_grad_op"}}
    assert tracing_key(parse_workload_config(grad_op)) == tracing_key(fsdp_cfg)
    with_sp = tracing_key(parse_workload_config(_with("parallel", sequence_parallel=True)))
    assert tracing_key(parse_workload_config(sim_only)) == with_sp
    assert with_sp != base
    llama = tracing_key(parse_workload_config(_with("model", activation="swiglu")))
    assert llama["model"]["activation"] == "swiglu"
    fp8 = parse_workload_config(_with("precision", dtype="fp8", fp8_recipe="blockwise"))
    assert tracing_key(fp8)["fp8_recipe"] == "blockwise"
    # FP16_Optimizer's per-tensor copies are traced (the optimizer phase's kernels).
    copies = parse_workload_config(BASE | {"training": {"master_copies": "per_tensor"}})
    assert tracing_key(copies)["master_copies"] == "per_tensor"
    flat = parse_workload_config(BASE | {"training": {"grad_allreduce": "flatten"}})
    assert tracing_key(flat)["grad_allreduce"] == "flatten"
    assert "grad_allreduce" not in tracing_key(parse_workload_config(BASE))
    # Deterministic algorithms' fills are traced; which buffers a layer allocates depends on
    # whose layers they are.
    det = parse_workload_config(BASE | {"training": {"deterministic": True}})
    assert tracing_key(det)["deterministic"] is True
    assert "deterministic" not in tracing_key(parse_workload_config(BASE))
    local = tracing_key(parse_workload_config(_with("model", transformer_impl="local")))
    assert local["model"]["transformer_impl"] == "local"


def test_deterministic_mode_and_the_layers_implementation() -> None:
    cfg = parse_workload_config(
        _with("model", transformer_impl="local") | {"training": {"deterministic": True}}
    )
    assert cfg.training.deterministic and cfg.model.transformer_impl == "local"
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    default = parse_workload_config(BASE)
    assert not default.training.deterministic
    assert default.model.transformer_impl == "transformer_engine"
    with pytest.raises(
        ConfigError, match=r"model\.transformer_impl: must be one of transformer_engine, local"
    ):
        parse_workload_config(_with("model", transformer_impl="apex"))
    script = _with("model", script="step.py") | {"training": {"deterministic": True}}
    script["parallel"] = {"tp": 1, "pp": 1, "dp": 64}
    with pytest.raises(ConfigError, match=r"training\.deterministic: is traced for the built-in"):
        parse_workload_config(script)


@pytest.mark.parametrize(
    ("parallel", "text"),
    [
        ({"distributed_optimizer": True}, "drop parallel.distributed_optimizer"),
        ({"overlap_grad_reduce": True}, "drop parallel.overlap_grad_reduce"),
        (
            {"ddp": "torch", "pp": 1, "dp": 8, "virtual_stages": 1},
            "leave parallel.ddp and parallel.fsdp unset",
        ),
    ],
)
def test_a_flattened_allreduce_refuses_what_megatron_of_2019_did_not_have(
    parallel: dict[str, Any], text: str
) -> None:
    data = _with("parallel", **parallel) | {"training": {"grad_allreduce": "flatten"}}
    if parallel.get("ddp") == "torch":  # PyTorch DDP is modelled with autocast's fp32 params
        data["precision"] = {**data["precision"], "autocast": True}
    with pytest.raises(ConfigError, match=rf"training\.grad_allreduce: .*{text}"):
        parse_workload_config(data)


def _parallel(layers: int, **parallel: Any) -> WorkloadConfig:
    data = _with("model", layers=layers)
    data["parallel"] = {"tp": 8, "dp": 1, "recompute": "selective", **parallel}
    data["cluster"]["nodes"] = parallel["pp"]
    return parse_workload_config(data)


def test_chunk_layers_follow_megatron_core() -> None:
    """Layers per (stage, local chunk), worked out by hand from Megatron-Core's rules."""
    # Even (get_num_layers_to_build's own example: 8 layers, 2 stages, vp 4 and vp 2).
    assert chunk_layers(_parallel(8, pp=2, virtual_stages=4), 1) == (1, 1, 1, 1)
    assert chunk_layers(_parallel(8, pp=2, virtual_stages=2), 0) == (2, 2)
    # --decoder-first/last-pipeline-num-layers 9 / 15 of 96 on pp 8, vp 3: each stage's count
    # is split over its 3 chunks; the other 6 stages hold (96 - 24) / 6 = 12, 4 per chunk.
    cfg = _parallel(96, pp=8, virtual_stages=3, first_stage_layers=9, last_stage_layers=15)
    assert [chunk_layers(cfg, s) for s in (0, 1, 6, 7)] == [(3,) * 3, (4,) * 3, (4,) * 3, (5,) * 3]
    assert sum(sum(chunk_layers(cfg, s)) for s in range(8)) == 96
    # Llama 3 405B: 126 layers on pp 16, the embedding and the loss each counted as a layer:
    # 128 / 16 = 8 per stage. vp 8: 1 per chunk, so the model's first chunk holds only the
    # embedding and its last only the output layer and loss (Dubey et al. 2024, sec. 3.3.2).
    both = {"account_for_embedding_in_pipeline_split": True}
    both["account_for_loss_in_pipeline_split"] = True
    llama = _parallel(126, pp=16, virtual_stages=8, **both)
    assert chunk_layers(llama, 0) == (0, 1, 1, 1, 1, 1, 1, 1)
    assert chunk_layers(llama, 7) == (1,) * 8
    assert chunk_layers(llama, 15) == (1, 1, 1, 1, 1, 1, 1, 0)
    assert chunk_layers(_parallel(126, pp=16, virtual_stages=2, **both), 0) == (3, 4)
    # Without interleaving both spellings give 7 + 14 x 8 + 7.
    plain = _parallel(126, pp=16, **both)
    firstlast = _parallel(126, pp=16, first_stage_layers=7, last_stage_layers=7)
    assert [chunk_layers(plain, s) for s in range(16)] == [
        chunk_layers(firstlast, s) for s in range(16)
    ]
    assert chunk_layers(plain, 0) == (7,) and chunk_layers(plain, 1) == (8,)


def test_chunk_key_ignores_the_pipeline_and_the_optimizer_only() -> None:
    """Layouts that differ in how layers are spread over stages, in dp or in the optimizer
    share a chunk key; the layer's own shape and sharding do not."""
    base = chunk_key(parse_workload_config(BASE))
    spread = _with("parallel", pp=4, dp=2, virtual_stages=2, distributed_optimizer=True)
    uneven = _with("parallel", pp=4, dp=2, virtual_stages=None, first_stage_layers=21)
    for data in (spread, uneven, _with("model", layers=48)):
        assert chunk_key(parse_workload_config(data)) == base
    others = [
        _with("parallel", tp=4, dp=2),
        _with("parallel", sequence_parallel=True),
        _with("parallel", recompute="full"),
        _with("batch", micro=2),
        _with("model", hidden=6144),
        _with("precision", dtype="bf16"),
    ]
    keys = {chunk_key(parse_workload_config(data)) for data in others}
    assert len(keys) == len(others) and base not in keys


def test_every_new_key_round_trips() -> None:
    data = _with(
        "model", activation="swiglu", normalization="rmsnorm", position="rope", tie_embeddings=False
    )
    data["parallel"] = {
        **data["parallel"],
        "sequence_parallel": True,
        "tp_comm_overlap": True,
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "grad_reduce_in_fp32": False,
        "overlap_p2p_comm": False,
        "ddp_bucket_size": 6_553_600,
        "batch_p2p_sync": False,
        "microbatch_group_size_per_vp_stage": 16,
    }
    data["precision"] = {"dtype": "fp8", "fp8_recipe": "tensorwise"}
    data["training"] = {
        "clip_grad": 0.0,
        "log_num_zeros_in_grad": True,
        "grad_checks": "per_tensor",
        "master_copies": "per_tensor",
    }
    cfg = parse_workload_config(data)
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert cfg.training.grad_checks == "per_tensor"
    assert cfg.training.master_copies == "per_tensor"
    with pytest.raises(
        ConfigError, match=r"training\.master_copies: must be one of fused, per_tensor"
    ):
        parse_workload_config(data | {"training": {"master_copies": "apex"}})
    with pytest.raises(
        ConfigError, match=r"training\.grad_checks: must be one of fused, per_tensor"
    ):
        parse_workload_config(data | {"training": {"grad_checks": "serial"}})
    assert not cfg.parallel.batch_p2p_sync and cfg.training.optimizer_sync
    counted = _with("model", layers=94)
    counted["parallel"] = {
        **counted["parallel"],
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    cfg = parse_workload_config(counted)
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    # They change the layers per chunk: in the tracing key, not in the chunk key.
    assert tracing_key(cfg)["parallel"]["account_for_loss_in_pipeline_split"] is True
    assert chunk_key(cfg) == chunk_key(parse_workload_config(BASE))
    fsdp = _with("parallel", pp=1, dp=8, virtual_stages=1, fsdp="shard_grad_op")
    cfg = parse_workload_config(fsdp)
    # FSDP implies the sharded optimizer; the mapping says so explicitly and reads back.
    assert cfg.parallel.distributed_optimizer
    assert config_to_mapping(cfg)["parallel"]["fsdp"] == "shard_grad_op"
    assert parse_workload_config(config_to_mapping(cfg)) == cfg


@pytest.mark.parametrize(
    ("dtype", "fp32", "expected"),
    [
        ("bf16", None, 4),  # Megatron-LM turns fp32 reduction on for --bf16
        ("fp8", None, 4),  # FP8 training keeps bf16 parameters
        ("fp16", None, 2),
        ("bf16", False, 2),
        ("fp16", True, 4),
        ("fp32", False, 4),
    ],
)
def test_gradient_reduction_bytes(dtype: str, fp32: bool | None, expected: int) -> None:
    data = _with("precision", dtype=dtype)
    data["parallel"] = {**data["parallel"], "grad_reduce_in_fp32": fp32}
    if fp32 is None:
        del data["parallel"]["grad_reduce_in_fp32"]
    assert grad_reduce_bytes(parse_workload_config(data)) == expected


def test_a_script_config_needs_one_stage_and_no_fsdp_key() -> None:
    """A script is traced as one pipeline stage, and runs its own FSDP (its graph holds the
    collectives), so ``pp > 1`` and ``fsdp`` are refused with the key named."""
    base = {
        "model": {
            "script": "train.py",
            "layers": 4,
            "hidden": 512,
            "heads": 8,
            "seq_len": 128,
            "vocab": 1000,
        },
        "parallel": {"tp": 1, "pp": 1, "dp": 8},
        "batch": {"global": 8, "micro": 1},
        "cluster": {"gpu": "H100-SXM5-80GB", "gpus_per_node": 8, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    cfg = parse_workload_config(base)
    assert cfg.model.script == "train.py" and cfg.model.kind == "gpt"
    assert config_to_mapping(cfg)["model"]["script"] == "train.py"
    with pytest.raises(ConfigError, match=r"parallel\.pp: a script is traced as one"):
        parse_workload_config({**base, "parallel": {"tp": 1, "pp": 2, "dp": 4}})
    with pytest.raises(ConfigError, match=r"parallel\.fsdp: a script's graph holds"):
        parse_workload_config(
            {**base, "parallel": {"tp": 1, "pp": 1, "dp": 8, "fsdp": "full_shard"}}
        )


def test_attention_kernel_is_read_round_trips_and_leaves_the_tracing_key_alone() -> None:
    assert parse_workload_config(BASE).model.attention_kernel == "auto"
    cfg = parse_workload_config(_with("model", attention_kernel="fa3"))
    assert cfg.model.attention_kernel == "fa3"
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert "attention_kernel" not in config_to_mapping(parse_workload_config(BASE))["model"]
    assert tracing_key(cfg) == tracing_key(parse_workload_config(BASE))


def test_an_unknown_attention_kernel_names_the_key_and_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"attention_kernel.*fa2, fa3, cudnn, triton.*'flash3'"):
        parse_workload_config(_with("model", attention_kernel="flash3"), "x.toml")


def _torch_native(**sections: dict[str, Any]) -> dict[str, Any]:
    """BASE on one pipeline stage with every PyTorch-native key set, ``sections`` on top."""
    data = _with("parallel", pp=1, dp=64, virtual_stages=1)
    data["model"] = {**data["model"], "cross_entropy": "torch"}
    data["parallel"] = {**data["parallel"], "tp": 1, "ddp": "torch"}
    data["precision"] = {"dtype": "bf16", "autocast": True}
    data["training"] = {"clip_grad_norm": "torch"}
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return data


def test_torch_native_keys_round_trip_and_enter_the_tracing_key_only_when_set() -> None:
    cfg = parse_workload_config(_torch_native())
    assert (cfg.model.cross_entropy, cfg.parallel.ddp, cfg.autocast) == ("torch", "torch", True)
    assert cfg.training.clip_grad_norm == "torch"
    # PyTorch's DDP reduces during the backward; its clipping keeps the norm on the GPU.
    assert cfg.parallel.overlap_grad_reduce and not cfg.training.optimizer_sync
    assert grad_reduce_bytes(cfg) == 4
    # Unset, the buckets are DDP's 25 MiB of fp32 gradients.
    assert ddp_bucket_params(cfg.parallel, 64) == 25 * 2**20 // 4 == 6_553_600
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    key = tracing_key(cfg)
    assert key["autocast"] is True and key["clip_grad_norm"] == "torch"
    assert key["model"]["cross_entropy"] == "torch" and key["parallel"]["ddp"] == "torch"
    # The clipping is in the optimizer phase, not in a chunk's ops.
    clip_only = _torch_native(training={"clip_grad_norm": "megatron"})
    assert chunk_key(cfg) == chunk_key(parse_workload_config(clip_only))
    plain = parse_workload_config(BASE)
    assert plain.training.optimizer_sync and plain.parallel.ddp == "megatron"
    key = tracing_key(plain)
    assert "autocast" not in key and "clip_grad_norm" not in key
    assert "cross_entropy" not in key["model"] and "ddp" not in key["parallel"]


@pytest.mark.parametrize(
    ("sections", "where", "text"),
    [
        ({"parallel": {"overlap_grad_reduce": False}}, "parallel.overlap_grad_reduce", "always"),
        ({"parallel": {"distributed_optimizer": True}}, "parallel.ddp", "replicates"),
        ({"parallel": {"grad_reduce_in_fp32": False}}, "parallel.grad_reduce_in_fp32", "fp32"),
    ],
)
def test_torch_native_mistakes_name_the_key(
    sections: dict[str, dict[str, Any]], where: str, text: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_workload_config(_torch_native(**sections), "x.toml")
    assert info.value.where == where and text in str(info.value)


def test_gradient_accumulation_fusion_round_trips_and_is_in_the_tracing_key_only_off() -> None:
    plain = parse_workload_config(BASE)
    assert plain.training.gradient_accumulation_fusion  # Megatron-LM's default
    assert "training" not in config_to_mapping(plain)
    off = parse_workload_config(BASE | {"training": {"gradient_accumulation_fusion": False}})
    assert not off.training.gradient_accumulation_fusion
    assert parse_workload_config(config_to_mapping(off)) == off
    assert "gradient_accumulation_fusion" not in tracing_key(plain)
    # The main_grad additions are ops of every chunk.
    assert tracing_key(off)["gradient_accumulation_fusion"] is False
    assert chunk_key(off) != chunk_key(plain)


def test_gradient_accumulation_fusion_off_needs_megatrons_ddp() -> None:
    data = _torch_native(training={"gradient_accumulation_fusion": False})
    with pytest.raises(ConfigError, match=r"training\.gradient_accumulation_fusion.*main_grad"):
        parse_workload_config(data, "x.toml")


def test_dropout_probabilities_default_to_megatrons_and_round_trip() -> None:
    base = parse_workload_config(BASE)
    assert (base.model.hidden_dropout, base.model.attention_dropout) == (0.1, 0.1)
    assert "hidden_dropout" not in config_to_mapping(base)["model"]
    cfg = parse_workload_config(_with("model", hidden_dropout=0, attention_dropout=0.0))
    assert (cfg.model.hidden_dropout, cfg.model.attention_dropout) == (0.0, 0.0)
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg) != tracing_key(base)  # the dropout kernels are traced


def test_linear_biases_default_to_megatrons_and_round_trip() -> None:
    base = parse_workload_config(BASE)
    assert base.model.add_bias_linear and not base.model.add_qkv_bias and base.model.has_qkv_bias
    assert "add_bias_linear" not in config_to_mapping(base)["model"]  # older keys unchanged
    cfg = parse_workload_config(_with("model", add_bias_linear=False, add_qkv_bias=True))
    assert not cfg.model.add_bias_linear and cfg.model.has_qkv_bias
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg) != tracing_key(base)  # the bias kernels are traced
    none = parse_workload_config(_with("model", add_bias_linear=False))
    assert not none.model.has_qkv_bias
    with pytest.raises(ConfigError, match=r"x\.toml.*model\.add_bias_linear"):
        parse_workload_config(_with("model", add_bias_linear="no"), "x.toml")


def test_bias_dropout_fusion_defaults_to_megatrons_and_round_trips() -> None:
    base = parse_workload_config(BASE)
    assert base.model.bias_dropout_fusion
    assert "bias_dropout_fusion" not in config_to_mapping(base)["model"]
    cfg = parse_workload_config(_with("model", bias_dropout_fusion=False))
    assert not cfg.model.bias_dropout_fusion
    assert config_to_mapping(cfg)["model"]["bias_dropout_fusion"] is False
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg) != tracing_key(base)  # the fused kernel is traced
    with pytest.raises(ConfigError, match=r"x\.toml.*model\.bias_dropout_fusion"):
        parse_workload_config(_with("model", bias_dropout_fusion=1), "x.toml")


def test_masked_softmax_defaults_to_the_fused_kernel_and_needs_unfused_attention() -> None:
    base = parse_workload_config(BASE)  # selective recompute: auto means unfused attention
    assert base.model.masked_softmax == "fused"
    assert "masked_softmax" not in config_to_mapping(base)["model"]
    for form in ("masked_fill", "multiply"):
        cfg = parse_workload_config(_with("model", masked_softmax=form))
        assert config_to_mapping(cfg)["model"]["masked_softmax"] == form
        assert parse_workload_config(config_to_mapping(cfg)) == cfg
        assert tracing_key(cfg) != tracing_key(base)  # its kernels are traced
    with pytest.raises(ConfigError, match=r"x\.toml.*model\.masked_softmax"):
        parse_workload_config(_with("model", masked_softmax="fill"), "x.toml")
    flash = _with("model", attention="flash", masked_softmax="multiply")
    flash["parallel"]["recompute"] = "full"
    with pytest.raises(ConfigError, match=r"x\.toml.*model\.masked_softmax.*unfused"):
        parse_workload_config(flash, "x.toml")


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), float("inf"), "0.1", True])
def test_a_dropout_outside_zero_to_one_names_the_key(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"x\.toml.*model\.hidden_dropout"):
        parse_workload_config(_with("model", hidden_dropout=value), "x.toml")


def test_async_tensor_parallel_allreduce_is_on_by_default_and_only_simulated() -> None:
    base = parse_workload_config(BASE)
    assert base.parallel.async_tensor_model_parallel_allreduce is True
    cfg = parse_workload_config(_with("parallel", async_tensor_model_parallel_allreduce=False))
    assert cfg.parallel.async_tensor_model_parallel_allreduce is False
    assert parse_workload_config(config_to_mapping(cfg)) == cfg
    assert tracing_key(cfg) == tracing_key(base)  # the same ops, scheduled otherwise
    with pytest.raises(ConfigError, match=r"parallel\.async_tensor_model_parallel_allreduce"):
        parse_workload_config(_with("parallel", async_tensor_model_parallel_allreduce=1))


def test_only_16_bit_params_have_master_copies() -> None:
    copies = {"training": {"master_copies": "per_tensor"}}
    assert parse_workload_config(BASE | copies).per_tensor_master_copies  # fp16
    assert not parse_workload_config(_with("precision", dtype="fp32") | copies).half_params
    assert not parse_workload_config(
        _with("precision", dtype="fp32") | copies
    ).per_tensor_master_copies
    dense = _with("parallel", pp=1, dp=8, virtual_stages=1)
    autocast = dense | {"precision": {"dtype": "bf16", "autocast": True}} | copies
    assert not parse_workload_config(autocast).per_tensor_master_copies
    assert not parse_workload_config(BASE).per_tensor_master_copies  # fused, the default


def test_grad_accumulation_cast_add_round_trips_and_is_in_the_tracing_key_only_set() -> None:
    plain = parse_workload_config(BASE)
    assert plain.training.grad_accumulation == "main_grad"
    assert "grad_accumulation" not in tracing_key(plain)
    bf16 = _with("precision", dtype="bf16")
    cast = parse_workload_config(bf16 | {"training": {"grad_accumulation": "cast_add"}})
    assert cast.training.grad_accumulation == "cast_add"
    # DeepSpeed's weight-gradient GEMMs write 16-bit gradients: no fusion unless told.
    assert not cast.training.gradient_accumulation_fusion
    assert tracing_key(cast)["grad_accumulation"] == "cast_add"
    assert parse_workload_config(config_to_mapping(cast)) == cast
    # Megatron-Core copies bf16 params one tensor at a time (fp16 ones in one multi-tensor
    # kernel); DeepSpeed's bf16 optimizer copies its flat partition at once.
    assert parse_workload_config(bf16).per_tensor_param_copies
    assert not plain.per_tensor_param_copies
    bf16["training"] = {"grad_accumulation": "cast_add"}
    assert not parse_workload_config(bf16).per_tensor_param_copies


def test_grad_accumulation_cast_add_refuses_what_it_does_not_run() -> None:
    fused = {"grad_accumulation": "cast_add", "gradient_accumulation_fusion": True}
    with pytest.raises(ConfigError, match=r"training\.gradient_accumulation_fusion.*cast_add"):
        parse_workload_config(BASE | {"training": fused})
    with pytest.raises(ConfigError, match=r"training\.grad_accumulation.*parallel\.ddp"):
        parse_workload_config(_torch_native(training={"grad_accumulation": "cast_add"}))
    with pytest.raises(ConfigError, match=r"training\.grad_accumulation.*bf16"):
        parse_workload_config(BASE | {"training": {"grad_accumulation": "cast_add"}})  # fp16
    with pytest.raises(ConfigError, match=r"training\.grad_accumulation"):
        parse_workload_config(BASE | {"training": {"grad_accumulation": "fp32"}})


def test_log_params_norm_round_trips_and_is_simulation_only() -> None:
    plain = parse_workload_config(BASE)
    assert not plain.training.log_params_norm
    norm = parse_workload_config(BASE | {"training": {"log_params_norm": True}})
    assert norm.training.log_params_norm
    assert parse_workload_config(config_to_mapping(norm)) == norm
    assert tracing_key(norm) == tracing_key(plain)  # launches on the host, no traced op


def test_an_unknown_key_lists_every_key_of_its_table() -> None:
    # Keys read only when set (etp, ddp_bucket_size, fsdp_grad_sync, the vp group size) and
    # the MoE keys of a dense model were missing from the list.
    with pytest.raises(ConfigError) as parallel:
        parse_workload_config(_with("parallel", ept=2), "x.toml")
    hint = parallel.value.hint or ""
    for key in ("etp", "ddp_bucket_size", "fsdp_grad_sync", "microbatch_group_size_per_vp_stage"):
        assert key in hint
    with pytest.raises(ConfigError) as model:
        parse_workload_config(_with("model", expert=8), "x.toml")
    assert "did you mean 'experts'?" in (model.value.hint or "")
    assert "moe_grouped_gemm" in (model.value.hint or "")


def test_context_parallelism_splits_the_sequence_into_two_chunks_a_rank() -> None:
    # Megatron-Core gives each context-parallel rank two of 2 x cp chunks of the sequence
    # (get_batch_on_this_cp_rank); seq_len 2,050 on cp = 2 was accepted.
    data = _with("parallel", cp=2)
    data["model"]["seq_len"] = 2050
    data["cluster"]["nodes"] = 16
    with pytest.raises(ConfigError) as err:
        parse_workload_config(data, "x.toml")
    assert err.value.where == "model.seq_len"
    assert "seq_len 2050 is not divisible by 2 x cp = 4" in err.value.message
