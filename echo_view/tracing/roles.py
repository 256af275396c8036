"""Trace every distinct rank role of a workload config into a :class:`TracedGraph`.

Rule for roles: ranks that differ only in their tensor- or data-parallel index run the same ops
on same-sized shards, so one rank per pipeline stage is enough; stages between the first (which
holds the embedding) and the last (which holds the output layer and loss) are identical, so a
layout with ``pp`` stages has at most three roles: ``{0}``, ``{1..pp-2}`` and ``{pp-1}``.
With interleaving (``virtual_stages`` = v) rank stage ``s`` holds model chunks ``s, s+pp, ...,
s+(v-1)pp``; chunk 0 has the embedding and chunk ``pp*v-1`` the loss. Each chunk's layer count
comes from :func:`~echo_view.model.config.chunk_layers` (uneven first and last stages or
chunks keep the middle stages identical, so the three roles still cover every stage).

Each chunk's ops come from a :class:`~echo_view.tracing.chunks.ChunkCache` (a chunk kind traced
once with one and two layers, its layer block repeated); :func:`trace_whole` traces every
chunk with all its layers instead and builds the same graph, row for row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from echo_view.errors import ConfigError
from echo_view.model.config import WorkloadConfig, chunk_layers, moe_dense_prefix, resolve_attention
from echo_view.model.config_keys import config_to_mapping, tracing_key
from echo_view.model.graph import OP_COLUMNS, OpClass, OpTable, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.tracing.chunks import GRAD_BYTES, ChunkBody, ChunkCache, copy_strings, trace_chunk
from echo_view.tracing.fp8 import fp8_recipe, record_cast, record_scale_update
from echo_view.tracing.gpt import param_dtype
from echo_view.tracing.recorder import Recorder, dtype_name

#: A chunk's body: ``(cfg, first, last, layers, dense)`` to ops whose string ids refer to a
#: table of the source's (``dense``: an MoE model's dense layers at the chunk's start).
ChunkSource = Callable[[WorkloadConfig, bool, bool, int, int], ChunkBody]


def role_stages(pp: int) -> list[tuple[int, ...]]:
    """Groups of pipeline stages that share a role."""
    if pp == 1:
        return [(0,)]
    if pp == 2:
        return [(0,), (1,)]
    return [(0,), tuple(range(1, pp - 1)), (pp - 1,)]


def _optimizer(
    rec: Recorder,
    cfg: WorkloadConfig,
    params: int,
    fp8_weights: tuple[int, ...] = (),
    expert_params: int = 0,
) -> OpTable:
    """The step's optimizer kernels on this rank's parameters (a shard of them with the
    distributed optimizer: ``dp`` ways, an MoE model's expert parameters over the expert
    data-parallel ranks): gradient-norm reduction, fused Adam, the copy of the updated fp32
    params into the 16-bit model params, zeroing the gradients; with FP8, the once-per-step
    quantization of the FP8 layers' updated weights."""
    p = cfg.parallel
    n = params
    if p.distributed_optimizer:
        n = (params - expert_params) // p.dp + expert_params // p.expert_dp
    # Megatron's 16-bit model parameters beside fp32 main ones (not autocast's fp32 ones).
    half = cfg.half_params
    recipe = fp8_recipe(cfg)
    per_tensor = cfg.per_tensor_master_copies
    rec.begin()
    if cfg.training.grad_allreduce == "flatten":
        # Megatron-LM of 2019 (model/distributed.py ``allreduce_params``): the model's
        # gradients copied into one flat tensor (``_flatten_dense_tensors``), divided by the
        # data-parallel size in place, all-reduced (the composer's collective, which these
        # rows follow instead of surrounding: one serial chain either way), then copied back
        # into each gradient. Each moves the 16-bit gradients twice.
        dtype = param_dtype(cfg)
        g = dtype.itemsize * params
        label = dtype_name(dtype)
        rec.op("ddp_flatten", OpClass.COPY, flops=0.0, nbytes=2 * g, dtype=label)
        rec.op("ddp_divide", OpClass.ELEMENTWISE, flops=g, nbytes=2 * g, dtype=label)
        rec.op("ddp_unflatten", OpClass.COPY, flops=0.0, nbytes=2 * g, dtype=label)
    if per_tensor:
        # Megatron-LM of 2019 (FP16_Optimizer, fp16/fp16util.py ``model_grads_to_master_grads``
        # and fp16.py ``_downscale_master``): each fp16 gradient copied into an fp32 master
        # gradient (2 + 4 bytes), then multiplied by 1 / loss scale in place (4 + 4). One
        # kernel per tensor each; their launches are simulated (echo_view.sim.host_loops).
        rec.op("master_grads_copy", OpClass.COPY, flops=0.0, nbytes=6 * n, dtype="fp32")
        rec.op("master_grads_unscale", OpClass.ELEMENTWISE, flops=n, nbytes=8 * n, dtype="fp32")
    if cfg.training.clip_grad_norm == "torch":
        if cfg.training.clip_grad > 0:
            with rec:  # the aten ops it dispatches, recorded
                _torch_clip_grad_norm(n, cfg.training.clip_grad)
    else:
        rec.op("grad_norm", OpClass.REDUCTION, flops=2.0 * n, nbytes=GRAD_BYTES * n, dtype="fp32")
    # Adam (Apex's / Transformer Engine's FusedAdam) reads the fp32 param, grad, m and v and
    # writes the param, m and v back: 28 bytes per parameter.
    adam_bytes = n * (8 + 8 + 8 + GRAD_BYTES)
    rec.op("fused_adam", OpClass.OPTIMIZER, flops=12.0 * n, nbytes=adam_bytes, dtype="fp32")
    if half:
        # Mixed precision: Megatron then copies the fp32 main params into the 16-bit model
        # params in a kernel of its own (``_copy_main_params_to_model_params``): 4 + 2 bytes.
        rec.op("copy_main_params", OpClass.COPY, flops=0.0, nbytes=6 * n, dtype="bf16")
    if p.ddp != "torch":
        # Megatron zeroes its gradient buffer; PyTorch's ``zero_grad()`` sets the gradients
        # to None (``set_to_none``, its default), which runs no kernel.
        # FP16_Optimizer.zero_grad zeroes the fp32 master and the fp16 model gradients.
        zero = GRAD_BYTES * params + (2 * params if per_tensor else 0)
        rec.op("zero_grad", OpClass.COPY, flops=0.0, nbytes=zero, dtype="fp32")
    if recipe is not None:
        for numel in fp8_weights:
            record_cast(rec, numel, recipe, "weight")
    return rec.end()


def _torch_clip_grad_norm(n: int, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` on ``n`` fp32 gradient elements as
    it runs on a GPU, its foreach path (``torch/nn/utils/clip_grad.py``): the norm of every
    gradient (``_foreach_norm``), the norm of those norms, the clip coefficient clamped to
    1, and every gradient multiplied by it (``_foreach_mul_``), whether or not it clips
    (Megatron-LM multiplies only when the norm exceeds the maximum). The gradients are one
    tensor here: the kernels' bytes are those of the whole list."""
    grads = [torch.empty(n, dtype=torch.float32, device="meta")]
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)


def _phase(
    rec: Recorder, ops: OpTable, source: StringTable, cfg: WorkloadConfig, gemms: int, forward: bool
) -> OpTable:
    """A chunk's ops of one pass in the graph's strings, followed (delayed FP8 scaling) by the
    pass's scale update, recorded after them as the chunk's trace records it."""
    (ops,) = copy_strings([ops], source, rec.strings)
    recipe = fp8_recipe(cfg)
    if recipe is None:
        return ops
    rec.begin()
    record_scale_update(rec, recipe, gemms, forward=forward)
    update = rec.end()
    if not len(update):
        return ops
    return OpTable(**{c: np.concatenate([getattr(ops, c), getattr(update, c)]) for c in OP_COLUMNS})


def _layers_meta(cfg: WorkloadConfig, stage: int) -> int | list[int]:
    """A role's layers per chunk for the graph's ``meta``: one number when its chunks are
    equal, else one per local chunk."""
    counts = chunk_layers(cfg, stage)
    return counts[0] if len(set(counts)) == 1 else list(counts)


def _assemble(cfg: WorkloadConfig, source: StringTable, body_of: ChunkSource) -> TracedGraph:
    p = cfg.parallel
    n_chunks = p.pp * p.virtual_stages
    rec = Recorder(StringTable())
    roles = []
    expert_params: dict[str, int] = {}
    # Parameter tensors per role (its first stage): per-tensor host loops launch a kernel
    # for each (Megatron's zero count, FP16_Optimizer's copies), and gradient rows undercount
    # them (a layer norm's weight and bias, a linear's weight and bias complete together).
    param_tensors: dict[str, int] = {}
    for stages in role_stages(p.pp):
        s = stages[0]
        fwds, bwds, params, experts, tensors = [], [], 0, 0, 0
        fp8_weights: tuple[int, ...] = ()
        for v, layers in enumerate(chunk_layers(cfg, s)):
            chunk = v * p.pp + s
            dense = moe_dense_prefix(cfg, chunk)
            body = body_of(cfg, chunk == 0, chunk == n_chunks - 1, layers, dense)
            gemms = len(body.fp8_weights)
            fwds.append(_phase(rec, body.forward, source, cfg, gemms, forward=True))
            bwds.append(_phase(rec, body.backward, source, cfg, gemms, forward=False))
            params += body.params
            experts += body.expert_params
            tensors += body.tensors
            fp8_weights += body.fp8_weights
        opt = _optimizer(rec, cfg, params, fp8_weights, experts)
        roles.append(Role(stages, tuple(fwds), tuple(bwds), opt, params, GRAD_BYTES))
        expert_params[str(s)] = experts
        param_tensors[str(s)] = tensors
    meta: dict[str, Any] = {
        "attention": resolve_attention(cfg),
        "layers_per_chunk": {str(st[0]): _layers_meta(cfg, st[0]) for st in role_stages(p.pp)},
        "torch": str(torch.__version__),
        "param_tensors": param_tensors,
    }
    if cfg.model.moe is not None:  # parameters reduced over the expert data-parallel group
        meta["expert_params"] = expert_params
    config = {"config": config_to_mapping(cfg), "key": tracing_key(cfg)}
    return TracedGraph(rec.strings, tuple(roles), config=config, meta=meta)


def trace_workload(cfg: WorkloadConfig, chunks: ChunkCache | None = None) -> TracedGraph:
    """Trace all roles of ``cfg`` on the meta device (no GPU, no cluster), each chunk built
    from ``chunks`` (a new cache when none is given; pass one to share chunk traces between
    layouts)."""
    cache = ChunkCache() if chunks is None else chunks
    try:
        return _assemble(cfg, cache.strings, cache.body)
    except RuntimeError as exc:
        # A tensor of more elements than int64 counts (torch: "Storage size calculation
        # overflowed"): sizes no GPU holds, refused at the config's keys.
        if "overflow" not in str(exc).lower():
            raise
        raise ConfigError(
            "a tensor of the model would need more than 2^63 bytes "
            f"(micro-batch {cfg.batch.micro:,} x sequence {cfg.model.seq_len:,} x hidden "
            f"{cfg.model.hidden:,}; {exc})",
            path=cfg.source or None,
            where="model.seq_len",
            hint="give sizes a GPU can hold (model.seq_len, batch.micro, model.hidden)",
        ) from None


def trace_whole(cfg: WorkloadConfig) -> TracedGraph:
    """:func:`trace_workload` with every chunk traced with all its layers, not repeated."""
    strings = StringTable()

    def whole(cfg: WorkloadConfig, first: bool, last: bool, layers: int, dense: int) -> ChunkBody:
        return trace_chunk(strings, cfg, first, last, layers, dense)

    return _assemble(cfg, strings, whole)
