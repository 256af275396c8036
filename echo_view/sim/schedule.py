"""Pipeline-parallel schedules: the order in which a stage runs its forward and backward passes.

A schedule is, per pipeline stage, a sequence of :class:`Pass` (forward or backward of one
micro-batch through one of the stage's model chunks), exactly as Megatron-LM orders them:

- **1F1B** (``virtual_stages == 1``): stage ``s`` of ``p`` runs ``min(p - s - 1, m)`` warm-up
  forwards, then alternates one forward and one backward, then drains the remaining backwards.
- **Interleaved 1F1B** (``virtual_stages == v > 1``): each stage holds ``v`` chunks; the ``m*v``
  virtual micro-batches go through the chunks in groups of ``N`` contiguous micro-batches
  (Megatron-Core's ``microbatch_group_size_per_vp_stage``, default ``p``: the depth-first
  schedule; ``N = m`` is the breadth-first one; Dubey et al. 2024, Sec. 3.3.2, "Our key insight
  is to make N tunable"); a last group of ``m mod N`` micro-batches, if any, holds at least ``p``.
  Warm-up is ``(p - s - 1) * 2 + (v - 1) * N`` passes (at most all ``m * v``), then one forward /
  one backward (Megatron-Core's ``get_pp_rank_microbatches`` and ``get_schedule_table`` in
  ``megatron/core/pipeline_parallel/schedules.py``, since its tunable schedule of Nov. 2024;
  earlier versions ran all forwards first whenever ``m == p``).

``global chunk`` ``g = chunk * p + stage`` is the chunk's position in the whole model: the forward
of ``g`` needs the forward of ``g - 1`` (on another stage) for the same micro-batch, and the
backward of ``g`` needs the backward of ``g + 1``. The order does not depend on how many layers
each chunk holds (Megatron-Core runs the same order with uneven chunks,
:func:`~echo_view.model.config.chunk_layers`); only the passes' durations do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.model.config import microbatch_group_error


@dataclass(frozen=True, slots=True)
class Pass:
    """One forward or backward pass of ``microbatch`` through local ``chunk``."""

    forward: bool
    chunk: int
    microbatch: int


def _one_f_one_b(stage: int, stages: int, microbatches: int) -> list[Pass]:
    warmup = min(stages - stage - 1, microbatches)
    order = [Pass(True, 0, j) for j in range(warmup)]
    for i in range(microbatches - warmup):
        order.append(Pass(True, 0, warmup + i))
        order.append(Pass(False, 0, i))
    order.extend(Pass(False, 0, j) for j in range(microbatches - warmup, microbatches))
    return order


def group_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """``(microbatch, chunk)`` of each forward, in order: every group of ``group`` contiguous
    micro-batches (the last one takes the rest) through chunk 0, then chunk 1, and so on."""
    table: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table.extend((j, c) for c in range(chunks) for j in range(first, last))
    return table


def interleaved_warmup(stage: int, stages: int, microbatches: int, chunks: int, group: int) -> int:
    """Forward passes stage ``stage`` runs before its first backward, less one."""
    return min((stages - stage - 1) * 2 + (chunks - 1) * group, microbatches * chunks)


def _interleaved(stage: int, stages: int, microbatches: int, chunks: int, group: int) -> list[Pass]:
    v = chunks
    table = group_table(microbatches, chunks, group)
    total = len(table)
    warmup = interleaved_warmup(stage, stages, microbatches, chunks, group)

    def fwd(k: int) -> Pass:
        return Pass(True, table[k][1], table[k][0])

    def bwd(k: int) -> Pass:  # backwards visit the chunks last to first
        return Pass(False, v - 1 - table[k][1], table[k][0])

    order = [fwd(k) for k in range(warmup)]
    remaining = total - warmup
    for i in range(remaining):
        order.append(fwd(warmup + i))
        order.append(bwd(i))
    order.extend(bwd(k) for k in range(remaining, total))
    return order


def schedule(
    stage: int, stages: int, microbatches: int, chunks: int = 1, group: int | None = None
) -> list[Pass]:
    """The passes stage ``stage`` runs in one step, in order; ``group`` is the interleaved
    schedule's contiguous micro-batches per chunk (``None``: ``stages``)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} is outside 0..{stages - 1}")
    if chunks == 1:
        return _one_f_one_b(stage, stages, microbatches)
    n = stages if group is None else group
    _check_interleaved(stages, microbatches, n)
    return _interleaved(stage, stages, microbatches, chunks, n)


def _check_interleaved(stages: int, microbatches: int, n: int) -> None:
    if microbatches % stages and n == stages:
        raise ValueError(
            f"the interleaved schedule needs micro-batches ({microbatches}) to be a multiple "
            f"of the pipeline stages ({stages})"
        )
    why = microbatch_group_error(stages, microbatches, n)
    if why is not None:
        raise ValueError(why)


Int64s = npt.NDArray[np.int64]


def schedule_arrays(
    stage: int, stages: int, microbatches: int, chunks: int = 1, group: int | None = None
) -> tuple[npt.NDArray[np.bool_], Int64s, Int64s]:
    """:func:`schedule` as three arrays (``forward``, ``chunk``, ``microbatch`` of each pass,
    in order), built without a Python object per pass: a step can hold millions of passes."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} is outside 0..{stages - 1}")
    m, v = microbatches, chunks
    n = m if v == 1 else (stages if group is None else group)
    if v > 1:
        _check_interleaved(stages, m, n)
    total = m * v
    warmup = min(stages - stage - 1, m) if v == 1 else interleaved_warmup(stage, stages, m, v, n)
    remaining = total - warmup
    # Position k of the forward table: groups of n micro-batches through chunk 0, 1, ...;
    # the last group (m mod n micro-batches, when not 0) after the whole ones.
    k = np.arange(total, dtype=np.int64)
    whole = (m // n) * n * v
    size = np.where(k < whole, n, max(m % n, 1))
    w = np.where(k < whole, k % (n * v), k - whole)  # position in its group
    table_chunk = w // size
    table_mb = np.where(k < whole, (k // (n * v)) * n, (m // n) * n) + w % size
    fwd_k = np.arange(warmup, total, dtype=np.int64)
    bwd_k = np.arange(remaining, dtype=np.int64)
    steady = np.stack([fwd_k, bwd_k], axis=1).ravel()
    order = np.concatenate([k[:warmup], steady, k[remaining:]])
    forward = np.concatenate(
        [
            np.ones(warmup, dtype=bool),
            np.tile(np.array([True, False]), remaining),
            np.zeros(total - remaining, dtype=bool),
        ]
    )
    chunk = np.where(forward, table_chunk[order], v - 1 - table_chunk[order])
    return forward, chunk, table_mb[order]


def blocking_p2p_calls(
    stage: int, stages: int, microbatches: int, chunks: int, group: int | None = None
) -> list[bool]:
    """For each pass of :func:`schedule` (interleaved, same order), whether Megatron-Core's
    schedule without ``overlap_p2p_comm`` makes its batched send/receive call right after it:
    after every warm-up forward and every backward, not after a steady-state forward, whose
    output goes out with its paired backward's gradient in one call after that backward
    (``send_forward_backward_recv_forward_backward`` in
    ``forward_backward_pipelining_with_interleaving``). A pass's input is received in the call
    before it."""
    n = stages if group is None else group
    passes = schedule(stage, stages, microbatches, chunks, n)
    warmup = interleaved_warmup(stage, stages, microbatches, chunks, n)
    return [
        not (ps.forward and i >= warmup and (i - warmup) % 2 == 0) for i, ps in enumerate(passes)
    ]


def bubble_fraction(stages: int, microbatches: int, chunks: int = 1) -> float:
    """The ideal pipeline bubble, ``(p - 1) / (v * m)`` of the compute time (Narayanan et al.,
    SC'21), for equal forward and backward times per chunk (with uneven chunks, an estimate)."""
    return (stages - 1) / (chunks * microbatches)
