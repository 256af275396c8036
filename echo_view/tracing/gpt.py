"""A Megatron-style GPT, sharded for one rank of a TP x PP (x DP) layout, on the meta device.

Activations flow as ``[s, b, h]`` (Megatron's layout); with sequence parallelism the sequence
dimension is split over the tensor-parallel ranks between the parallel regions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from echo_view.model.config import WorkloadConfig, resolve_attention
from echo_view.tracing.attention import flash_attn, unfused_attention
from echo_view.tracing.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelCrossEntropy,
    VocabParallelEmbedding,
    context_gather,
)
from echo_view.tracing.recorder import Recorder

TORCH_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    # fp8 GEMMs run with bf16 activations around them; the cost model applies the fp8 rate.
    "fp8": torch.bfloat16,
}


class TransformerLayer(nn.Module):
    """Pre-LayerNorm transformer layer: attention block then MLP block, each residual."""

    def __init__(self, rec: Recorder, cfg: WorkloadConfig) -> None:
        super().__init__()
        m, p = cfg.model, cfg.parallel
        tp, sp = p.tp, p.sequence_parallel
        dtype = TORCH_DTYPES[cfg.dtype]
        self.heads = m.heads // tp
        self.kv_heads = max(m.kv_heads // tp, 1)
        self.head_dim = m.hidden // m.heads
        self.attention = resolve_attention(cfg)
        self.selective = p.recompute == "selective"
        self.ln1 = nn.LayerNorm(m.hidden, device="meta", dtype=dtype)
        qkv_out = (m.heads + 2 * m.kv_heads) * self.head_dim
        self.qkv = ColumnParallelLinear(rec, m.hidden, qkv_out, tp, sp, dtype)
        self.proj = RowParallelLinear(rec, m.heads * self.head_dim, m.hidden, tp, sp, dtype)
        self.ln2 = nn.LayerNorm(m.hidden, device="meta", dtype=dtype)
        self.fc1 = ColumnParallelLinear(rec, m.hidden, m.ffn_hidden, tp, sp, dtype)
        self.fc2 = RowParallelLinear(rec, m.ffn_hidden, m.hidden, tp, sp, dtype)
        self.dropout = 0.1 if self.attention == "unfused" else 0.0
        self.rec, self.cp = rec, p.cp

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.attention == "flash":
            out: torch.Tensor = flash_attn(q, k, v)
            return out
        return unfused_attention(q, k, v, self.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        qkv = self.qkv(self.ln1(x))  # [s, b, (h + 2 kv) * d / tp]
        s, b, _ = qkv.shape
        d = self.head_dim
        q, k, v = qkv.split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        # [s, b, n*d] -> [b, n, s, d]
        q = q.reshape(s, b, self.heads, d).permute(1, 2, 0, 3)
        k = k.reshape(s, b, self.kv_heads, d).permute(1, 2, 0, 3)
        v = v.reshape(s, b, self.kv_heads, d).permute(1, 2, 0, 3)
        # Context parallelism: this rank's queries attend over the whole sequence's keys (the
        # attention FLOPs follow from the longer K: 1/cp of the full causal attention).
        k, v = context_gather(k, v, self.rec, self.cp)
        if self.selective:
            ctx = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            ctx = self._core(q, k, v)
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, self.heads * d)
        x = residual + F.dropout(self.proj(ctx), p=0.1, training=True)
        residual = x
        h = F.gelu(self.fc1(self.ln2(x)))
        return residual + F.dropout(self.fc2(h), p=0.1, training=True)


class GPTChunk(nn.Module):
    """One model chunk: consecutive layers, plus the embedding on the first chunk of the
    model and the final norm, output layer and loss on the last."""

    def __init__(
        self, rec: Recorder, cfg: WorkloadConfig, layers: int, first: bool, last: bool
    ) -> None:
        super().__init__()
        m, p = cfg.model, cfg.parallel
        dtype = TORCH_DTYPES[cfg.dtype]
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
                learned_positions=m.kv_heads == m.heads,
            )
            if first
            else None
        )
        self.layers = nn.ModuleList(TransformerLayer(rec, cfg) for _ in range(layers))
        if last:
            self.final_ln = nn.LayerNorm(m.hidden, device="meta", dtype=dtype)
            self.output = ColumnParallelLinear(
                rec, m.hidden, m.vocab, p.tp, p.sequence_parallel, dtype, bias=False
            )
            self.loss = VocabParallelCrossEntropy(rec, p.tp)
        self.last = last

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.full_recompute else layer(x)
        if self.last:
            assert target is not None  # internal: the role tracer always passes it
            logits = self.output(self.final_ln(x))
            loss: torch.Tensor = self.loss(logits, target)
            return loss
        return x
