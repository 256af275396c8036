"""One micro-batch of one model chunk, traced once per chunk shape and repeated per layer.

A chunk of ``n`` transformer layers runs, forward and backward, a head (the embedding on the
model's first chunk; the leaf input's gradient otherwise), ``n`` times the same layer block
and a tail (the final norm, output layer and loss on the last chunk). A layer's ops depend
only on the chunk key (:func:`~echo_view.model.config_keys.chunk_key`: model dimensions, tensor and
context parallelism, sequence parallelism, micro-batch, recomputation, dtype and attention),
not on the pipeline layout or the layer count. So :class:`ChunkCache` traces each chunk kind
(first or not, last or not) with one and with two layers, finds the repeated block in each op
sequence (the one-layer sequence with its block doubled must be the two-layer sequence) and
builds a chunk of any length by repeating it: the same rows, gradient marks included, as a
trace of the whole chunk (``tests/tracing/test_chunks.py`` checks it over many layouts). A
sequence without that structure is traced whole instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from echo_view.model.config import WorkloadConfig
from echo_view.model.config_keys import chunk_key
from echo_view.model.graph import OP_COLUMNS, OpTable
from echo_view.model.strings import StringTable
from echo_view.tracing.gpt import GPTChunk, param_dtype
from echo_view.tracing.layers import ColumnParallelLinear, RowParallelLinear
from echo_view.tracing.moe import GroupedMLP
from echo_view.tracing.recorder import Fills, Recorder

#: Bytes per gradient element: Megatron accumulates gradients in fp32 (``main_grad``).
GRAD_BYTES = 4


@dataclass(frozen=True, eq=False)
class ChunkBody:
    """One micro-batch of one model chunk: its forward and backward ops (string ids into the
    table they were traced with), its parameter count (``expert_params`` of them in MoE
    experts, reduced over the expert data-parallel group), its FP8 weights' element
    counts and its number of parameter tensors."""

    forward: OpTable
    backward: OpTable
    params: int
    fp8_weights: tuple[int, ...]
    expert_params: int = 0
    tensors: int = 0


def _fp8_weights(module: torch.nn.Module) -> tuple[int, ...]:
    """Element counts of the weights of the chunk's FP8 linear layers and grouped expert
    GEMMs, in module order."""
    out: list[int] = []
    for mod in module.modules():
        if isinstance(mod, (ColumnParallelLinear, RowParallelLinear)) and mod.fp8 is not None:
            out.append(int(mod.weight.numel()))
        elif isinstance(mod, GroupedMLP):
            out.extend(mod.fp8_weights())
    return tuple(out)


def trace_chunk(
    strings: StringTable,
    cfg: WorkloadConfig,
    first: bool,
    last: bool,
    layers: int,
    dense: int = 0,
) -> ChunkBody:
    """Trace one micro-batch of a chunk of ``layers`` layers (with the embedding when
    ``first``, the output layer and loss when ``last``; in an MoE model the first ``dense``
    layers dense) on the meta device."""
    m, p = cfg.model, cfg.parallel
    rec = Recorder(strings, Fills.of(cfg))
    with rec:
        module = GPTChunk(rec, cfg, layers, first, last, dense)
        params = sum(int(t.numel()) for t in module.parameters())
        experts = sum(int(t.numel()) for t in module.parameters() if getattr(t, "expert", False))
        torch_ddp = p.ddp == "torch"
        adds = _main_grad_adds(module, cfg)
        cast_add = cfg.training.grad_accumulation == "cast_add"
        for prm in module.parameters():
            nbytes = int(prm.numel()) * GRAD_BYTES
            # PyTorch DDP (``gradient_as_bucket_view``) copies each gradient autograd produced
            # into its bucket when it is ready (``Reducer::mark_variable_ready_dense``; dividing
            # by the world size in the same pass, ``mul_out``), then reduces the bucket.
            bucket = torch.empty_like(prm) if torch_ddp else None
            main_grad = None
            if id(prm) in adds or cast_add:
                main_grad = torch.empty_like(prm, dtype=torch.float32)
            prm.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                lambda q, n=nbytes, b=bucket, g=main_grad: _grad_ready(rec, q, n, b, g, cast_add)
            )
        seq = m.seq_len // p.cp
        b = cfg.batch.micro
        target = torch.empty(seq, b, dtype=torch.int64, device="meta") if last else None
        if first:
            x = torch.empty(seq, b, dtype=torch.int64, device="meta")
        else:
            s_local = seq // p.tp if p.sequence_parallel else seq
            dtype = param_dtype(cfg)  # the residual stream's: fp32 under autocast
            x = torch.empty(s_local, b, m.hidden, dtype=dtype, device="meta", requires_grad=True)
        rec.begin()
        out = module(x, target)
        fwd = rec.end()
        rec.begin()
        if last:
            out.backward()
        else:
            out.backward(torch.empty_like(out))
        bwd = rec.end()
    tensors = sum(1 for _ in module.parameters())
    return ChunkBody(fwd, bwd, params, _fp8_weights(module), experts, tensors)


def _main_grad_adds(module: torch.nn.Module, cfg: WorkloadConfig) -> set[int]:
    """Ids of the parameters whose gradient Megatron's DDP hook adds to the fp32 ``main_grad``
    after each micro-batch's backward (``param.main_grad.add_(param.grad.data)``,
    ``_make_backward_post_hook`` in megatron/core/distributed/distributed_data_parallel.py):
    every parameter whose gradient autograd produced. With ``gradient_accumulation_fusion``
    the linear layers' and grouped experts' weight-gradient GEMMs accumulate into
    ``main_grad`` themselves (``grad_added_to_main_grad``) and are left out; the norms',
    biases' and embeddings' gradients take the hook with either setting, one kernel each.
    Without ``--no-gradient-accumulation-fusion`` the GEMM returns a 16-bit ``grad_weight``
    (``LinearWithGradAccumulationAndAsyncCommunication.backward`` in
    megatron/core/tensor_parallel/layers.py; Transformer Engine's ``fuse_wgrad_accumulation``
    off) that the hook adds too. Empty where there is no ``main_grad``
    (:attr:`~echo_view.model.config.WorkloadConfig.megatron_main_grad`)."""
    if not cfg.megatron_main_grad:
        return set()
    params = {id(prm) for prm in module.parameters()}
    if not cfg.training.gradient_accumulation_fusion:
        return params
    fused: set[int] = set()
    for mod in module.modules():
        if isinstance(mod, (ColumnParallelLinear, RowParallelLinear)):
            fused.add(id(mod.weight))
        elif isinstance(mod, GroupedMLP):
            fused.update(id(w) for w in mod.parameters())
    return params - fused


def _grad_ready(
    rec: Recorder,
    prm: torch.Tensor,
    nbytes: int,
    bucket: torch.Tensor | None,
    main_grad: torch.Tensor | None,
    cast: bool = False,
) -> None:
    """A parameter's gradient is complete: copied into its DDP bucket (``bucket``, PyTorch
    DDP) or added to Megatron's fp32 ``main_grad`` (:func:`_main_grad_adds`), or, with
    ``cast`` (DeepSpeed's ``BF16_Optimizer.update_hp_grads``), cast to fp32 and then added to
    the fp32 gradient, ``hp_grad.add_(lp.grad.to(hp_grad.dtype))``; then marked ready for the
    data-parallel reduction. DeepSpeed adds after the whole backward, not per tensor as it
    completes: the pass's ops and its end are the same, which is what the schedule times."""
    if prm.grad is not None:
        if bucket is not None:
            bucket.copy_(prm.grad)
        if main_grad is not None:
            main_grad.add_(prm.grad.to(torch.float32) if cast else prm.grad)
    rec.grad_ready(nbytes)


def _rows(table: OpTable) -> npt.NDArray[np.int64]:
    """The table as an ``(ops, columns)`` integer matrix (FLOPs by their bits), for comparing
    whole rows."""
    cols = [
        getattr(table, c).view(np.int64) if c == "flops" else getattr(table, c).astype(np.int64)
        for c in OP_COLUMNS
    ]
    return np.stack(cols, axis=1) if len(table) else np.empty((0, len(cols)), np.int64)


def block_start(one: npt.NDArray[Any], two: npt.NDArray[Any]) -> int | None:
    """Where the repeated block starts in ``one`` (rows of a one-layer sequence), given
    ``two`` (the two-layer sequence): ``p`` such that ``two == one[:p + d] + one[p:]`` with
    ``d = len(two) - len(one)`` the block's length; ``None`` when there is no such ``p``.
    Any valid ``p`` gives the same sequences for every layer count (the blocks differ by a
    rotation), so the smallest the common suffix allows is taken."""
    a, d = len(one), len(two) - len(one)
    if d < 0 or a == 0:
        return 0 if a == d == 0 else None
    same_head = (one == two[:a]).reshape(a, -1).all(axis=1)
    same_tail = (one == two[d:]).reshape(a, -1).all(axis=1)
    common_head = a if same_head.all() else int(np.argmin(same_head))
    common_tail = a if same_tail.all() else a - 1 - int(np.flatnonzero(~same_tail)[-1])
    p = a - common_tail
    return p if p + d <= common_head else None


def repeat_index(length: int, start: int, block: int, times: int) -> npt.NDArray[np.intp]:
    """Row indices into a one-layer sequence of ``length`` rows that repeat its block
    ``[start, start + block)`` ``times`` times."""
    return np.concatenate(
        [
            np.arange(start),
            np.tile(np.arange(start, start + block), times),
            np.arange(start + block, length),
        ]
    ).astype(np.intp)


def _take(table: OpTable, index: npt.NDArray[np.intp]) -> OpTable:
    return OpTable(**{c: getattr(table, c)[index] for c in OP_COLUMNS})


@dataclass(frozen=True, eq=False)
class _Repeatable:
    """A chunk kind traced with one and two layers, and where each sequence's block starts
    (``None`` for a sequence without one)."""

    one: ChunkBody
    two: ChunkBody
    forward: int | None
    backward: int | None
    fp8: int | None

    @classmethod
    def of(cls, one: ChunkBody, two: ChunkBody) -> _Repeatable:
        w1, w2 = np.asarray(one.fp8_weights, np.int64), np.asarray(two.fp8_weights, np.int64)
        return cls(
            one,
            two,
            block_start(_rows(one.forward), _rows(two.forward)),
            block_start(_rows(one.backward), _rows(two.backward)),
            block_start(w1, w2),
        )

    def body(self, layers: int) -> ChunkBody | None:
        """The chunk with ``layers`` layers, or ``None`` when a sequence does not repeat."""
        if layers == 1:
            return self.one
        if layers == 2:
            return self.two
        if layers < 1 or self.forward is None or self.backward is None or self.fp8 is None:
            return None
        one, two = self.one, self.two

        def index(start: int, a: int, b: int) -> npt.NDArray[np.intp]:
            return repeat_index(a, start, b - a, layers)

        w8 = np.asarray(one.fp8_weights, np.int64)
        fp8 = w8[index(self.fp8, len(one.fp8_weights), len(two.fp8_weights))]
        return ChunkBody(
            _take(one.forward, index(self.forward, len(one.forward), len(two.forward))),
            _take(one.backward, index(self.backward, len(one.backward), len(two.backward))),
            one.params + (layers - 1) * (two.params - one.params),
            tuple(int(n) for n in fp8),
            one.expert_params + (layers - 1) * (two.expert_params - one.expert_params),
            one.tensors + (layers - 1) * (two.tensors - one.tensors),
        )


class ChunkCache:
    """Chunk bodies built from chunks traced once per chunk key and kind; reuse one cache
    across the layouts of a search. String ids of the bodies refer to :attr:`strings`."""

    def __init__(self) -> None:
        self.strings = StringTable()
        self._kinds: dict[tuple[str, bool, bool], _Repeatable] = {}

    def __len__(self) -> int:
        return len(self._kinds)

    def body(
        self, cfg: WorkloadConfig, first: bool, last: bool, layers: int, dense: int = 0
    ) -> ChunkBody:
        """A chunk of ``layers`` layers of ``cfg``'s model (see :func:`trace_chunk`). A chunk
        that mixes an MoE model's dense layers with MoE layers (only the first) is traced
        whole."""
        if cfg.model.moe is not None and dense > 0:
            return trace_chunk(self.strings, cfg, first, last, layers, dense)
        key = (chunk_key(cfg), first, last)
        kind = self._kinds.get(key)
        if kind is None:
            one = trace_chunk(self.strings, cfg, first, last, 1)
            two = trace_chunk(self.strings, cfg, first, last, 2)
            kind = self._kinds[key] = _Repeatable.of(one, two)
        body = kind.body(layers)
        return body if body is not None else trace_chunk(self.strings, cfg, first, last, layers)


def copy_strings(
    tables: Sequence[OpTable], source: StringTable, target: StringTable
) -> list[OpTable]:
    """``tables`` with their string ids moved from ``source`` to ``target``, interned in row
    order (name, dtype, shapes of each row, as the recorder interns them): a target filled
    only this way numbers its strings exactly as one recording of the same rows would."""
    out = []
    lut = np.full(len(source) + 1, -1, np.int64)  # index -1 (no string) stays -1
    for t in tables:
        ids = np.stack([t.name, t.dtype, t.shapes], axis=1).ravel().astype(np.int64)
        ids = ids[ids >= 0]
        uniq, first = np.unique(ids, return_index=True)
        for i in uniq[np.argsort(first)]:
            if lut[i] < 0:
                lut[i] = target.intern(source[int(i)])
        cols = {c: getattr(t, c) for c in OP_COLUMNS}
        for c in ("name", "dtype", "shapes"):
            cols[c] = lut[cols[c].astype(np.int64)]
        out.append(OpTable(**cols))
    return out
