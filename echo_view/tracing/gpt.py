"""A Megatron-style GPT, sharded for one rank of a TP x PP (x DP) layout, on the meta device.

Activations flow as ``[s, b, h]`` (Megatron's layout); with sequence parallelism the sequence
dimension is split over the tensor-parallel ranks between the parallel regions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from echo_view.model.config import WorkloadConfig, resolve_attention
from echo_view.tracing.attention import flash_attn, unfused_attention
from echo_view.tracing.fp8 import fp8_recipe
from echo_view.tracing.fused import RMSNorm, bias_dropout_add, dropout, mlp_activation, rope
from echo_view.tracing.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    TorchCrossEntropy,
    VocabParallelCrossEntropy,
    VocabParallelEmbedding,
    context_gather,
)
from echo_view.tracing.moe import MoELayer
from echo_view.tracing.recorder import Recorder

TORCH_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    # FP8 training keeps bf16 tensors; the linear layers' GEMMs are recorded as fp8
    # (echo_view/tracing/fp8.py).
    "fp8": torch.bfloat16,
}


def param_dtype(cfg: WorkloadConfig) -> torch.dtype:
    """The dtype the model's parameters are stored in: fp32 under ``torch.autocast``, else the
    training dtype (Megatron's 16-bit model parameters beside its fp32 main copies)."""
    return torch.float32 if cfg.autocast else TORCH_DTYPES[cfg.dtype]


def autocast_dtype(cfg: WorkloadConfig) -> torch.dtype | None:
    """The dtype ``torch.autocast`` casts the matrix products' operands to, or ``None``."""
    return TORCH_DTYPES[cfg.dtype] if cfg.autocast else None


def norm(cfg: WorkloadConfig, dtype: torch.dtype) -> nn.Module:
    """The model's normalization layer (``model.normalization``)."""
    if cfg.model.normalization == "rmsnorm":
        return RMSNorm(cfg.model.hidden, dtype)
    return nn.LayerNorm(cfg.model.hidden, device="meta", dtype=dtype)


def recompute(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> torch.Tensor:
    """``fn(*args)`` with its activations recomputed in backward, all of ``fn`` re-run as
    Megatron-LM's ``tensor_parallel.checkpoint`` (a reentrant autograd function) and PyTorch
    before 2.1 do: PyTorch's non-reentrant checkpoint since 2.1 stops the recomputation once
    the saved tensors backward needs are back, which would drop ops whose outputs nothing
    saves (a layer's last GEMM when no dropout follows it)."""
    with set_checkpoint_early_stop(False):
        out: torch.Tensor = checkpoint(fn, *args, use_reentrant=False)
    return out


class TransformerLayer(nn.Module):
    """Pre-norm transformer layer: attention block then MLP block, each residual. With
    ``swiglu`` the first MLP projection computes the gate and the up projection together
    (``2 * ffn_hidden`` outputs, Megatron's layout), so the MLP has three weight matrices.
    With ``moe`` an MoE layer (:mod:`echo_view.tracing.moe`) replaces the MLP."""

    def __init__(self, rec: Recorder, cfg: WorkloadConfig, moe: bool = False) -> None:
        super().__init__()
        m, p = cfg.model, cfg.parallel
        tp, sp = p.tp, p.sequence_parallel
        dtype = param_dtype(cfg)
        cast = autocast_dtype(cfg)
        self.heads = m.heads // tp
        self.kv_heads = max(m.kv_heads // tp, 1)
        self.head_dim = m.hidden // m.heads
        self.attention = resolve_attention(cfg)
        self.selective = p.recompute == "selective"
        fp8 = fp8_recipe(cfg)
        self.ln1 = norm(cfg, dtype)
        # With fewer KV heads than tp ranks each rank keeps one, replicated across the ranks that
        # share it (its weights as well).
        qkv_out = (m.heads + 2 * self.kv_heads * tp) * self.head_dim
        bias = m.add_bias_linear
        self.qkv = ColumnParallelLinear(
            rec, m.hidden, qkv_out, tp, sp, dtype, m.has_qkv_bias, fp8=fp8, autocast=cast
        )
        self.proj = RowParallelLinear(
            rec, m.heads * self.head_dim, m.hidden, tp, sp, dtype, fp8, cast, bias
        )
        self.ln2 = norm(cfg, dtype)
        self.gated = m.activation == "swiglu"
        fc1_out = m.up_projections * m.ffn_hidden
        self.moe = MoELayer(rec, cfg, dtype) if moe else None
        if self.moe is None:
            self.fc1 = ColumnParallelLinear(
                rec, m.hidden, fc1_out, tp, sp, dtype, bias, fp8=fp8, autocast=cast
            )
            self.fc2 = RowParallelLinear(
                rec, m.ffn_hidden, m.hidden, tp, sp, dtype, fp8, cast, bias
            )
        self.rope = m.position == "rope"
        # Fused attention applies its dropout inside the kernel (not modelled).
        self.dropout = m.attention_dropout if self.attention == "unfused" else 0.0
        self.masked_softmax = m.masked_softmax
        self.hidden_dropout = m.hidden_dropout
        # Megatron-LM's layers fuse each branch's bias, dropout and residual addition; a
        # PyTorch-native program adds them as it writes them.
        self.fused_bda = m.bias_dropout_fusion and not cfg.autocast
        self.rec, self.cp = rec, p.cp

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.attention == "flash":
            out: torch.Tensor = flash_attn(q, k, v)
            b, h, s, _ = q.shape
            with self.rec.library():
                # The fused kernel's other buffers (cuDNN's and FlashAttention's alike): the
                # softmax statistics (fp32 per query row) and the dropout RNG state.
                q.new_empty((b, h, s, 1), dtype=torch.float32)
                q.new_empty((2,), dtype=torch.int64)
            return out
        return unfused_attention(q, k, v, self.dropout, self.masked_softmax, self.rec)

    def _add_branch(
        self, residual: torch.Tensor, x: torch.Tensor, linear: RowParallelLinear | None = None
    ) -> torch.Tensor:
        """``residual`` plus the branch output ``x`` dropped out with the hidden dropout, ``x``
        being ``linear``'s input when given (its product and bias first): in one fused kernel
        (``bias_dropout_fusion``) or as separate ops."""
        if not self.fused_bda:
            return residual + dropout(x if linear is None else linear(x), self.hidden_dropout)
        if linear is None:
            return bias_dropout_add(x, None, residual, self.hidden_dropout)
        y = linear.reduced_product(x)
        return bias_dropout_add(y, linear.bias, residual, self.hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        qkv = self.qkv(self.ln1(x))  # [s, b, (h + 2 kv) * d / tp]
        s, b, _ = qkv.shape
        d, groups = self.head_dim, self.kv_heads
        if self.masked_softmax == "multiply":
            # Megatron-LM of 2019: the output in thirds, all queries, then all keys, then all
            # values (``split_tensor_along_last_dim``).
            q, k, v = qkv.split([self.heads * d, groups * d, groups * d], dim=-1)
        else:
            # Megatron-Core's: per query group its queries, then its key and its value
            # ([s, b, groups, (heads / groups + 2) * d]).
            per = self.heads // groups
            grouped = qkv.view(s, b, groups, (per + 2) * d)
            q, k, v = grouped.split([per * d, d, d], dim=-1)
        # [s, b, n*d] -> [b, n, s, d]
        q = q.reshape(s, b, self.heads, d).permute(1, 2, 0, 3)
        k = k.reshape(s, b, groups, d).permute(1, 2, 0, 3)
        v = v.reshape(s, b, groups, d).permute(1, 2, 0, 3)
        if self.rope:  # Transformer Engine's fused RoPE: one kernel for q, one for k
            q, k = rope(q), rope(k)
        # Context parallelism: this rank's queries attend over the whole sequence's keys (the
        # attention FLOPs follow from the longer K: 1/cp of the full causal attention).
        k, v = context_gather(k, v, self.rec, self.cp)
        ctx = recompute(self._core, q, k, v) if self.selective else self._core(q, k, v)
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, self.heads * d)
        x = self._add_branch(residual, ctx, self.proj)
        residual = x
        if self.moe is not None:
            return self._add_branch(residual, self.moe(self.ln2(x)))
        up = self.fc1(self.ln2(x))
        h = mlp_activation(up, self.gated)
        return self._add_branch(residual, h, self.fc2)


class GPTChunk(nn.Module):
    """One model chunk: consecutive layers, plus the embedding on the first chunk of the
    model and the final norm, output layer and loss on the last. In an MoE model the layers
    after the first ``dense`` are MoE layers."""

    def __init__(
        self,
        rec: Recorder,
        cfg: WorkloadConfig,
        layers: int,
        first: bool,
        last: bool,
        dense: int = 0,
    ) -> None:
        super().__init__()
        m, p = cfg.model, cfg.parallel
        dtype = param_dtype(cfg)
        self.full_recompute = p.recompute == "full"
        self.embedding = (
            VocabParallelEmbedding(
                rec,
                m.vocab,
                m.hidden,
                m.seq_len // p.cp,
                p.tp,
                p.sequence_parallel,
                dtype,
                learned_positions=m.position == "learned",
            )
            if first
            else None
        )
        moe = m.moe is not None
        self.layers = nn.ModuleList(
            TransformerLayer(rec, cfg, moe and i >= dense) for i in range(layers)
        )
        if last:
            self.final_ln = norm(cfg, dtype)
            self.output = ColumnParallelLinear(
                rec,
                m.hidden,
                m.vocab,
                p.tp,
                p.sequence_parallel,
                dtype,
                bias=False,
                autocast=autocast_dtype(cfg),
                te=False,  # Megatron's own ColumnParallelLinear in Megatron-Core's GPTModel
            )
            if m.tie_embeddings and self.embedding is not None:
                # One stage holds both ends: the output layer uses the word embedding itself
                # (one parameter, its gradient accumulated from both uses). With pp > 1 the
                # last stage keeps a copy, reduced with the first stage's after backward.
                self.output.weight = self.embedding.weight
            self.loss: nn.Module = (
                TorchCrossEntropy()
                if m.cross_entropy == "torch"
                else VocabParallelCrossEntropy(rec, p.tp)
            )
        self.last = last
        # Megatron-LM's embedding drops out its output with the hidden dropout probability
        # (``LanguageModelEmbedding.embedding_dropout``).
        self.embedding_dropout = m.hidden_dropout

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
            x = dropout(x, self.embedding_dropout)
        for layer in self.layers:
            x = recompute(layer, x) if self.full_recompute else layer(x)
        if self.last:
            assert target is not None  # internal: the role tracer always passes it
            logits = self.output(self.final_ln(x))
            loss: torch.Tensor = self.loss(logits, target)
            return loss
        return x
