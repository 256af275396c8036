"""Fused kernels of Llama-style layers as Megatron-LM with Transformer Engine runs them:
RMSNorm (one kernel forward, one backward), rotary position embedding (one kernel per tensor
and direction) and SwiGLU (Megatron's fused ``bias_swiglu``: one kernel each way);
Megatron-LM's fused bias-dropout-add (:func:`bias_dropout_add`); and dropout as PyTorch runs
it on a GPU (:func:`dropout`).

Registered as torch custom ops so that the recorder sees one op per kernel; on the meta
device ``torch.nn.RMSNorm`` would otherwise decompose into a dozen elementwise ops.
"""

from __future__ import annotations

from typing import Any

import torch

_LIB = "echo_view"


@torch.library.custom_op(f"{_LIB}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x / rms(x) * weight`` over the last dimension."""
    raise NotImplementedError("echo_view::rms_norm is traced on the meta device only")


@rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op(f"{_LIB}::rms_norm_bwd", mutates_args=())
def rms_norm_bwd(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward of :func:`rms_norm`: gradients of the input and of the weight."""
    raise NotImplementedError("echo_view::rms_norm_bwd is traced on the meta device only")


@rms_norm_bwd.register_fake
def _(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _rms_setup(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _rms_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, weight = ctx.saved_tensors
    dx, dw = rms_norm_bwd(grad, x, weight)
    return dx, dw


rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


class RMSNorm(torch.nn.Module):
    """RMSNorm with a learned scale (no bias), as one fused kernel each way."""

    def __init__(self, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(hidden, device="meta", dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = rms_norm(x, self.weight)
        return out


@torch.library.custom_op(f"{_LIB}::rope", mutates_args=())
def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``[b, heads, s, d]``) by its positions' angles (rotary embedding)."""
    raise NotImplementedError("echo_view::rope is traced on the meta device only")


@rope.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op(f"{_LIB}::rope_bwd", mutates_args=())
def rope_bwd(grad: torch.Tensor) -> torch.Tensor:
    """Backward of :func:`rope` (the inverse rotation of the gradient)."""
    raise NotImplementedError("echo_view::rope_bwd is traced on the meta device only")


@rope_bwd.register_fake
def _(grad: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad)


def _rope_setup(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
    pass


def _rope_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = rope_bwd(grad)
    return out


rope.register_autograd(_rope_backward, setup_context=_rope_setup)


@torch.library.custom_op(f"{_LIB}::swiglu", mutates_args=())
def swiglu(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``x`` is ``[..., 2f]`` holding the gate and up projections."""
    raise NotImplementedError("echo_view::swiglu is traced on the meta device only")


@swiglu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op(f"{_LIB}::swiglu_bwd", mutates_args=())
def swiglu_bwd(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Backward of :func:`swiglu`: the gradient of both halves of ``x``."""
    raise NotImplementedError("echo_view::swiglu_bwd is traced on the meta device only")


@swiglu_bwd.register_fake
def _(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _swiglu_setup(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    out: torch.Tensor = swiglu_bwd(grad, x)
    return out


swiglu.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)


def mlp_activation(x: torch.Tensor, gated: bool) -> torch.Tensor:
    """An MLP's activation on its first projection's output: SwiGLU over the fused gate and up
    halves when ``gated``, else GELU."""
    if gated:
        out: torch.Tensor = swiglu(x)
        return out
    return torch.nn.functional.gelu(x)


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout in training as PyTorch runs it on a GPU: one kernel, ``native_dropout``, that
    writes the output and a one-byte mask (``native_dropout_backward`` in backward). On the
    meta and CPU devices ``F.dropout`` takes another path (``at::dropout`` fuses only for CUDA
    tensors, ``is_fused_kernel_acceptable``): ``bernoulli_``, ``div_`` and ``mul``, a mask in
    the input's dtype. None at probability 0."""
    if p <= 0:
        return x
    out: torch.Tensor = torch.native_dropout(x, p, True)[0]
    return out


@torch.library.custom_op(f"{_LIB}::bias_dropout_add", mutates_args=())
def _bias_dropout_add(
    x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual + dropout(x + bias, p)`` and the dropout's one-byte keep mask (empty at
    ``p == 0``)."""
    raise NotImplementedError("echo_view::bias_dropout_add is traced on the meta device only")


@_bias_dropout_add.register_fake
def _(
    x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    mask = x.new_empty(x.shape if p > 0 else (0,), dtype=torch.bool)
    return torch.empty_like(x), mask


def _bda_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, bias, _, p = inputs
    ctx.save_for_backward(output[1])
    ctx.mark_non_differentiable(output[1])
    # No zero-filled gradient for the mask: a GPU would run no kernel for it.
    ctx.set_materialize_grads(False)
    ctx.p, ctx.has_bias, ctx.dims = p, bias is not None, tuple(range(x.dim() - 1))


def _bda_backward(
    ctx: Any, grad: torch.Tensor | None, _grad_mask: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None]:
    # The residual's gradient is the output's (no kernel); the branch's goes back through the
    # dropout's mask (one kernel, as the fused function's backward), and the bias sums it
    # over the tokens, as autograd does for a broadcast addition.
    (mask,) = ctx.saved_tensors
    if grad is None:  # the output was not used
        return None, None, None, None
    dx = grad
    if ctx.p > 0:
        dx = torch.ops.aten.native_dropout_backward(grad, mask, 1.0 / (1.0 - ctx.p))
    dbias = dx.sum(dim=ctx.dims) if ctx.has_bias else None
    return dx, dbias, grad, None


_bias_dropout_add.register_autograd(_bda_backward, setup_context=_bda_setup)


def bias_dropout_add(
    x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float
) -> torch.Tensor:
    """``residual + dropout(x + bias, p)`` as Megatron-LM's fused bias-dropout-add runs it in
    training (``bias_dropout_add_fused_train``, compiled by ``torch.jit.script`` or
    ``torch.compile``): one kernel forward, which writes the output and the dropout's mask;
    backward one kernel through the mask (none at ``p == 0``) and the bias gradient's sum. With
    neither a bias nor dropout it is the residual addition alone."""
    if bias is None and p <= 0:
        return residual + x
    out: torch.Tensor = _bias_dropout_add(x, bias, residual, p)[0]
    return out
