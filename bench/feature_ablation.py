"""On/off ablations of the simulator's performance features on published runs: each row
simulates one config with a feature off and on and prints the predicted speedup beside the
one the run's source reports (when it reports one).

    python bench/feature_ablation.py [--markdown]

Graphs come from the ``.graph.json.gz`` beside each config when its tracing key matches (the
simulation-only features share it), else they are traced once (meta device, needs torch) and
cached like ``echo-view simulate`` does.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import graph_for_config  # noqa: E402
from echo_view.model.config_parse import parse_workload_config  # noqa: E402
from echo_view.model.gpus import gpu_generation  # noqa: E402
from echo_view.sim.cluster import cluster_from_config  # noqa: E402
from echo_view.sim.comm.defaults import default_comm_model  # noqa: E402
from echo_view.sim.compute_presets import compute_params_for  # noqa: E402
from echo_view.sim.config_sim import simulate_config  # noqa: E402
from echo_view.sim.interference import model_from_setting  # noqa: E402

CONFIGS = ROOT / "samples/configs"
TITAN = "ablations/torchtitan-llama3-8b-64xH100.toml"
#: (config, feature, {key: (off, on)}, published speedup of "on" over "off" or None, source).
ABLATIONS: list[tuple[str, str, dict[str, tuple[Any, Any]], float | None, str]] = [
    (
        TITAN,
        "tp_comm_overlap",
        {"parallel.tp_comm_overlap": (False, True)},
        4809.4 / 4378,
        "torchtitan async TP, bf16",
    ),
    (
        TITAN,
        "dtype fp8 (tensorwise)",
        {"precision.dtype": ("bf16", "fp8"), "precision.fp8_recipe": (None, "tensorwise")},
        5078.1 / 4378,
        "torchtitan float8 tensorwise, vanilla TP",
    ),
    (
        TITAN,
        "dtype fp8 (delayed: no amax kernels)",
        {"precision.dtype": ("bf16", "fp8"), "precision.fp8_recipe": (None, "delayed")},
        5078.1 / 4378,
        "torchtitan float8 tensorwise, vanilla TP",
    ),
    (
        TITAN,
        "dtype fp8 (tensorwise), with tp_comm_overlap",
        {
            "precision.dtype": ("bf16", "fp8"),
            "precision.fp8_recipe": (None, "tensorwise"),
            "parallel.tp_comm_overlap": (True, True),
        },
        5570.1 / 4809.4,
        "torchtitan float8 tensorwise, async TP",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "overlap_param_gather",
        {"parallel.overlap_param_gather": (False, True)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp1-pp4.toml",
        "align_param_gather (off = --no-align-param-gather)",
        {"parallel.align_param_gather": (False, True)},
        None,
        "",
    ),
    (
        "validation/llama3-405b-8192.toml",
        "align_param_gather (off = --no-align-param-gather)",
        {"parallel.align_param_gather": (False, True)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "grad_reduce_in_fp32 (off = bf16 reduction)",
        {"parallel.grad_reduce_in_fp32": (True, False)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "NCCL_ALGO=Ring as the run (off = NCCL's own choice)",
        {"cluster.nccl_algo": (None, "ring")},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp1-pp4.toml",
        "gradient_accumulation_fusion (off as the run)",
        {"training.gradient_accumulation_fusion": (False, True)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "gradient_accumulation_fusion (off as the run)",
        {"training.gradient_accumulation_fusion": (False, True)},
        None,
        "",
    ),
    (
        "validation/korthikanti-175b-selective.toml",
        "tie_embeddings (on = embedding all-reduce)",
        {"model.tie_embeddings": (False, True)},
        None,
        "",
    ),
    (
        "validation/mosaic-mpt13b-h100-64.toml",
        "fsdp full_shard (off = distributed optimizer)",
        {"parallel.fsdp": ("none", "full_shard"), "parallel.distributed_optimizer": (True, None)},
        None,
        "",
    ),
    (
        "validation/mosaic-mpt70b-a100-80gb-64.toml",
        "fsdp full_shard (off = distributed optimizer)",
        {"parallel.fsdp": ("none", "full_shard"), "parallel.distributed_optimizer": (True, None)},
        None,
        "",
    ),
    (
        "validation/mosaic-mpt13b-h100-64.toml",
        "fsdp full_shard (off = shard_grad_op)",
        {"parallel.fsdp": ("shard_grad_op", "full_shard")},
        None,
        "",
    ),
    (
        "validation/llama3-405b-8192.toml",
        "interleaving, uneven stages (off = virtual_stages 1)",
        {"parallel.virtual_stages": (1, 8)},
        None,
        "",
    ),
    (
        "validation/llama3-405b-16384.toml",
        "interleaving, uneven stages (off = virtual_stages 1)",
        {"parallel.virtual_stages": (1, 8)},
        None,
        "",
    ),
    (
        "megatron-ci-small/tp1-pp4-vp.toml",
        "overlap_p2p_comm",
        {"parallel.overlap_p2p_comm": (False, True)},
        None,
        "",
    ),
    (
        "validation/korthikanti-22b-full.toml",
        "async_tensor_model_parallel_allreduce",
        {"parallel.async_tensor_model_parallel_allreduce": (False, True)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "async_tensor_model_parallel_allreduce",
        {"parallel.async_tensor_model_parallel_allreduce": (False, True)},
        None,
        "",
    ),
    (
        "validation/mosaic-mpt7b-h100-8.toml",
        "hidden and attention dropout 0 as the run (off = Megatron's 0.1)",
        {"model.hidden_dropout": (0.1, 0.0), "model.attention_dropout": (0.1, 0.0)},
        None,
        "",
    ),
    (
        "validation/llama3-405b-8192.toml",
        "hidden and attention dropout 0 as the run (off = Megatron's 0.1)",
        {"model.hidden_dropout": (0.1, 0.0), "model.attention_dropout": (0.1, 0.0)},
        None,
        "",
    ),
    (
        "validation/llama3-405b-8192.toml",
        "no linear biases as the model (off = Megatron's add_bias_linear)",
        {"model.add_bias_linear": (True, False)},
        None,
        "",
    ),
    (
        "validation/nemotron4-15b-768.toml",
        "no linear biases as the model (off = Megatron's add_bias_linear)",
        {"model.add_bias_linear": (True, False)},
        None,
        "",
    ),
    (
        "validation/moe-megascale-352b-megatron-240.toml",
        "moe_grouped_gemm (off = SequentialMLP)",
        {"model.moe_grouped_gemm": (False, True)},
        None,
        "",
    ),
    (
        "validation/moe-folding-qwen2-57b-a14b-mcore-64.toml",
        "moe_grouped_gemm (off = SequentialMLP)",
        {"model.moe_grouped_gemm": (False, True)},
        None,
        "",
    ),
    # Megatron-Core's load-balancing loss in the router, on MoE runs that train with it
    # (neither source reports a run without it).
    *(
        (
            rel,
            "MoE load_balancing aux_loss (off = none)",
            {"model.load_balancing": ("none", "aux_loss")},
            None,
            "",
        )
        for rel in (
            "validation/moe-megascale-352b-megatron-240.toml",
            "validation/moe-folding-mixtral8x22b-mcore-128.toml",
        )
    ),
    (
        "validation/korthikanti-22b-full.toml",
        "bias_dropout_fusion",
        {"model.bias_dropout_fusion": (False, True)},
        None,
        "",
    ),
    (
        "validation/megatron-ci-7b-tp4-pp1.toml",
        "bias_dropout_fusion",
        {"model.bias_dropout_fusion": (False, True)},
        None,
        "",
    ),
    # DeepSpeed's bf16 optimizer casting and adding every gradient to fp32 after each
    # micro-batch, on the BLOOM run that used it (BLOOM reports no run without it).
    (
        "validation/bloom-176b-384.toml",
        "grad_accumulation cast_add (off = main_grad)",
        {"training.grad_accumulation": ("main_grad", "cast_add")},
        None,
        "",
    ),
    # Megatron-LM's parameter norm after each step, on Megatron-LM CI runs that set it (no
    # source reports the same run without it).
    *(
        (rel, "log_params_norm", {"training.log_params_norm": (False, True)}, None, "")
        for rel in ("validation/megatron-ci-7b-tp4-pp1.toml", "megatron-ci-small/tp1-pp2.toml")
    ),
    # Deterministic mode's fills of new buffers, on Megatron-LM CI runs that set it (no source
    # reports the same run without it: docs/accuracy.md).
    *(
        (rel, "deterministic", {"training.deterministic": (False, True)}, None, "")
        for rel in (
            "validation/megatron-ci-7b-tp4-pp1.toml",
            "validation/megatron-ci-7b-tp1-pp4.toml",
            "megatron-ci-small/tp4-pp1-overlap.toml",
            "megatron-ci-small/tp1-pp2.toml",
        )
    ),
] + [
    # Megatron-LM of 2019's ways, each on the Shoeybi et al. 2019 runs with tensor parallelism
    # 1 and 8 (no source reports them: docs/accuracy.md).
    (f"validation/shoeybi-{run}.toml", feature, changes, None, "")
    for feature, changes in (
        ("masked_softmax", {"model.masked_softmax": ("fused", "multiply")}),
        ("grad_checks (off = fused)", {"training.grad_checks": ("fused", "per_tensor")}),
        ("master_copies (off = fused)", {"training.master_copies": ("fused", "per_tensor")}),
        ("grad_allreduce (off = buffer)", {"training.grad_allreduce": ("buffer", "flatten")}),
    )
    for run in ("gpt355m-64", "gpt8.3b-512")
]


def _with(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for dotted, value in changes.items():
        table, key = dotted.split(".")
        if value is None:
            out[table].pop(key, None)
        else:
            out[table][key] = value
    return out


def _step_s(path: Path, data: dict[str, Any]) -> float:
    cfg = parse_workload_config(data, str(path))
    graph, _ = graph_for_config(cfg, path)
    cluster = cluster_from_config(cfg.cluster)
    model = model_from_setting("on", gpu_generation(cluster.gpu.name))
    params = compute_params_for(cluster.gpu)
    sim = simulate_config(graph, cfg, cluster, default_comm_model(), params, interference=model)
    return sim.step_ns / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.markdown:
        print("| run | feature | off (s) | on (s) | simulated speedup | published speedup |")
        print("|---|---|---|---|---|---|")
    for rel, feature, changes, published, source in ABLATIONS:
        path = CONFIGS / rel
        data = tomllib.loads(path.read_text())
        off = _step_s(path, _with(data, {k: v[0] for k, v in changes.items()}))
        on = _step_s(path, _with(data, {k: v[1] for k, v in changes.items()}))
        pub = f"x{published:.3f} ({source})" if published else "none reported"
        if args.markdown:
            print(f"| {path.stem} | {feature} | {off:.3f} | {on:.3f} | x{off / on:.3f} | {pub} |")
        else:
            print(
                f"{path.stem:32s} {feature:46s} off {off:8.3f} s on {on:8.3f} s "
                f"x{off / on:.3f}  published {pub}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
