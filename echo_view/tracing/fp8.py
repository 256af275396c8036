"""FP8 linear layers as Transformer Engine runs them (``dtype = "fp8"``).

Only the GEMMs of the transformer layers' linear layers run in FP8: forward (input x weight),
dgrad (output gradient x weight) and wgrad (output gradient x input), recorded with dtype
``fp8`` so the cost model applies the GPU's FP8 peak. Everything else stays in bf16 as in
Transformer Engine and Megatron-LM: the core attention and its softmax, the norms, the
embedding, the output layer and loss, the activations between kernels, the main gradients
(fp32 accumulation) and the optimizer.

Before each FP8 GEMM its bf16 inputs are quantized. Per tensor of ``n`` elements:

- ``delayed`` (TE's ``DelayedScaling``, the scale from the amax history of earlier steps): one
  fused cast-transpose kernel that reads ``2n`` bytes and writes the FP8 tensor and its
  transpose (``2n``), recording the amax on the side; one scale-update kernel per pass.
- ``tensorwise`` (current scaling): the amax of the tensor itself is needed first, so an amax
  kernel (``2n`` read) runs before the same cast-transpose.
- ``blockwise`` (one scale per 1x128 tile, DeepSeek-V3 style): one cast-transpose kernel that
  also writes an fp32 scale per 128 elements for both copies (``2 * 4n/128`` bytes more).

The grouped GEMMs of an MoE layer's local experts (Transformer Engine's ``GroupedLinear``)
run the same three GEMMs in FP8 with the same casts (:func:`fp8_bmm`), the shared experts as
FP8 linear layers.

Activations and output gradients are quantized in every pass; weights once per step (TE
caches the FP8 weight across the micro-batches of a step), which the optimizer phase records.
With sequence parallelism the input of a column-parallel layer is quantized on the local
sequence shard and all-gathered in FP8 (one byte per element), as Transformer Engine does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import OpClass
from echo_view.tracing.recorder import Recorder

#: Elements per blockwise scale (1x128 tiles).
BLOCK = 128


def fp8_recipe(cfg: WorkloadConfig) -> str | None:
    """The FP8 recipe the transformer layers' linear layers use, or None without FP8."""
    return cfg.fp8_recipe if cfg.dtype == "fp8" else None


def cast_bytes(numel: int, recipe: str) -> int:
    """Bytes the cast-transpose kernel of one bf16 tensor moves: read bf16, write FP8 and its
    transpose (plus the per-block scales of ``blockwise``)."""
    extra = 2 * 4 * -(-numel // BLOCK) if recipe == "blockwise" else 0
    return 2 * numel + 2 * numel + extra


def record_cast(rec: Recorder, numel: int, recipe: str, what: str) -> None:
    """The kernels that quantize one bf16 tensor of ``numel`` elements to FP8."""
    if recipe == "tensorwise":
        rec.op(f"te::amax ({what})", OpClass.REDUCTION, flops=numel, nbytes=2 * numel, dtype="bf16")
    rec.op(
        f"te::cast_transpose ({what})",
        OpClass.ELEMENTWISE,
        flops=float(numel),
        nbytes=cast_bytes(numel, recipe),
        dtype="fp8",
    )


def record_scale_update(rec: Recorder, recipe: str, gemms: int, forward: bool) -> None:
    """Delayed scaling's one fused amax-history and scale update per pass (three FP8 tensors
    per GEMM forward, two backward; fp32 amax and scale each)."""
    if recipe != "delayed" or gemms == 0:
        return
    tensors = gemms * (3 if forward else 2)
    rec.op(
        "te::amax_and_scale_update",
        OpClass.ELEMENTWISE,
        flops=float(tensors),
        nbytes=4 * 4 * tensors,
        dtype="fp32",
    )


class _Fp8Linear(torch.autograd.Function):
    """``y = x W^T + b`` with the three GEMMs in FP8 and their input casts recorded."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        rec: Recorder,
        recipe: str,
        cast_input: bool,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.rec, ctx.recipe, ctx.has_bias = rec, recipe, bias is not None
        if cast_input:
            record_cast(rec, int(x.numel()), recipe, "input")
        with rec.gemm_dtype("fp8"):
            return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        rec: Recorder = ctx.rec
        # TE fuses the bias gradient into the cast of the output gradient.
        record_cast(rec, int(grad.numel()), ctx.recipe, "grad output")
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        with rec.gemm_dtype("fp8"):
            dx = torch.mm(g2, weight).reshape(*grad.shape[:-1], weight.shape[1])
            dw = torch.mm(g2.t(), x2)
        db = grad.new_empty(grad.shape[-1]) if ctx.has_bias else None
        return dx, dw, db, None, None, None


def fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    rec: Recorder,
    recipe: str,
    *,
    cast_input: bool = True,
) -> torch.Tensor:
    """:class:`_Fp8Linear` applied (autograd-aware); ``cast_input`` False when the input
    arrives already quantized (gathered in FP8 by a sequence-parallel all-gather)."""
    out: torch.Tensor = _Fp8Linear.apply(  # type: ignore[no-untyped-call]
        x, weight, bias, rec, recipe, cast_input
    )
    return out


class _Fp8Bmm(torch.autograd.Function):
    """``y = bmm(x, w)`` (one GEMM per local expert) with forward, dgrad and wgrad in FP8 and
    their input casts recorded, as :class:`_Fp8Linear`."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        rec: Recorder,
        recipe: str,
        cast_input: bool,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.rec, ctx.recipe = rec, recipe
        if cast_input:
            record_cast(rec, int(x.numel()), recipe, "input")
        with rec.gemm_dtype("fp8"):
            return torch.bmm(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        rec: Recorder = ctx.rec
        record_cast(rec, int(grad.numel()), ctx.recipe, "grad output")
        with rec.gemm_dtype("fp8"):
            dx = torch.bmm(grad, weight.transpose(1, 2))
            dw = torch.bmm(x.transpose(1, 2), grad)
        return dx, dw, None, None, None


def fp8_bmm(
    x: torch.Tensor, weight: torch.Tensor, rec: Recorder, recipe: str, *, cast_input: bool = True
) -> torch.Tensor:
    """:class:`_Fp8Bmm` applied; ``cast_input`` False when the tokens arrive already in FP8
    (DeepEP's FP8 dispatch)."""
    out: torch.Tensor = _Fp8Bmm.apply(x, weight, rec, recipe, cast_input)  # type: ignore[no-untyped-call]
    return out
