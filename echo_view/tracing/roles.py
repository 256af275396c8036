"""Trace every distinct rank role of a workload config into a :class:`TracedGraph`.

Rule for roles: ranks that differ only in their tensor- or data-parallel index run the same ops
on same-sized shards, so one rank per pipeline stage is enough; stages between the first (which
holds the embedding) and the last (which holds the output layer and loss) are identical, so a
layout with ``pp`` stages has at most three roles: ``{0}``, ``{1..pp-2}`` and ``{pp-1}``.
With interleaving (``virtual_stages`` = v) rank stage ``s`` holds model chunks ``s, s+pp, ...,
s+(v-1)pp``; chunk 0 has the embedding and chunk ``pp*v-1`` the loss.
"""

from __future__ import annotations

from typing import Any

import torch

from echo_view.model.config import (
    WorkloadConfig,
    config_to_mapping,
    resolve_attention,
    stage_layers,
    tracing_key,
)
from echo_view.model.graph import OpClass, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.tracing.fp8 import record_cast, record_scale_update
from echo_view.tracing.gpt import TORCH_DTYPES, GPTChunk, fp8_recipe
from echo_view.tracing.layers import ColumnParallelLinear, RowParallelLinear
from echo_view.tracing.recorder import Recorder

#: Bytes per gradient element: Megatron accumulates gradients in fp32 (``main_grad``).
GRAD_BYTES = 4


def role_stages(pp: int) -> list[tuple[int, ...]]:
    """Groups of pipeline stages that share a role."""
    if pp == 1:
        return [(0,)]
    if pp == 2:
        return [(0,), (1,)]
    return [(0,), tuple(range(1, pp - 1)), (pp - 1,)]


def _fp8_weights(module: torch.nn.Module) -> list[int]:
    """Element counts of the weights of the chunk's FP8 linear layers."""
    return [
        int(mod.weight.numel())
        for mod in module.modules()
        if isinstance(mod, (ColumnParallelLinear, RowParallelLinear)) and mod.fp8 is not None
    ]


def _trace_chunk(
    rec: Recorder, cfg: WorkloadConfig, chunk_id: int, n_chunks: int, layers: int
) -> tuple[Any, Any, int, list[int]]:
    m, p = cfg.model, cfg.parallel
    first, last = chunk_id == 0, chunk_id == n_chunks - 1
    module = GPTChunk(rec, cfg, layers, first, last)
    params = sum(int(t.numel()) for t in module.parameters())
    fp8_weights = _fp8_weights(module)
    recipe = fp8_recipe(cfg)
    for prm in module.parameters():
        nbytes = int(prm.numel()) * GRAD_BYTES
        prm.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
            lambda _p, n=nbytes: rec.grad_ready(n)
        )
    seq = m.seq_len // p.cp
    b = cfg.batch.micro
    dtype = TORCH_DTYPES[cfg.dtype]
    target = torch.empty(seq, b, dtype=torch.int64, device="meta") if last else None
    if first:
        x = torch.empty(seq, b, dtype=torch.int64, device="meta")
    else:
        s_local = seq // p.tp if p.sequence_parallel else seq
        x = torch.empty(s_local, b, m.hidden, dtype=dtype, device="meta", requires_grad=True)
    rec.begin()
    out = module(x, target)
    if recipe is not None:
        record_scale_update(rec, recipe, len(fp8_weights), forward=True)
    fwd = rec.end()
    rec.begin()
    if last:
        out.backward()
    else:
        out.backward(torch.empty_like(out))
    if recipe is not None:
        record_scale_update(rec, recipe, len(fp8_weights), forward=False)
    bwd = rec.end()
    return fwd, bwd, params, fp8_weights


def _optimizer(
    rec: Recorder, cfg: WorkloadConfig, params: int, fp8_weights: list[int] | None = None
) -> Any:
    """The step's optimizer kernels on this rank's parameters (a shard of them with the
    distributed optimizer): gradient-norm reduction, fused Adam, zeroing the gradients; with
    FP8, the once-per-step quantization of the FP8 layers' updated weights."""
    n = params // cfg.parallel.dp if cfg.parallel.distributed_optimizer else params
    half = cfg.dtype != "fp32"
    recipe = fp8_recipe(cfg)
    rec.begin()
    rec.op("grad_norm", OpClass.REDUCTION, flops=2.0 * n, nbytes=GRAD_BYTES * n, dtype="fp32")
    # Adam reads/writes the fp32 param, m and v, reads the grad, and (mixed precision) writes
    # the half-precision copy of the param.
    adam_bytes = n * (8 + 8 + 8 + GRAD_BYTES) + (2 * n if half else 0)
    rec.op("fused_adam", OpClass.OPTIMIZER, flops=12.0 * n, nbytes=adam_bytes, dtype="fp32")
    rec.op("zero_grad", OpClass.COPY, flops=0.0, nbytes=GRAD_BYTES * params, dtype="fp32")
    if recipe is not None:
        for numel in fp8_weights or []:
            record_cast(rec, numel, recipe, "weight")
    return rec.end()


def trace_workload(cfg: WorkloadConfig) -> TracedGraph:
    """Trace all roles of ``cfg`` on the meta device (no GPU, no cluster)."""
    p = cfg.parallel
    n_chunks = p.pp * p.virtual_stages
    strings = StringTable()
    rec = Recorder(strings)
    roles = []
    with rec:
        for stages in role_stages(p.pp):
            s = stages[0]
            fwds, bwds, params, fp8_weights = [], [], 0, []
            for v in range(p.virtual_stages):
                fwd, bwd, n, w8 = _trace_chunk(
                    rec, cfg, v * p.pp + s, n_chunks, stage_layers(cfg, s)
                )
                fwds.append(fwd)
                bwds.append(bwd)
                params += n
                fp8_weights += w8
            opt = _optimizer(rec, cfg, params, fp8_weights)
            roles.append(Role(stages, tuple(fwds), tuple(bwds), opt, params, GRAD_BYTES))
    meta = {
        "attention": resolve_attention(cfg),
        "layers_per_chunk": {str(st[0]): stage_layers(cfg, st[0]) for st in role_stages(p.pp)},
        "torch": str(torch.__version__),
    }
    config = {"config": config_to_mapping(cfg), "key": tracing_key(cfg)}
    return TracedGraph(strings, tuple(roles), config=config, meta=meta)
