"""The host path of a simulated rank: the CPU thread that issues its GPU work.

Every kernel costs the launching thread ``kernel_us`` of host time before it may start, so a
kernel starts at ``max(its stream is free, the host has issued it)``. The host runs ahead of
the GPU (it waits for nothing but its own issue time) until a synchronising point, where it
waits until every stream of its GPU has drained. A step is then bound by the slower of the GPU
path and the host path, as it is in a real run.

A run of ``k`` kernels with GPU times ``d_0..d_{k-1}`` issued from host time ``h`` on, kernel
``j`` issued at ``h + (j + 1) c``, ends no earlier than ``h + A`` with

    A = max_j ((j + 1) c + d_j + ... + d_{k-1})

and no earlier than its stream allows; the host is free again at ``h + k c``. That is exact
for a run that no other work interleaves with on its stream, which is what lets a coarse op
(a whole pass) carry its host path as two dependencies (:func:`issue_span_ns`).

The synchronising points of Megatron-LM (:mod:`echo_view.sim.compose`):

* ``batch_p2p_sync``: with batched pipeline transfers (``batch_p2p_comm``, Megatron's setting
  unless the interleaved schedule overlaps them, ``overlap_p2p_comm``) every pipeline
  send/receive is followed by ``torch.cuda.synchronize()``
  (``megatron/core/pipeline_parallel/p2p_communication.py``, ``_communicate``);
* the optimizer's gradient statistics: ``get_grad_norm_fp32`` (with ``clip_grad`` > 0) and
  ``count_zeros_fp32`` (``log_num_zeros_in_grad``) read their all-reduced result with
  ``.item()`` before the update (``megatron/core/optimizer/clip_grads.py``).

``kernel_us`` is measured on real CPU timelines (``bench/launch_intervals.py``,
``docs/accuracy.md``): the default is the median over the launching threads of the training
steps captured on H100 hosts (two Nsight Systems captures of a PyTorch training job, two ranks
each: 63.4-80.9 µs). It is a property of the host and its software more than of the GPU
(inference steps on H100 hosts take 31.5-33.7 µs per kernel; the older A100 and V100
training traces here 34-80 µs): ``--set host.kernel_us=...`` gives another host's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from echo_view.model.config import ParallelConfig
from echo_view.model.params import ParamSet, param
from echo_view.sim.schedule import Pass


@dataclass(frozen=True)
class HostParams(ParamSet):
    """Host-side costs of issuing GPU work (``--set host.NAME=VALUE``)."""

    NOUN: ClassVar[str] = "host parameter"

    kernel_us: float = param(
        73.7,
        help="host time per launched kernel on the launching thread (0: no host path); "
        "measured on the CPU timelines of training steps on H100 hosts",
        unit="µs",
        lo=0.0,
        hi=100_000.0,
    )
    fill_us: float = param(
        10.5,
        help="host time of a fill of a new buffer under deterministic algorithms (an ATen "
        "fill_ the allocation issues, no Python); measured on an H100 host's CPU timeline",
        unit="µs",
        lo=0.0,
        hi=100_000.0,
    )

    @property
    def kernel_ns(self) -> int:
        """``kernel_us`` in whole nanoseconds."""
        return round(self.kernel_us * 1000)

    @property
    def fill_ns(self) -> int:
        """``fill_us`` in whole nanoseconds."""
        return round(self.fill_us * 1000)

    def issue_ns(
        self, fills: npt.NDArray[np.bool_], waits: npt.NDArray[np.bool_] | None = None
    ) -> npt.NDArray[np.int64]:
        """The host time of issuing each of a run's kernels: ``kernel_us``, or ``fill_us``
        where ``fills`` marks a fill of a new buffer, or none where ``waits`` marks a row at
        which the host waits for the GPU (it issues nothing there)."""
        out = np.where(fills, self.fill_ns, self.kernel_ns).astype(np.int64)
        if waits is not None:
            out[waits] = 0
        return out


def issue_span_ns(dur_ns: npt.NDArray[np.int64], c_ns: int | npt.NDArray[np.int64]) -> int:
    """``A`` of the module docstring: how long after the host starts issuing the kernels
    ``dur_ns`` (in order, on one stream; ``c_ns`` of host time each, or per kernel) the last
    of them ends at the earliest."""
    k = len(dur_ns)
    if k == 0:
        return 0
    suffix = np.cumsum(np.asarray(dur_ns, dtype=np.int64)[::-1])[::-1]
    issued = np.cumsum(np.broadcast_to(np.asarray(c_ns, dtype=np.int64), (k,)))
    return int((issued + suffix).max())


def p2p_synced(p: ParallelConfig) -> bool:
    """Whether pipeline transfers end in a device sync: ``batch_p2p_sync`` with batched
    transfers, which Megatron-LM uses unless the interleaved schedule overlaps them
    (``batch_p2p_comm = not overlap_p2p_comm``, and ``overlap_p2p_comm`` is off outside it)."""
    return p.pp > 1 and p.batch_p2p_sync and not (p.virtual_stages > 1 and p.overlap_p2p_comm)


def crosses_stage(g: int, step: int, stage: int, p: ParallelConfig) -> bool:
    """Whether global chunk ``g``'s neighbour ``g + step`` (+1 downstream, -1 upstream) exists
    and lives on another pipeline stage than ``stage``: a pass of ``g`` then receives from it
    (forward: -1, backward: +1) or sends to it (forward: +1, backward: -1)."""
    other = g + step
    return 0 <= other < p.pp * p.virtual_stages and other % p.pp != stage


@dataclass
class PipeSyncs:
    """Where a stage's host waits for its GPU at pipeline transfers, walked pass by pass in
    schedule order: with :func:`p2p_synced` transfers, before a pass that receives from another
    stage or follows a pass that sent to one (:meth:`before`), and after the last pass when it
    sent (:attr:`at_end`)."""

    p: ParallelConfig
    stage: int
    on: bool = field(init=False)
    sends: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.on = p2p_synced(self.p)

    def before(self, ps: Pass) -> bool:
        """Whether the host syncs before pass ``ps`` (the next pass of the stage)."""
        g = ps.chunk * self.p.pp + self.stage
        gets = crosses_stage(g, -1 if ps.forward else 1, self.stage, self.p)
        sync = self.on and (gets or self.sends)
        self.sends = crosses_stage(g, 1 if ps.forward else -1, self.stage, self.p)
        return sync

    @property
    def at_end(self) -> bool:
        """Whether the host syncs after the last pass walked."""
        return self.on and self.sends


@dataclass
class IssueFold:
    """The host path of kernel runs issued back to back without a sync between them, folded
    run by run: after runs whose kernels took ``issued_ns`` of host time in all, the last
    ends no earlier than ``span_ns`` after the host started issuing the first
    (``issue_span_ns`` of them all)."""

    span_ns: int = 0
    issued_ns: int = 0

    def add(self, span_ns: int, gpu_ns: int, issued_ns: int) -> None:
        """Append a run with its own ``issue_span_ns``, GPU time and host issue time."""
        self.span_ns = max(self.span_ns + gpu_ns, self.issued_ns + span_ns)
        self.issued_ns += issued_ns


def pipe_syncs_before(
    p: ParallelConfig, stage: int, forward: npt.NDArray[np.bool_], chunk: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """:meth:`PipeSyncs.before` of each pass of a stage's schedule at once (the passes as
    :func:`~echo_view.sim.schedule.schedule_arrays` gives them)."""
    if not p2p_synced(p):
        return np.zeros(len(forward), dtype=bool)
    g = chunk * p.pp + stage
    up = np.where(forward, -1, 1)  # the neighbour a pass receives from

    def crosses(other: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        inside = (other >= 0) & (other < p.pp * p.virtual_stages)
        return np.asarray(inside & (other % p.pp != stage), dtype=bool)

    sends = crosses(g - up)
    after_send = np.concatenate([[False], sends[:-1]])
    return np.asarray(crosses(g + up) | after_send, dtype=bool)


def folded_spans_ns(
    span_ns: npt.NDArray[np.int64],
    gpu_ns: npt.NDArray[np.int64],
    issued_ns: npt.NDArray[np.int64],
    cut_before: npt.NDArray[np.bool_],
) -> int:
    """The host path of runs issued in order, each run cut from the one before it where
    ``cut_before`` (a sync) is set: the sum over the stretches between cuts of
    :class:`IssueFold`'s ``span_ns`` after adding the stretch's runs, computed at once.
    Unrolled, a fold of runs ``1..n`` spans ``max(sum of gpu, max_i(issued before i +
    span_i + gpu after i))``."""
    if len(span_ns) == 0:
        return 0
    cut = np.asarray(cut_before, dtype=bool).copy()
    cut[0] = True
    starts = np.flatnonzero(cut)
    seg = np.cumsum(cut) - 1
    issued_before = np.cumsum(issued_ns) - issued_ns
    issued_before -= issued_before[starts][seg]
    gpu_through = np.cumsum(gpu_ns)
    seg_gpu = np.add.reduceat(gpu_ns, starts)
    gpu_after = seg_gpu[seg] - (gpu_through - gpu_through[starts][seg] + gpu_ns[starts][seg])
    value = issued_before + span_ns + gpu_after
    return int(np.maximum(np.maximum.reduceat(value, starts), seg_gpu).sum())


__all__ = [
    "HostParams",
    "IssueFold",
    "PipeSyncs",
    "crosses_stage",
    "folded_spans_ns",
    "issue_span_ns",
    "p2p_synced",
    "pipe_syncs_before",
]
