"""A GPT (pre-norm LayerNorm, learned positions, GELU MLP of 4x width, output layer tied to the
word embedding: the GPT-2/GPT-3 family's shape, as Megatron-LM builds it) trained for one step
with ``DistributedDataParallel`` and automatic mixed precision: fp32 parameters, gradients
and Adam states, bf16 matrix products (``torch.autocast``), gradients all-reduced in fp32 in
DDP's buckets, as Megatron-LM reduces them for bf16 by default, and kept there
(``gradient_as_bucket_view``, as Megatron keeps them in the buffer it reduces), clipped to norm
1.0 (Megatron-LM's ``--clip-grad`` default) before the step.

Plain PyTorch: runs under ``torchrun`` on GPUs as it is traced by ``echo-view trace`` on a CPU.
The function takes the shape keys of an echo-view workload config, so a config with
``[model] script = "gpt_ddp.py"`` and the same keys describes the same model as the built-in GPT.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        ctx = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + F.dropout(self.proj(ctx.transpose(1, 2).reshape(b, s, h)), p=0.1)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), p=0.1)


class GPT(nn.Module):
    def __init__(
        self, layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = F.dropout(self.wte(tokens) + self.wpe(pos), p=0.1)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # output layer tied to the embedding


def train_step(
    layers: int = 24,
    hidden: int = 2048,
    heads: int = 16,
    ffn_hidden: int = 8192,
    vocab: int = 51200,
    seq_len: int = 2048,
    micro: int = 1,
    bucket_view: bool = True,
) -> None:
    """Build the model on this rank and run one training step (forward, backward, gradient
    clipping, Adam); ``bucket_view`` is DDP's ``gradient_as_bucket_view``."""
    device = torch.device("cuda", dist.get_rank() % 8) if torch.cuda.is_available() else None
    # Built on its device rather than moved there with .to(), which fake tensors cannot follow.
    with torch.device(device or "cpu"):
        # Gradients as views of DDP's buckets (not copied back out of them after the
        # all-reduce), as Megatron-LM's live in the buffer it reduces.
        model = DistributedDataParallel(
            GPT(layers, hidden, heads, ffn_hidden, vocab, seq_len),
            gradient_as_bucket_view=bucket_view,
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (micro, seq_len), device=device)
    labels = torch.randint(0, vocab, (micro, seq_len), device=device)
    with torch.autocast("cuda" if device is not None else "cpu", dtype=torch.bfloat16):
        logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # Megatron-LM's --clip-grad default
    optimizer.step()
    optimizer.zero_grad()
