"""A workload config's keys: the TOML-shaped mapping it round-trips through
(:func:`config_to_mapping`), and the parts of it that a traced graph (:func:`tracing_key`) or
one model chunk's ops (:func:`chunk_key`) depend on, by which cached and shipped graphs are
found."""

from __future__ import annotations

import json
from typing import Any

from echo_view.model.config import (
    DEFAULT_DROPOUT,
    MODEL_SIMULATION_ONLY,
    SIMULATION_ONLY,
    TrainingConfig,
    WorkloadConfig,
    resolve_attention,
)


def config_to_mapping(cfg: WorkloadConfig) -> dict[str, Any]:
    """The TOML-shaped mapping that
    :func:`~echo_view.model.config_parse.parse_workload_config` turns back into ``cfg``."""
    m, p, b, c = cfg.model, cfg.parallel, cfg.batch, cfg.cluster
    cluster: dict[str, Any] = {"gpu": c.gpu, "gpus_per_node": c.gpus_per_node, "nodes": c.nodes}
    cluster.update(c.overrides)
    out: dict[str, Any] = {
        "model": {
            "kind": m.kind,
            "layers": m.layers,
            "hidden": m.hidden,
            "heads": m.heads,
            "seq_len": m.seq_len,
            "vocab": m.vocab,
            "ffn_hidden": m.ffn_hidden,
            "kv_heads": m.kv_heads,
            "attention": m.attention,
            # Llama-style keys only when set, so that older configs keep their tracing key.
            **{
                k: v
                for k, v, default in (
                    ("activation", m.activation, "gelu"),
                    ("normalization", m.normalization, "layernorm"),
                    ("position", m.position, "learned"),
                    ("tie_embeddings", m.tie_embeddings, True),
                    ("cross_entropy", m.cross_entropy, "megatron"),
                    ("script", m.script, None),
                    ("attention_kernel", m.attention_kernel, "auto"),
                    ("hidden_dropout", m.hidden_dropout, DEFAULT_DROPOUT),
                    ("attention_dropout", m.attention_dropout, DEFAULT_DROPOUT),
                    ("add_bias_linear", m.add_bias_linear, True),
                    ("add_qkv_bias", m.add_qkv_bias, False),
                    ("bias_dropout_fusion", m.bias_dropout_fusion, True),
                    ("masked_softmax", m.masked_softmax, "fused"),
                    ("transformer_impl", m.transformer_impl, "transformer_engine"),
                )
                if v != default
            },
            **(m.moe.to_mapping() if m.moe is not None else {}),
        },
        "parallel": {
            "tp": p.tp,
            "pp": p.pp,
            "dp": p.dp,
            "cp": p.cp,
            "virtual_stages": p.virtual_stages,
            "sequence_parallel": p.sequence_parallel,
            "recompute": p.recompute,
            "distributed_optimizer": p.distributed_optimizer,
            "overlap_grad_reduce": p.overlap_grad_reduce,
            **({"first_stage_layers": p.first_stage_layers} if p.first_stage_layers else {}),
            **({"last_stage_layers": p.last_stage_layers} if p.last_stage_layers else {}),
            **{
                k: v
                for k, v, default in (
                    (
                        "account_for_embedding_in_pipeline_split",
                        p.account_for_embedding_in_pipeline_split,
                        False,
                    ),
                    (
                        "account_for_loss_in_pipeline_split",
                        p.account_for_loss_in_pipeline_split,
                        False,
                    ),
                    ("tp_comm_overlap", p.tp_comm_overlap, False),
                    ("overlap_param_gather", p.overlap_param_gather, False),
                    ("align_param_gather", p.align_param_gather, True),
                    ("ddp_bucket_size", p.ddp_bucket_size, None),
                    ("grad_reduce_in_fp32", p.grad_reduce_in_fp32, None),
                    ("overlap_p2p_comm", p.overlap_p2p_comm, True),
                    ("batch_p2p_sync", p.batch_p2p_sync, True),
                    (
                        "async_tensor_model_parallel_allreduce",
                        p.async_tensor_model_parallel_allreduce,
                        True,
                    ),
                    ("fsdp", p.fsdp, "none"),
                    ("fsdp_grad_sync", p.fsdp_grad_sync, None),
                    ("ep", p.ep, 1),
                    ("etp", p.etp, None),
                    ("ddp", p.ddp, "megatron"),
                    (
                        "microbatch_group_size_per_vp_stage",
                        p.microbatch_group_size_per_vp_stage,
                        None,
                    ),
                )
                if v != default
            },
        },
        "batch": {"global": b.global_batch, "micro": b.micro},
        "cluster": cluster,
        "precision": {"dtype": cfg.dtype}
        | ({"fp8_recipe": cfg.fp8_recipe} if cfg.dtype == "fp8" else {})
        | ({"autocast": True} if cfg.autocast else {}),
    }
    if cfg.reference is not None:
        out["reference"] = {
            "step_time_s": cfg.reference.step_time_s,
            "source": cfg.reference.source,
            **({"source_id": cfg.reference.source_id} if cfg.reference.source_id else {}),
        }
    tr, default = cfg.training, TrainingConfig()
    training = {
        k: v
        for k, v, d in (
            ("clip_grad", tr.clip_grad, default.clip_grad),
            ("log_num_zeros_in_grad", tr.log_num_zeros_in_grad, default.log_num_zeros_in_grad),
            ("clip_grad_norm", tr.clip_grad_norm, default.clip_grad_norm),
            (
                "gradient_accumulation_fusion",
                tr.gradient_accumulation_fusion,
                default.gradient_accumulation_fusion,
            ),
            ("grad_checks", tr.grad_checks, default.grad_checks),
            ("master_copies", tr.master_copies, default.master_copies),
            ("grad_allreduce", tr.grad_allreduce, default.grad_allreduce),
            ("deterministic", tr.deterministic, default.deterministic),
            ("grad_accumulation", tr.grad_accumulation, default.grad_accumulation),
            ("log_params_norm", tr.log_params_norm, default.log_params_norm),
        )
        if v != d
    }
    if training:
        out["training"] = training
    return out


#: Revision of what the tracers record for a config, part of every tracing key: raised when a
#: tracer records other ops for the same settings, so that a graph traced before (in the user's
#: cache, or shipped beside a config) no longer matches and is traced again. 1: sequence-parallel
#: linears all-gather their input again in backward; recomputation re-runs the whole layer (or
#: core attention); dropout follows ``hidden_dropout`` and ``attention_dropout``. 2: the
#: embedding's output is dropped out with ``hidden_dropout``. 3: dropout is one fused kernel
#: each way (``native_dropout``), as PyTorch runs it on a GPU, not the CPU path's three.
#: 4: Megatron-LM's layers add each residual branch's bias, drop it out and add the residual
#: in one kernel (``bias_dropout_fusion``). 5: a tensor-parallel all-reduce runs in place, as
#: Megatron's ``_reduce`` does (no copy of the reduced tensor). 6: unfused attention takes q, k
#: and v as views of the QKV projection's output, as Megatron-Core and Transformer Engine do
#: (no copies before the batched GEMMs; Megatron-LM of 2019's ``multiply`` form keeps them).
#: 7: Megatron's DDP hook adds every gradient autograd produced to ``main_grad``, the norms',
#: biases' and embeddings' too, one kernel per parameter tensor and micro-batch (only the
#: weights of linears without gradient-accumulation fusion were traced). 8: Megatron-Core's MoE
#: routing work: the load-balancing loss, the alltoall dispatcher's split sizes and the host
#: waits (``cudaStreamSynchronize`` rows) before each dispatch. 9: FSDP graphs (no ``main_grad``
#: additions) keyed apart from the distributed-optimizer form of the same layout, which could
#: have found one in a cache.
TRACER_REVISION = 9


def tracing_key(cfg: WorkloadConfig) -> dict[str, Any]:
    """The parts of ``cfg`` a traced graph depends on (cluster, global batch and the reference
    do not change a rank's ops) and :data:`TRACER_REVISION`, used to find a cached graph."""
    full = config_to_mapping(cfg)
    parallel = {k: v for k, v in full["parallel"].items() if k not in SIMULATION_ONLY}
    model = {k: v for k, v in full["model"].items() if k not in MODEL_SIMULATION_ONLY}
    key = {
        "model": model,
        "parallel": parallel,
        "micro": cfg.batch.micro,
        "dtype": cfg.dtype,
        "attention": resolve_attention(cfg),
        "tracer": TRACER_REVISION,
    }
    if cfg.dtype == "fp8":
        key["fp8_recipe"] = cfg.fp8_recipe
    # Only when set, so that other configs keep their tracing key.
    if cfg.autocast:
        key["autocast"] = True
    if cfg.training.clip_grad_norm != "megatron":  # the optimizer phase's clipping kernels
        key["clip_grad_norm"] = cfg.training.clip_grad_norm
    if not cfg.training.gradient_accumulation_fusion:  # the main_grad additions (traced)
        key["gradient_accumulation_fusion"] = False
    if cfg.training.master_copies != "fused":  # the optimizer phase's copies (traced)
        key["master_copies"] = cfg.training.master_copies
    if cfg.training.grad_allreduce != "buffer":  # the flattening copies (traced)
        key["grad_allreduce"] = cfg.training.grad_allreduce
    if cfg.training.deterministic:  # the fills of new buffers (traced)
        key["deterministic"] = True
    if cfg.training.grad_accumulation != "main_grad":  # the casts and additions (traced)
        key["grad_accumulation"] = cfg.training.grad_accumulation
    # FSDP has no Megatron main_grad, so its graph lacks the DDP hook's additions; its
    # sharding mode is read by the simulator alone.
    if cfg.parallel.fsdp != "none":
        key["fsdp"] = True
    return key


#: Settings that decide only how many layers each model chunk holds (``pp``, virtual stages,
#: uneven first and last stages) or touch only the optimizer phase and the data-parallel
#: reduction (``dp``, the distributed optimizer, overlapped gradient reduction).
_NOT_IN_CHUNK = (
    "pp",
    "dp",
    "virtual_stages",
    "first_stage_layers",
    "last_stage_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "distributed_optimizer",
    "overlap_grad_reduce",
)


def chunk_key(cfg: WorkloadConfig) -> str:
    """The parts of ``cfg`` one model chunk's ops depend on, as stable text: the tracing key
    without the layer count and the settings in :data:`_NOT_IN_CHUNK`. Layouts with the same
    chunk key run the same transformer layer, embedding and loss ops."""
    key = tracing_key(cfg)
    key["model"] = {k: v for k, v in key["model"].items() if k != "layers"}
    key["parallel"] = {k: v for k, v in key["parallel"].items() if k not in _NOT_IN_CHUNK}
    key.pop("clip_grad_norm", None)
    return json.dumps(key, sort_keys=True)
