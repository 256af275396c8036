"""A Mixtral-style decoder (RMSNorm, rotary positions, grouped-query attention, and in place of
the dense feed-forward a mixture of SwiGLU experts: a softmax router picks the top-k experts of
each token, with an optional shared expert every token passes through) trained for one step
with expert parallelism.

Layout: the ``world`` ranks are data parallel for attention, embedding and router, whose
gradients ``DistributedDataParallel`` all-reduces over all ranks. For the experts they fold into
``ep``-rank expert-parallel groups of consecutive ranks (``world / ep`` expert-data-parallel
replicas of each expert, strided by ``ep``: Megatron-Core's ``etp-ep-edp`` order with
``etp = 1``). Each rank holds ``experts / ep`` experts; a token copy routed to an expert on
another rank travels there with ``torch.distributed.all_to_all_single`` over the expert-parallel
group (dispatch) and back (combine); the backward pass runs the transposed all-to-alls. Expert
gradients are averaged over the expert-data-parallel group by hooks that all-reduce each one
as soon as autograd has accumulated it.

Routing is balanced by construction: every expert takes exactly ``capacity = tokens * top_k /
experts`` token copies (token dropping with capacity factor 1 and padding of under-filled
experts, as GShard and Switch Transformer route), so every all-to-all splits its rows evenly.
Shapes that depend on the routing decisions (all-to-all-v split sizes read on the host) would
run on GPUs but cannot be traced: a fake tensor holds no values.

Precision: fp32 parameters, gradients and Adam states, bf16 matrix products
(``torch.autocast``), tokens dispatched and combined in bf16. Plain PyTorch: runs under
``torchrun`` on GPUs as it is traced by ``echo-view trace`` on a CPU. Model sizes default to
Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", arXiv 2401.04088, Table 1: 32 layers,
dimension 4,096, FFN dimension 14,336, 32 heads, 8 key/value heads, 8 experts, top-2,
vocabulary 32,000).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def rope_tables(head_dim: int, seq_len: int, theta: float = 1e6) -> torch.Tensor:
    """cos/sin of the rotary angles, [seq, head_dim / 2, 2]."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs of x [batch, seq, heads, head_dim] by the rotary angles."""
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
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = apply_rope(self.wq(x).view(b, s, self.heads, self.head_dim), rope)
        k = apply_rope(self.wk(x).view(b, s, self.kv_heads, self.head_dim), rope)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class ExchangeTokens(torch.autograd.Function):
    """``all_to_all_single`` over the expert-parallel group with even splits; its gradient
    goes back the same way (the rows a rank received are the ones whose gradient it sends)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad.contiguous(), group=ctx.group)
        return out, None


class MoE(nn.Module):
    """Router, permutation into expert slots, dispatch, local experts, combine, unpermutation."""

    def __init__(
        self, dim: int, experts: int, top_k: int, ffn: int, shared_ffn: int, ep: int, group: Any
    ) -> None:
        super().__init__()
        self.experts, self.top_k, self.ep, self.group = experts, top_k, ep, group
        local = experts // ep
        self.router = nn.Linear(dim, experts, bias=False)
        # This rank's experts as stacked weights: one batched GEMM per projection.
        self.w13 = nn.Parameter(torch.empty(local, dim, 2 * ffn).normal_(std=0.02))
        self.w2 = nn.Parameter(torch.empty(local, ffn, dim).normal_(std=0.02))
        self.shared = None
        if shared_ffn:
            self.shared = nn.Sequential(
                nn.Linear(dim, 2 * shared_ffn, bias=False),
                SwiGLU(),
                nn.Linear(shared_ffn, dim, bias=False),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tokens = x.reshape(b * s, h)
        e, k = self.experts, self.top_k
        probs, chosen = self.router(tokens).float().softmax(-1).topk(k, dim=-1)
        capacity = tokens.shape[0] * k // e
        # Slot of each token copy in its expert: its rank among the copies routed there; the
        # copies past the capacity are dropped (weight 0, written to the last slot as 0).
        flat = chosen.reshape(-1)
        onehot = F.one_hot(flat, e)
        pos = (onehot.cumsum(0) * onehot).sum(-1) - 1
        fits = pos < capacity
        kept = fits.to(probs.dtype) * probs.reshape(-1)
        slot = flat * capacity + pos.clamp(max=capacity - 1)
        copies = tokens.to(torch.bfloat16).repeat_interleave(k, dim=0)
        keep = fits.to(copies.dtype).unsqueeze(-1)
        slots = copies.new_zeros(e * capacity, h).index_add(0, slot, copies * keep)
        # Dispatch: expert slots in expert order, experts / ep of them per destination rank.
        received = ExchangeTokens.apply(slots, self.group)
        local = self.w13.shape[0]
        # [source rank, local expert, capacity, h] -> each local expert's rows together.
        rows = received.view(self.ep, local, capacity, h).transpose(0, 1).reshape(local, -1, h)
        gate, up = torch.bmm(rows, self.w13).chunk(2, dim=-1)
        out = torch.bmm(F.silu(gate) * up, self.w2)
        out = out.view(local, self.ep, capacity, h).transpose(0, 1).reshape(-1, h)
        # Combine: each slot's output back to the rank of its token.
        back = ExchangeTokens.apply(out, self.group)
        y = (back.index_select(0, slot) * kept.unsqueeze(-1).to(back.dtype)).view(-1, k, h).sum(1)
        if self.shared is not None:
            y = y + self.shared(tokens)
        return y.view(b, s, h)


class SwiGLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, moe: MoE) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.moe = moe

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.moe(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(
        self, layers: int, dim: int, heads: int, kv_heads: int, vocab: int, seq: int, moe: Any
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, moe()) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.rope = rope_tables(dim // heads, seq)  # a constant: no buffer for DDP to sync

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rope)
        return self.output(self.norm(x))


def expert_groups(ep: int) -> tuple[Any, Any]:
    """This rank's expert-parallel group (``ep`` consecutive ranks) and expert-data-parallel
    group (the ranks holding the same experts, strided by ``ep``). Every rank creates every
    group, in the same order, as ``new_group`` requires."""
    world, rank = dist.get_world_size(), dist.get_rank()
    ep_group = edp_group = None
    for start in range(0, world, ep):
        g = dist.new_group(list(range(start, start + ep)))
        ep_group = g if start <= rank < start + ep else ep_group
    for first in range(ep):
        g = dist.new_group(list(range(first, world, ep)))
        edp_group = g if rank % ep == first else edp_group
    return ep_group, edp_group


def train_step(
    layers: int = 32,
    hidden: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    vocab: int = 32000,
    seq_len: int = 4096,
    micro: int = 1,
    experts: int = 8,
    top_k: int = 2,
    moe_ffn_hidden: int = 14336,
    shared_ffn_hidden: int = 0,
    first_dense_layers: int = 0,
    ep: int = 8,
    etp: int = 1,
) -> None:
    """Build the model on this rank and run one training step (forward, backward, Adam)."""
    world = dist.get_world_size()
    if etp != 1 or first_dense_layers or experts % ep or world % ep:
        raise ValueError(
            f"needs etp = 1, no dense layers, and ep = {ep} dividing the experts and the ranks"
        )
    if (micro * seq_len * top_k) % experts:
        raise ValueError("tokens * top_k must split evenly over the experts")
    device = torch.device("cuda", dist.get_rank() % 8) if torch.cuda.is_available() else None
    ep_group, edp_group = expert_groups(ep)
    with torch.device(device or "cpu"):

        def make_moe() -> MoE:
            return MoE(hidden, experts, top_k, moe_ffn_hidden, shared_ffn_hidden, ep, ep_group)

        model = Transformer(layers, hidden, heads, kv_heads, vocab, seq_len, make_moe)
    expert_params = [p for m in model.modules() if isinstance(m, MoE) for p in (m.w13, m.w2)]
    ignored = [n for n, p in model.named_parameters() if any(p is q for q in expert_params)]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
    ddp = DistributedDataParallel(model)
    edp = world // ep
    pending: list[Any] = []
    if edp > 1:

        def reduce_expert_grad(p: torch.Tensor) -> None:
            assert p.grad is not None
            p.grad.div_(edp)
            pending.append(dist.all_reduce(p.grad, group=edp_group, async_op=True))

        for p in expert_params:
            p.register_post_accumulate_grad_hook(reduce_expert_grad)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (micro, seq_len), device=device)
    labels = torch.randint(0, vocab, (micro, seq_len), device=device)
    with torch.autocast("cuda" if device is not None else "cpu", dtype=torch.bfloat16):
        logits = ddp(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    loss.backward()
    for work in pending:  # the optimizer steps the averaged expert gradients
        work.wait()
    optimizer.step()
    optimizer.zero_grad()
