"""Pipeline-parallel schedules: the order in which a stage runs its forward and backward passes.

A schedule is, per pipeline stage, a sequence of :class:`Pass` (forward or backward of one
micro-batch through one of the stage's model chunks), exactly as Megatron-LM orders them:

- **1F1B** (``virtual_stages == 1``): stage ``s`` of ``p`` runs ``min(p - s - 1, m)`` warm-up
  forwards, then alternates one forward and one backward, then drains the remaining backwards.
- **Interleaved 1F1B** (``virtual_stages == v > 1``): each stage holds ``v`` chunks; the ``m*v``
  virtual micro-batches go through chunks in groups of ``p``; warm-up is ``(p - s - 1) * 2 +
  (v - 1) * p`` passes (all of them when ``m == p``), then one forward / one backward.

``global chunk`` ``g = chunk * p + stage`` is the chunk's position in the whole model: the forward
of ``g`` needs the forward of ``g - 1`` (on another stage) for the same micro-batch, and the
backward of ``g`` needs the backward of ``g + 1``. The order does not depend on how many layers
each chunk holds (Megatron-Core runs the same order with uneven chunks,
:func:`~echo_view.model.config.chunk_layers`); only the passes' durations do.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def _interleaved(stage: int, stages: int, microbatches: int, chunks: int) -> list[Pass]:
    p, v, m = stages, chunks, microbatches
    total = m * v
    warmup = total if m == p else min((p - stage - 1) * 2 + (v - 1) * p, total)

    def chunk_of(k: int, forward: bool) -> int:
        c = (k % (p * v)) // p
        return c if forward else v - 1 - c

    def micro_of(k: int) -> int:
        return (k // (p * v)) * p + k % p

    order = [Pass(True, chunk_of(k, True), micro_of(k)) for k in range(warmup)]
    remaining = total - warmup
    for i in range(remaining):
        k = warmup + i
        order.append(Pass(True, chunk_of(k, True), micro_of(k)))
        order.append(Pass(False, chunk_of(i, False), micro_of(i)))
    order.extend(Pass(False, chunk_of(k, False), micro_of(k)) for k in range(remaining, total))
    return order


def schedule(stage: int, stages: int, microbatches: int, chunks: int = 1) -> list[Pass]:
    """The passes stage ``stage`` runs in one step, in order."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} is outside 0..{stages - 1}")
    if chunks == 1:
        return _one_f_one_b(stage, stages, microbatches)
    if microbatches % stages:
        raise ValueError(
            f"the interleaved schedule needs micro-batches ({microbatches}) to be a multiple "
            f"of the pipeline stages ({stages})"
        )
    return _interleaved(stage, stages, microbatches, chunks)


def bubble_fraction(stages: int, microbatches: int, chunks: int = 1) -> float:
    """The ideal pipeline bubble, ``(p - 1) / (v * m)`` of the compute time (Narayanan et al.,
    SC'21), for equal forward and backward times per chunk (with uneven chunks, an estimate)."""
    return (stages - 1) / (chunks * microbatches)
