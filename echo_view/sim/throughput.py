"""What a predicted step time means: tokens per second per GPU and model FLOPs utilisation.

Model FLOPs utilisation (MFU) follows Chowdhery et al. 2022 (PaLM, arXiv 2204.02311, Appendix
B): the FLOPs the model needs per token, ``6 N + 12 L H Q T`` (forward and backward of every
weight matmul, plus the attention score and value matmuls over a sequence of ``T`` tokens, with
``L`` layers, ``H`` heads of dimension ``Q``), times the tokens trained per second, over the
GPUs' dense peak FLOP/s for the training dtype. It counts only what the model needs: recomputed
activations, optimizer and element-wise work are not model FLOPs, and the causal mask does not
halve the attention term (PaLM's convention).

``N`` here is the weights a token is multiplied by: per layer the query, key, value and output
projections and the MLP matrices (two, three with SwiGLU's gate), plus the output layer
(``hidden * vocab``). The input embedding is a lookup, not a matmul; biases and norms are
negligible and left out. In an MoE layer a token is multiplied by the router, its ``top_k``
routed experts and the shared experts only: the active parameters, not all experts
(:func:`~echo_view.sim.moe.moe_mlp_params`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from echo_view.model.config import ModelConfig, WorkloadConfig
from echo_view.sim.moe import moe_layers, moe_mlp_params


def matmul_params(model: ModelConfig, active: bool = True) -> int:
    """``N``: the weights each token is multiplied by (see the module docstring); with
    ``active`` false, every weight matrix (all experts of an MoE model)."""
    h = model.hidden
    head_dim = h // model.heads
    attention = 2 * h * h + 2 * h * model.kv_heads * head_dim  # Q and output; K and V (GQA)
    mlp = (model.up_projections + 1) * h * model.ffn_hidden  # (gate,) up, down
    moe = moe_layers(model)
    experts = moe * moe_mlp_params(model, active) if moe else 0
    return model.layers * attention + (model.layers - moe) * mlp + experts + h * model.vocab


def model_flops_per_token(model: ModelConfig) -> int:
    """PaLM's model FLOPs per token: ``6 N + 12 L H Q T``."""
    head_dim = model.hidden // model.heads
    attention = 12 * model.layers * model.heads * head_dim * model.seq_len
    return 6 * matmul_params(model) + attention


@dataclass(frozen=True, slots=True)
class Throughput:
    """Tokens and model FLOPs per second implied by one step of a workload config."""

    tokens_per_step: int
    #: ``None`` when the step takes no time (a what-if that scales every cost to 0).
    tokens_per_s_per_gpu: float | None
    model_flops_per_token: int
    peak_flops_per_gpu: float
    mfu: float | None

    def to_json(self) -> dict[str, float | int]:
        return asdict(self)


def throughput(cfg: WorkloadConfig, step_s: float, peak_flops_per_gpu: float) -> Throughput:
    """Throughput and MFU of ``cfg`` when one step takes ``step_s`` seconds on GPUs of the given
    dense peak FLOP/s (for the config's dtype)."""
    tokens = cfg.batch.global_batch * cfg.model.seq_len
    flops = model_flops_per_token(cfg.model)
    if step_s <= 0:
        return Throughput(tokens, None, flops, peak_flops_per_gpu, None)
    per_gpu = tokens / step_s / cfg.parallel.world_size
    return Throughput(
        tokens, per_gpu, flops, peak_flops_per_gpu, per_gpu * flops / peak_flops_per_gpu
    )
