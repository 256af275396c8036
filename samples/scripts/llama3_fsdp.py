"""A Llama-3-style decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU) trained
for one step with FSDP2 (``fully_shard`` per block, bf16 parameters in compute, fp32 gradient
reduction, as torchtitan does) and, with ``tp > 1``, tensor parallelism on a 2-D device mesh
(``parallelize_module``: column-parallel q/k/v and gate/up projections, row-parallel output
projections).

Plain PyTorch: runs under ``torchrun`` on GPUs as it is traced by ``echo-view trace`` on a CPU.
Model sizes: Llama 3 8B is the default (Grattafiori et al. 2024, "The Llama 3 Herd of Models",
Table 3: 32 layers, model dimension 4,096, FFN dimension 14,336, 32 attention heads, 8 key/value
heads, vocabulary 128,256; 70B: 80 layers, 8,192, 28,672, 64 heads, 8 key/value heads).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(head_dim: int, seq_len: int, theta: float = 500000.0) -> torch.Tensor:
    """cos/sin of the rotary angles, [seq, head_dim / 2, 2]."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x [batch, seq, heads, head_dim] by the rotary angles."""
    xr = x.float().unflatten(-1, (-1, 2))
    cos, sin = rope[..., 0].unsqueeze(1), rope[..., 1].unsqueeze(1)
    out = torch.stack(
        (xr[..., 0] * cos - xr[..., 1] * sin, xr[..., 0] * sin + xr[..., 1] * cos), dim=-1
    )
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: with tensor parallelism each rank holds heads / tp of them.
        q = apply_rope(self.wq(x).view(b, s, -1, self.head_dim), rope)
        k = apply_rope(self.wk(x).view(b, s, -1, self.head_dim), rope)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, ffn)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(
        self, layers: int, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int, seq: int
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("rope", rope_tables(dim // heads, seq), persistent=False)

    def forward(self, tokens: torch.Tensor, recompute: bool = False) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            if recompute:  # full activation checkpointing: each block runs again in backward
                h = checkpoint(layer, h, self.rope, use_reentrant=False)
            else:
                h = layer(h, self.rope)
        return self.output(self.norm(h))


def tensor_parallel(model: Llama, mesh: object) -> None:
    """Megatron-style tensor parallelism of each block over ``mesh`` (the "tp" dimension)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(),
    }
    for block in model.layers:
        parallelize_module(block, mesh, plan)  # type: ignore[arg-type]


def train_step(
    layers: int = 32,
    hidden: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    ffn_hidden: int = 14336,
    vocab: int = 128256,
    seq_len: int = 8192,
    micro: int = 1,
    tp: int = 1,
    recompute: str = "none",
) -> None:
    """Build the model on this rank and run one training step (forward, backward, AdamW);
    ``recompute = "full"`` checkpoints every block."""
    world = dist.get_world_size()
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device_type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    model = Llama(layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len)
    if tp > 1:
        tensor_parallel(model, mesh["tp"])
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=policy)
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    tokens = torch.randint(0, vocab, (micro, seq_len))
    labels = torch.randint(0, vocab, (micro, seq_len))
    logits = model(tokens, recompute=recompute == "full")
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
