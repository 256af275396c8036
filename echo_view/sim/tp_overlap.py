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
#: How far from a collective its GEMM may sit (casts, a bias-gradient sum in between).
_WINDOW = 3


def ring_exchange_ns(gemm_chunk: float, coll: float, n: int) -> float:
    """All-gather in ``n`` ring steps overlapped with ``n`` GEMM chunks."""
    if n < 2:
        return gemm_chunk + coll
    return (n - 1) * max(gemm_chunk, coll / (n - 1)) + gemm_chunk


def pipeline_ns(gemm_chunk: float, coll_chunk: float, n: int) -> float:
    """``n`` GEMM chunks, each followed by the reduce-scatter of its output."""
    return gemm_chunk + (n - 1) * max(gemm_chunk, coll_chunk) + coll_chunk


def _partner(table: OpTable, i: int, step: int) -> int:
    """The GEMM within a few ops of collective ``i`` (forward for ``step`` 1), or -1."""
    j = i + step
    for _ in range(_WINDOW):
        if not 0 <= j < len(table):
            return -1
        cls = int(table.op_class[j])
        if cls == OpClass.COLLECTIVE:
            return -1
        if cls == OpClass.GEMM:
            return j
        j += step
    return -1


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
) -> npt.NDArray[np.int64]:
    """``dur`` with each overlapped tensor-parallel collective's time replaced by its exposed
    time. ``chunk_ns(j, n)`` is the time of GEMM ``j`` on ``1/n`` of its rows; ``streamed_ns``
    maps each tensor-parallel collective's op index to its transfer time through userbuffers
    (its bytes at the group's streaming rate, no per-call latency); GEMMs of
    ``output_gemm_flops`` are the output layer's."""
    out = dur.copy()
    tp_axis = AXES.index("tp")
    margin = sm_count / max(sm_count - COMM_SMS, 1)

    for i in np.flatnonzero(table.op_class == OpClass.COLLECTIVE).tolist():
        if int(table.axis[i]) != tp_axis:
            continue
        kind = table.coll(i)
        c = streamed_ns[i]
        if kind == CollectiveKind.ALL_GATHER:
            j = _partner(table, i, 1)
            if j < 0 or float(table.flops[j]) in output_gemm_flops:
                continue
            total = ring_exchange_ns(chunk_ns(j, tp), c, tp)
        elif kind == CollectiveKind.REDUCE_SCATTER:
            j = _partner(table, i, -1)
            if j < 0 or float(table.flops[j]) in output_gemm_flops:
                continue
            if backward:
                total = max(c, float(dur[j]) * margin)
            else:
                g_n = chunk_ns(j, PIPELINE_SPLITS) * margin
                total = pipeline_ns(g_n, c / PIPELINE_SPLITS, PIPELINE_SPLITS)
        else:
            continue
        out[i] = max(round(total) - int(dur[j]), 0)
    return out
