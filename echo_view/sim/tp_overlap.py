"""Tensor-parallel communication overlap (``tp_comm_overlap``): Transformer Engine's
userbuffers split the all-gather / reduce-scatter of a sequence-parallel linear layer into
chunks pipelined with chunks of its GEMM, the collective on its own stream.

Each tensor-parallel collective of a transformer layer is paired with the GEMM next to it and
its time is replaced by what the pipeline cannot hide (the pass keeps the GEMM's time, so the
pair lasts ``gemm + exposed``). Methods and chunk counts are Transformer Engine's defaults
(``transformer_engine/pytorch/module/base.py``, ``initialize_ub``; ``atomic_gemm`` and
``aggregate`` off, as there). Userbuffers are not NCCL:
the buffers are registered once, the ring exchange copies chunks peer to peer with the copy
engines (``use_ce``), the pipelined and bulk reduce-scatters run userbuffers' own kernels; no
NCCL call is made per chunk. ``c`` is therefore the collective's bytes at the rate the
collective model streams large messages over the tensor-parallel group, without a per-call
latency (:meth:`~echo_view.sim.compose_costs.CollectiveCache.streaming_ns`):

- all-gather before a GEMM (``qkv_fprop``, ``fc1_fprop``; ``proj_dgrad``, ``fc2_dgrad`` in
  backward): ``ring_exchange`` in ``n = tp`` steps; step ``k`` multiplies the chunk it holds
  while the next one arrives (a ``1/(n-1)`` share of the all-gather), so
  ``T = (n - 1) * max(g_n, c / (n - 1)) + g_n``, with ``g_n`` the time of a ``1/n`` GEMM;
- reduce-scatter after a GEMM in forward (``proj_fprop``, ``fc2_fprop``): ``pipeline`` with
  ``n = 4`` splits: ``T = g_n + (n - 1) * max(g_n, c / n) + c / n``; its communication kernels
  hold 16 SMs (``set_sm_margin``), so the GEMM chunks run on ``sm_count - 16`` SMs;
- reduce-scatter of the input gradient in backward (``qkv_wgrad``, ``fc1_wgrad``): ``bulk``,
  the whole reduce-scatter beside the independent weight-gradient GEMM, also on 16 SMs fewer:
  ``T = max(c, g * sm / (sm - 16))``.

``exposed = max(T - g, 0)``. The output layer (Megatron-Core's own column-parallel linear, no
userbuffers) and the embedding keep their collectives exposed (NCCL, with its latency).

With sequence parallelism a column-parallel linear's backward runs two collectives beside a
GEMM, with or without ``tp_comm_overlap``: it keeps only its sequence shard of the input and
all-gathers it again for the weight gradient (:data:`WGRAD_GATHER`), issued before the
input-gradient GEMM and waited for after it; and it reduce-scatters the input gradient, issued
before the weight-gradient GEMM and waited for after it (Megatron-LM's
``LinearWithGradAccumulationAndAsyncCommunication.backward``, which relies on
``CUDA_DEVICE_MAX_CONNECTIONS=1`` for the order; Transformer Engine's ``_Linear`` and
``_LayerNormLinear`` backward alike):

- through NCCL (:func:`overlap_linear_backward`): the GEMM runs ``s`` times slower while the
  collective lasts (``c``), at full speed after, so ``T = max(c, g + c * (1 - 1/s))``; ``s`` is
  the interference model's slowdown of that GEMM beside communication (the simulator's
  ``interference`` setting: published per GPU generation by default, 1 when off;
  :mod:`echo_view.sim.interference`);
- through userbuffers: the bulk methods above (TE's ``qkv_dgrad`` / ``fc1_dgrad`` for the
  all-gather), ``T = max(c, g * sm / (sm - 16))``; the output layer's stay on NCCL.

Without sequence parallelism the input gradient is all-reduced instead, issued before the
weight-gradient GEMM in the same way since Megatron-LM's asynchronous tensor-parallel all-reduce
(September 2021; ``[parallel] async_tensor_model_parallel_allreduce``, on by default): older
stacks (Megatron-LM v1, BigScience's Megatron-DeepSpeed) ran it after the linear's backward,
exposed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from echo_view.model.graph import AXES, OpClass, OpTable
from echo_view.model.kinds import CollectiveKind

#: Ring-exchange steps are tp; the pipeline method splits a GEMM in this many chunks.
PIPELINE_SPLITS = 4
#: SMs the pipeline and bulk methods give their communication kernels.
COMM_SMS = 16
#: How far from a collective its GEMM may sit: casts, a bias-gradient sum, and without
#: gradient-accumulation fusion the additions of the weight's and the bias's gradients to
#: their main gradients in between (at 3 the last of these hid the GEMM).
_WINDOW = 4
#: Graph op name of the all-gather of a sequence-parallel column-parallel linear's input for its
#: weight gradient (module docstring): Korthikanti et al. 2022, Sec. 4.2.2; Megatron-LM's
#: ``LinearWithGradAccumulationAndAsyncCommunication.backward``; Transformer Engine's
#: ``_Linear`` / ``_LayerNormLinear`` backward (in FP8 for an FP8 input).
WGRAD_GATHER = "nccl:all_gather:wgrad_input"


def nccl_beside_gemm_ns(gemm: float, coll: float, slowdown: float) -> float:
    """A GEMM of ``gemm`` ns beside a collective of ``coll`` ns that slows it ``slowdown``-fold
    while it lasts: both done after ``max(c, g + c * (1 - 1 / s))``."""
    return max(coll, gemm + coll * (1.0 - 1.0 / max(slowdown, 1.0)))


def ring_exchange_ns(gemm_chunk: float, coll: float, n: int) -> float:
    """All-gather in ``n`` ring steps overlapped with ``n`` GEMM chunks."""
    if n < 2:
        return gemm_chunk + coll
    return (n - 1) * max(gemm_chunk, coll / (n - 1)) + gemm_chunk


def bulk_ns(gemm: float, coll: float, margin: float) -> float:
    """A whole collective beside an independent GEMM that runs on ``1/margin`` of the SMs."""
    return max(coll, gemm * margin)


def pipeline_ns(gemm_chunk: float, coll_chunk: float, n: int) -> float:
    """``n`` GEMM chunks, each followed by the reduce-scatter of its output."""
    return gemm_chunk + (n - 1) * max(gemm_chunk, coll_chunk) + coll_chunk


def _partner(table: OpTable, i: int, step: int, fills: npt.NDArray[np.bool_] | None = None) -> int:
    """The GEMM within a few ops of collective ``i`` (forward for ``step`` 1), or -1. Fills of
    new buffers (``fills`` rows: each op's allocations under deterministic algorithms) do not
    count as ops between them."""
    j, left = i + step, _WINDOW
    while left:
        if not 0 <= j < len(table):
            return -1
        cls = int(table.op_class[j])
        if cls == OpClass.COLLECTIVE:
            return -1
        if cls == OpClass.GEMM:
            return j
        if fills is None or not fills[j]:
            left -= 1
        j += step
    return -1


def overlap_linear_backward(
    table: OpTable,
    dur: npt.NDArray[np.int64],
    regather: npt.NDArray[np.bool_],
    dgrad_scatter: npt.NDArray[np.bool_],
    slowdown: Callable[[float], float],
    fills: npt.NDArray[np.bool_] | None = None,
    beside: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]:
    """``dur`` with a column-parallel linear's backward collectives timed as what the GEMM
    beside them does not hide when both run through NCCL (:func:`nccl_beside_gemm_ns`): each
    weight-gradient all-gather (``regather`` rows) beside the GEMM after it (the input
    gradient), each input-gradient reduce-scatter or all-reduce (``dgrad_scatter`` rows) beside
    the GEMM before it (the weight gradient). ``slowdown(g)`` is the slowdown of a GEMM of
    ``g`` ns beside communication; a collective with no GEMM within reach stays exposed.
    ``beside`` (when given) gets, at each collective so timed, its GEMM's row."""
    out = dur.copy()
    for mask, step in ((regather, 1), (dgrad_scatter, -1)):
        for i in np.flatnonzero(mask).tolist():
            j = _partner(table, i, step, fills)
            if j < 0:
                continue
            g = float(dur[j])
            total = nccl_beside_gemm_ns(g, float(dur[i]), slowdown(g))
            out[i] = max(round(total) - int(dur[j]), 0)
            if beside is not None:
                beside[i] = j
    return out


def overlap_tp_comm(
    table: OpTable,
    dur: npt.NDArray[np.int64],
    chunk_ns: Callable[[int, int], float],
    streamed_ns: dict[int, float],
    *,
    tp: int,
    sm_count: int,
    backward: bool,
    output_gemm_flops: frozenset[float],
    regather: npt.NDArray[np.bool_] | None = None,
    fills: npt.NDArray[np.bool_] | None = None,
    beside: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]:
    """``dur`` with each overlapped tensor-parallel collective's time replaced by its exposed
    time. ``chunk_ns(j, n)`` is the time of GEMM ``j`` on ``1/n`` of its rows; ``streamed_ns``
    maps each tensor-parallel collective's op index to its transfer time through userbuffers
    (its bytes at the group's streaming rate, no per-call latency); GEMMs of
    ``output_gemm_flops`` are the output layer's; ``regather`` marks the weight-gradient
    all-gathers (bulk beside the input-gradient GEMM). ``beside`` (when given) gets, at each
    collective so timed, its GEMM's row."""
    out = dur.copy()
    tp_axis = AXES.index("tp")
    margin = sm_count / max(sm_count - COMM_SMS, 1)

    for i in np.flatnonzero(table.op_class == OpClass.COLLECTIVE).tolist():
        if int(table.axis[i]) != tp_axis:
            continue
        kind = table.coll(i)
        c = streamed_ns[i]
        if kind == CollectiveKind.ALL_GATHER:
            j = _partner(table, i, 1, fills)
            if j < 0 or float(table.flops[j]) in output_gemm_flops:
                continue
            if regather is not None and regather[i]:
                total = bulk_ns(float(dur[j]), c, margin)
            else:
                total = ring_exchange_ns(chunk_ns(j, tp), c, tp)
        elif kind == CollectiveKind.REDUCE_SCATTER:
            j = _partner(table, i, -1, fills)
            if j < 0 or float(table.flops[j]) in output_gemm_flops:
                continue
            if backward:
                total = bulk_ns(float(dur[j]), c, margin)
            else:
                g_n = chunk_ns(j, PIPELINE_SPLITS) * margin
                total = pipeline_ns(g_n, c / PIPELINE_SPLITS, PIPELINE_SPLITS)
        else:
            continue
        out[i] = max(round(total) - int(dur[j]), 0)
        if beside is not None:
            beside[i] = j
    return out
