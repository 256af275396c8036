"""Core attention as the GPU runs it: one fused flash kernel, or the unfused GEMM-softmax-GEMM.

The flash kernels are registered as torch custom ops so that the recorder sees exactly one
forward and one backward kernel (the meta device would otherwise decompose them).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from echo_view.tracing.fused import dropout as gpu_dropout
from echo_view.tracing.recorder import Recorder

_LIB = "echo_view"


@torch.library.custom_op(f"{_LIB}::flash_attn", mutates_args=())
def flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over ``[b, heads, s, d]`` tensors (k/v may have fewer heads: GQA)."""
    raise NotImplementedError("echo_view::flash_attn is traced on the meta device only")


@flash_attn.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op(f"{_LIB}::flash_attn_bwd", mutates_args=())
def flash_attn_bwd(
    grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of :func:`flash_attn`."""
    raise NotImplementedError("echo_view::flash_attn_bwd is traced on the meta device only")


@flash_attn_bwd.register_fake
def _(
    grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = ctx.saved_tensors
    dq, dk, dv = flash_attn_bwd(grad, q, k, v)
    return dq, dk, dv


flash_attn.register_autograd(_backward, setup_context=_setup)


def unfused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout: float,
    masking: str = "fused",
    rec: Recorder | None = None,
) -> torch.Tensor:
    """Megatron's core attention before fused kernels: QK^T, the scaled and causally masked
    softmax, dropout, and ``bmm`` with V. Tensors are ``[b, heads, s, d]``.

    ``masking`` (``model.masked_softmax``) is how the scores become probabilities: ``fused``,
    ``baddbmm`` scaling the product and one softmax kernel standing for Megatron's fused
    scale-mask-softmax; ``masked_fill``, Megatron's fallback (``masked_fill_`` in place, then
    ``torch.softmax``); ``multiply``, GPT-2's form as Megatron-LM of 2019 wrote it
    (``mpu/transformer.py``): ``matmul``, ``/ sqrt(d)``, ``* mask - 10000 * (1 - mask)``.
    ``rec``: where the buffers a library allocates are marked (:meth:`Recorder.library`)."""
    b, h, s, d = q.shape
    if k.shape[1] != h:  # grouped-query attention: repeat the kv heads
        rep = h // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if masking == "multiply":
        # Megatron-LM of 2019 permutes q, k and v to [b, heads, s, d] and multiplies them with
        # torch.matmul, which copies each contiguous as it uses it.
        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(b * h, s, d)
    else:
        # Megatron-Core's and Transformer Engine's layout: the QKV projection's output viewed
        # as [s, b * heads, d] and handed to the batched GEMMs transposed (cuBLAS takes the
        # strides): no copies.
        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.permute(2, 0, 1, 3).reshape(s, b * h, d).transpose(0, 1)

    qm = flat(q)
    kt = flat(k).transpose(1, 2)
    if masking == "multiply":
        # The 0/1 lower-triangular mask in the model's dtype is made once per batch (Megatron's
        # get_batch), outside the layer; its complement is scaled inside every layer.
        mask = q.new_empty(1, s, s)
        scores = torch.bmm(qm, kt) / math.sqrt(d)
        scores = scores * mask - 10000.0 * (1.0 - mask)
    else:
        # Transformer Engine's unfused attention takes the product's input buffer from
        # torch.empty; Megatron's own reuses one from its global memory buffer.
        with rec.library(te=True) if rec is not None else nullcontext():
            buffer = qm.new_empty(b * h, s, s)
        scores = torch.baddbmm(buffer, qm, kt, beta=0.0, alpha=1.0 / math.sqrt(d))
        if masking == "masked_fill":
            scores = scores.masked_fill_(q.new_empty(1, s, s, dtype=torch.bool), -10000.0)
    # The fused scale-mask-softmax kernel (Transformer Engine's, which Megatron's
    # FusedScaleMaskSoftmax calls) allocates its output with torch::empty.
    with rec.library() if masking == "fused" and rec is not None else nullcontext():
        probs = torch.softmax(scores, dim=-1)
    probs = gpu_dropout(probs, dropout)
    out = torch.bmm(probs, flat(v))
    return out.reshape(b, h, s, d)
