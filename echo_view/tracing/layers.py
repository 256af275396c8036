"""Megatron-style tensor-parallel layers whose communication is recorded, not performed.

Each layer holds only this rank's shard of the weights (on the ``meta`` device) and calls
:meth:`Recorder.collective` exactly where Megatron-LM launches a collective:

- column-parallel linear: identity forward / all-reduce of the input gradient backward (``f``);
  with sequence parallelism, all-gather forward / reduce-scatter backward instead, and the
  input all-gathered again in backward for the weight gradient (:data:`WGRAD_GATHER`);
- row-parallel linear: all-reduce forward / identity backward (``g``); with sequence
  parallelism, reduce-scatter forward / all-gather backward;
- vocab-parallel embedding and cross-entropy: all-reduces over the tensor-parallel group;
- context parallelism: K and V all-gathered over the context-parallel group before attention,
  their gradients reduce-scattered after it.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from echo_view.model.kinds import CollectiveKind
from echo_view.sim.tp_overlap import WGRAD_GATHER
from echo_view.tracing.fp8 import fp8_linear, record_cast
from echo_view.tracing.recorder import Recorder


class _Comm(torch.autograd.Function):
    """Records a collective in forward and/or backward; reshapes along dim 0 for AG/RS."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        rec: Recorder,
        fwd: CollectiveKind | None,
        bwd: CollectiveKind | None,
        tp: int,
        wire_bytes: int | None,
        axis: str,
    ) -> torch.Tensor:
        ctx.rec, ctx.bwd, ctx.tp, ctx.axis = rec, bwd, tp, axis
        return _apply(rec, fwd, x, tp, wire_bytes, axis)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        out = _apply(ctx.rec, ctx.bwd, grad, ctx.tp, axis=ctx.axis)
        return out, None, None, None, None, None, None


def _apply(
    rec: Recorder,
    kind: CollectiveKind | None,
    x: torch.Tensor,
    tp: int,
    wire_bytes: int | None = None,
    axis: str = "tp",
) -> torch.Tensor:
    if kind is None or tp == 1:
        return x
    size = x.numel() * (wire_bytes or x.element_size())
    if kind == CollectiveKind.ALL_REDUCE:
        rec.collective(kind, size, axis)
        # Megatron reduces in place (``_reduce``: ``torch.distributed.all_reduce(input_)``):
        # the new tensor autograd needs here is no kernel of the program.
        with rec.paused():
            return x.clone()
    # Megatron allocates a gathered or scattered output with ``torch.empty``
    # (``_gather_along_first_dim``, ``_reduce_scatter_along_first_dim``).
    if kind == CollectiveKind.ALL_GATHER:
        with rec.library():
            out = x.new_empty((x.shape[0] * tp, *x.shape[1:]))
        rec.collective(kind, size * tp, axis)
        return out
    if kind == CollectiveKind.REDUCE_SCATTER:
        with rec.library():
            out = x.new_empty((x.shape[0] // tp, *x.shape[1:]))
        rec.collective(kind, size, axis)
        return out
    raise ValueError(f"unsupported tensor-parallel collective {kind}")


def comm(
    x: torch.Tensor,
    rec: Recorder,
    fwd: CollectiveKind | None,
    bwd: CollectiveKind | None,
    tp: int,
    wire_bytes: int | None = None,
    axis: str = "tp",
) -> torch.Tensor:
    """Insert a recorded collective pair (forward kind, backward kind) over ``tp`` ranks of
    ``axis`` on ``x``; the forward one moves ``wire_bytes`` per element when given (an FP8
    copy of a bf16 tensor)."""
    out: torch.Tensor = _Comm.apply(x, rec, fwd, bwd, tp, wire_bytes, axis)  # type: ignore[no-untyped-call]
    return out


AR, AG, RS = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


def _regather_in_backward(
    y: torch.Tensor, rec: Recorder, local: torch.Tensor, tp: int, wire: int
) -> None:
    """Record :data:`WGRAD_GATHER` of ``local`` (``wire`` bytes per element) when the gradient
    of ``y`` reaches the linear that produced it, before its GEMMs run."""
    nbytes = int(local.numel()) * wire * tp

    def hook(grad: torch.Tensor) -> None:
        rec.collective(AG, nbytes, "tp", name=WGRAD_GATHER)

    if y.requires_grad:
        y.register_hook(hook)  # type: ignore[no-untyped-call]


class _ContextGather(torch.autograd.Function):
    """K and V of this rank's sequence chunk gathered from every context-parallel rank (one
    all-gather of both, forward) and their gradients reduce-scattered back (backward), along
    the sequence dimension of ``[b, heads, s, d]``: Transformer Engine's all-gather form of
    context parallelism (its ring form moves the same bytes in cp - 1 overlapped steps)."""

    @staticmethod
    def forward(
        ctx: Any, k: torch.Tensor, v: torch.Tensor, rec: Recorder, cp: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.rec, ctx.cp = rec, cp
        local = k.numel() * k.element_size() + v.numel() * v.element_size()
        rec.collective(AG, local * cp, "cp")
        return _along_seq(k, cp), _along_seq(v, cp)

    @staticmethod
    def backward(ctx: Any, gk: torch.Tensor, gv: torch.Tensor) -> tuple[Any, ...]:
        full = gk.numel() * gk.element_size() + gv.numel() * gv.element_size()
        ctx.rec.collective(RS, full, "cp")
        return _along_seq(gk, 1, ctx.cp), _along_seq(gv, 1, ctx.cp), None, None


def _along_seq(x: torch.Tensor, times: int, div: int = 1) -> torch.Tensor:
    b, n, s, d = x.shape
    return x.new_empty((b, n, s * times // div, d))


def context_gather(
    k: torch.Tensor, v: torch.Tensor, rec: Recorder, cp: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole sequence's K and V for this rank's queries (see :class:`_ContextGather`)."""
    if cp == 1:
        return k, v
    out: tuple[torch.Tensor, torch.Tensor] = _ContextGather.apply(  # type: ignore[no-untyped-call]
        k, v, rec, cp
    )
    return out


class _EngineLinear(torch.autograd.Function):
    """``x W^T + b`` as a Transformer Engine linear layer allocates it: the forward GEMM's
    output and the backward's data gradient, weight gradient (unless it accumulates into
    ``main_grad``) and bias gradient are buffers of its own (``at::empty``), filled under
    deterministic algorithms; the ops are ``F.linear``'s and its autograd's (``addmm`` or
    ``mm``; ``mm``, ``mm``, ``sum``)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, rec: Recorder
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.rec, ctx.bias = rec, bias is not None
        with rec.library(te=True):
            return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        rec: Recorder = ctx.rec
        g = grad.reshape(-1, grad.shape[-1])
        dx = None
        with rec.library(te=True):
            if ctx.needs_input_grad[0]:
                dx = g.mm(weight).view(*grad.shape[:-1], weight.shape[1])
        fused = rec.fills is not None and rec.fills.wgrad_fused
        with rec.library(te=True) if not fused else nullcontext():
            dw = g.t().mm(x.reshape(-1, x.shape[-1]))
        with rec.library(te=True):
            db = g.sum(0) if ctx.bias else None
        return dx, dw, db, None


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    rec: Recorder,
    fp8: str | None,
    autocast: torch.dtype | None = None,
    te: bool = False,
) -> torch.Tensor:
    """``x W^T + b``; with an FP8 recipe, as Transformer Engine's FP8 linear; under
    ``torch.autocast`` (``autocast``: its dtype) on operands cast as autocast casts them: each
    floating-point argument of ``linear`` not already in that dtype is copied to it
    (``_to_copy``, whose backward copies the gradient back), the product runs in it. ``te``:
    a Transformer Engine layer's (its outputs are its own buffers, :class:`_EngineLinear`)."""
    if fp8 is not None:
        return fp8_linear(x, weight, bias, rec, fp8)
    if autocast is not None:
        x, weight = x.to(autocast), weight.to(autocast)
        bias = bias.to(autocast) if bias is not None else None
    elif te and rec.filling(te=True):
        out: torch.Tensor = _EngineLinear.apply(x, weight, bias, rec)  # type: ignore[no-untyped-call]
        return out
    return F.linear(x, weight, bias)


class ColumnParallelLinear(nn.Module):
    """``y = x W^T + b`` with W split by output rows over ``tp`` ranks."""

    def __init__(
        self,
        rec: Recorder,
        d_in: int,
        d_out: int,
        tp: int,
        sp: bool,
        dtype: torch.dtype,
        bias: bool = True,
        fp8: str | None = None,
        autocast: torch.dtype | None = None,
        te: bool = True,
    ) -> None:
        super().__init__()
        self.rec, self.tp, self.sp, self.fp8, self.autocast = rec, tp, sp, fp8, autocast
        self.te = te  # a Transformer Engine layer when the model runs on it
        self.weight = nn.Parameter(torch.empty(d_out // tp, d_in, device="meta", dtype=dtype))
        self.bias = (
            nn.Parameter(torch.empty(d_out // tp, device="meta", dtype=dtype)) if bias else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sp and self.fp8 is not None and self.tp > 1:
            # Transformer Engine quantizes the local sequence shard and all-gathers FP8.
            record_cast(self.rec, int(x.numel()), self.fp8, "input")
            local = x
            x = comm(x, self.rec, AG, RS, self.tp, wire_bytes=1)
            y = fp8_linear(x, self.weight, self.bias, self.rec, self.fp8, cast_input=False)
            _regather_in_backward(y, self.rec, local, self.tp, 1)
            return y
        if not (self.sp and self.tp > 1):
            x = comm(x, self.rec, None, AR, self.tp)
            return linear(x, self.weight, self.bias, self.rec, self.fp8, self.autocast, self.te)
        local = x
        x = comm(x, self.rec, AG, RS, self.tp)
        y = linear(x, self.weight, self.bias, self.rec, self.fp8, self.autocast, self.te)
        _regather_in_backward(y, self.rec, local, self.tp, local.element_size())
        return y


class RowParallelLinear(nn.Module):
    """``y = x W^T + b`` with W split by input columns over ``tp`` ranks."""

    def __init__(
        self,
        rec: Recorder,
        d_in: int,
        d_out: int,
        tp: int,
        sp: bool,
        dtype: torch.dtype,
        fp8: str | None = None,
        autocast: torch.dtype | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.rec, self.tp, self.sp, self.fp8, self.autocast = rec, tp, sp, fp8, autocast
        self.weight = nn.Parameter(torch.empty(d_out, d_in // tp, device="meta", dtype=dtype))
        self.bias = nn.Parameter(torch.empty(d_out, device="meta", dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.autocast is not None and self.tp == 1:
            # A PyTorch-native program's ``nn.Linear``: with nothing to reduce, the bias is
            # added in the product (``addmm``), cast with the other operands.
            return linear(x, self.weight, self.bias, self.rec, None, self.autocast)
        y = self.reduced_product(x)
        return y if self.bias is None else y + self.bias

    def reduced_product(self, x: torch.Tensor) -> torch.Tensor:
        """``x W^T`` reduced over the ranks, the bias not added: Megatron's ``skip_bias_add``,
        for a caller that adds :attr:`bias` in a fused kernel of its own."""
        y = linear(x, self.weight, None, self.rec, self.fp8, self.autocast, te=True)
        if self.sp:
            return comm(y, self.rec, RS, AG, self.tp)
        return comm(y, self.rec, AR, None, self.tp)


class VocabParallelEmbedding(nn.Module):
    """Token embedding with the vocabulary split over ``tp`` ranks (+ learned positions)."""

    def __init__(
        self,
        rec: Recorder,
        vocab: int,
        hidden: int,
        seq: int,
        tp: int,
        sp: bool,
        dtype: torch.dtype,
        learned_positions: bool,
    ) -> None:
        super().__init__()
        self.rec, self.tp, self.sp = rec, tp, sp
        shard = -(-vocab // tp)
        self.weight = nn.Parameter(torch.empty(shard, hidden, device="meta", dtype=dtype))
        self.pos = (
            nn.Parameter(torch.empty(seq, hidden, device="meta", dtype=dtype))
            if learned_positions
            else None
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: [s, b]; out-of-shard ids are masked to zero before the reduction.
        emb = F.embedding(tokens, self.weight)
        if self.sp:
            emb = comm(emb, self.rec, RS, AG, self.tp)
        else:
            emb = comm(emb, self.rec, AR, None, self.tp)
        if self.pos is not None:
            pos = self.pos[: emb.shape[0] * (self.tp if self.sp else 1)]
            if self.sp:
                pos = pos[: emb.shape[0]]
            emb = emb + pos.unsqueeze(1)
        return emb


def _all_reduce(rec: Recorder, x: torch.Tensor, tp: int) -> None:
    """Record an in-place all-reduce of ``x`` over the tensor-parallel ranks (none at tp 1)."""
    if tp > 1:
        rec.collective(AR, x.numel() * x.element_size(), "tp")


class _CrossEntropy(torch.autograd.Function):
    """Megatron-LM's vocab-parallel cross entropy (``_VocabParallelCrossEntropy`` in
    ``megatron/core/tensor_parallel/cross_entropy.py``) as its kernels run: forward over this
    rank's fp32 logits ``[s, b, vocab / tp]`` in place (max, subtract, exponential, sum, then
    the division that turns them into the softmax it saves), backward written by hand: the
    target's entries less one, then one in-place multiply by the loss gradient. Returns the loss
    per token."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, rec: Recorder, tp: int
    ) -> torch.Tensor:
        logits = logits.float()
        lmax = torch.max(logits, dim=-1)[0]
        _all_reduce(rec, lmax, tp)
        logits -= lmax.unsqueeze(-1)
        # This rank's vocabulary slice starts at 0 in the trace: targets outside it are masked.
        vocab = logits.shape[-1]
        outside = (target < 0) | (target >= vocab)
        local = target.clone()
        local[outside] = 0
        rows = torch.arange(target.numel(), device=logits.device)
        flat_target = local.view(-1)
        pred = logits.view(-1, vocab)[rows, flat_target].clone().view_as(target)
        pred[outside] = 0.0
        torch.exp(logits, out=logits)
        sum_exp = logits.sum(dim=-1)
        _all_reduce(rec, pred, tp)
        _all_reduce(rec, sum_exp, tp)
        loss = torch.log(sum_exp) - pred
        softmax = logits.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, outside, flat_target)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        softmax, outside, flat_target = ctx.saved_tensors
        grad_2d = softmax.view(-1, softmax.shape[-1])
        rows = torch.arange(grad_2d.shape[0], device=grad_2d.device)
        grad_2d[rows, flat_target] -= 1.0 - outside.view(-1).float()
        softmax.mul_(grad.unsqueeze(-1))
        return softmax, None, None, None


class TorchCrossEntropy(nn.Module):
    """PyTorch's ``F.cross_entropy`` (mean over tokens) on the fp32 logits of the whole
    vocabulary: ``log_softmax`` then ``nll_loss``, and their backwards."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())


class VocabParallelCrossEntropy(nn.Module):
    """Loss over vocabulary-sharded logits (:class:`_CrossEntropy`): three small all-reduces
    over ``tp`` (max, target logit, sum of exponentials), the mean over tokens."""

    def __init__(self, rec: Recorder, tp: int) -> None:
        super().__init__()
        self.rec, self.tp = rec, tp

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        per_token: torch.Tensor = _CrossEntropy.apply(logits, target, self.rec, self.tp)  # type: ignore[no-untyped-call]
        return per_token.mean()
