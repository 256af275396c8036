"""Peak GPU memory of a workload config, per pipeline stage, and whether it fits the GPU.

What one GPU of stage ``s`` holds at its peak (the moment its pipeline schedule has the most
forward passes waiting for their backward):

- **weights, gradients, optimizer states** of its layers (sharded by tensor parallelism; the
  norms are replicated), in Megatron-LM's mixed-precision accounting (``docs/source/api-guide/
  dist_optimizer.md`` of NVIDIA/Megatron-LM): parameters in the training dtype (bf16 for fp8),
  the ``main_grad`` buffer in :func:`~echo_view.model.config.grad_reduce_bytes`, and for 16-bit
  training 12 bytes of optimizer state (fp32 master copy, Adam's two moments): 18 bytes per
  parameter for bf16 (fp32 gradients), 16 for fp16 (16-bit gradients) and for fp32. The guide's
  20 bytes for fp16 add an fp32 copy of the 16-bit gradients, which the optimizer step makes
  (``_copy_model_grads_to_main_grads``: ``main_param.grad = model_param.main_grad.float()``)
  and ``optimizer.zero_grad()`` frees before the next forward (``train_step`` in
  ``megatron/training/training.py``): it never coexists with the activations, so a stage's
  peak is its states plus the larger of its activations and transients, and that copy. The
  distributed optimizer shards the optimizer states (and that copy) over the data- and
  context-parallel ranks (``6 + 12/d`` for bf16); full sharding (ZeRO-3) shards all three,
  ``grad_op`` (ZeRO-2) gradients and optimizer states. With ``[parallel] fsdp`` the accounting
  is PyTorch FSDP's mixed precision instead (``torch.distributed.fsdp.MixedPrecision``: the
  sharded parameters stay in their fp32 dtype and the reduced gradients are cast to it; FSDP2's
  ``MixedPrecisionPolicy`` likewise): an fp32 shard of the parameters, of their gradients and
  Adam's two moments, ``16/d`` bytes per parameter, with no extra master copy; ``full_shard``
  gathers the 16-bit parameters per unit (transient, below), ``shard_grad_op`` keeps them
  gathered from the forward to the end of the backward (``2 + 16/d``). Under pipeline
  parallelism with ``fsdp_grad_sync = "last_microbatch"`` either strategy keeps the stage's
  parameters gathered all step and its gradients unsharded until the last backward, in the
  reduction dtype (``2 + 16/d`` plus 4 bytes per parameter with fp32 reduction).
- **activations** of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", arXiv 2205.05198, section 4): per layer and micro-batch ``sbh(34 +
  5as/h)`` bytes with 16-bit activations, 1-byte dropout masks and unfused attention, its terms
  divided by ``t`` where tensor or sequence parallelism shards them; selective recomputation
  drops the ``5as^2b`` core-attention term, full recomputation keeps only each layer's input
  (``2sbh``). The terms are kept apart here so that GQA, SwiGLU, fused (flash) attention (which
  stores its fp32 log-sum-exp instead of the ``s x s`` scores), fp32 activations and context
  parallelism (``s / cp`` tokens per rank) follow from the same derivation. A stage holds the
  activations of the forward passes its schedule runs before their backward (Megatron-LM's
  order, :mod:`echo_view.sim.schedule`): ``min(p - s, m)`` micro-batches for 1F1B, the paper's
  ``L (1 + (p - 1) / (p v))`` layers on the first stage of the interleaved schedule (with
  ``N`` contiguous micro-batches per chunk, ``(p - 1) * 2 + (v - 1) * N + 1`` chunk passes).
  Each model chunk's forwards hold that chunk's layers
  (:func:`~echo_view.model.config.chunk_layers`: chunks differ with uneven stages).
  The first stage keeps the embedding's dropout mask per micro-batch, the last the final norm's
  and output layer's inputs and the fp32 logits for the cross-entropy (``4sbh/t (1 + V/h)``).
- **transient** memory: the larger of the bf16 logits (last stage) and the activations being
  recomputed (one layer's for full recomputation, its core attention for selective), the
  pipeline's send/receive buffers, a 32 MiB cuBLAS workspace, and with full sharding the
  gathered parameters and gradients of two layers (current and prefetched; FSDP's rate
  limiter keeps at most two units gathered); with ``shard_grad_op`` the unsharded gradients of
  two layers (the one being computed and the one being reduce-scattered).
- **MoE layers** hold all ``experts / ep`` local experts (each split over ``etp``), whose
  optimizer states the distributed optimizer shards over the expert data-parallel ranks; their
  activations are the busiest expert-parallel rank's (:func:`layer_activation_bytes`).

The allocator margin: PyTorch's caching allocator reserves more than the tensors it hands out
(fragmentation, rounding to blocks); a stage fits when ``peak * (1 + ALLOCATOR_MARGIN) +
RESERVED_BYTES`` (CUDA context and NCCL communicator buffers, outside the allocator) is at most
the GPU's memory. Dropout follows ``[model] hidden_dropout`` and ``attention_dropout`` (on by
default, as in Megatron-LM and the paper): at probability 0 no mask is kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from echo_view.errors import ConfigError
from echo_view.model.config import (
    ModelConfig,
    WorkloadConfig,
    chunk_layers,
    grad_reduce_bytes,
    resolve_attention,
)
from echo_view.sim.moe import expert_tokens, local_tokens, routed_expert_params
from echo_view.sim.schedule import interleaved_warmup

MiB = 1 << 20
GiB = 1 << 30
#: Extra share of the peak the caching allocator reserves (fragmentation, block rounding).
ALLOCATOR_MARGIN = 0.05
#: CUDA context and NCCL communicator buffers: allocated outside PyTorch's allocator.
RESERVED_BYTES = 1 * GiB
#: cuBLAS workspace (``CUBLAS_WORKSPACE_CONFIG`` default on Hopper: 32 MiB).
WORKSPACE_BYTES = 32 * MiB
SHARDING = ("none", "optimizer", "grad_op", "full")
#: The memory sharding of each ``[parallel] fsdp`` strategy.
FSDP_SHARDING = {"full_shard": "full", "shard_grad_op": "grad_op"}


def sharding_of(cfg: WorkloadConfig) -> str:
    """What ``[parallel] fsdp`` shards (:data:`FSDP_SHARDING`); without FSDP ``optimizer``
    with Megatron's distributed optimizer, else ``none``."""
    p = cfg.parallel
    if p.fsdp in FSDP_SHARDING:
        return FSDP_SHARDING[p.fsdp]
    return "optimizer" if p.distributed_optimizer else "none"


def _mlp_params(model: ModelConfig, ffn: int, tp: int) -> int:
    """A tensor-parallel MLP of ``ffn`` hidden units on one rank (with its biases unless
    ``add_bias_linear`` is off)."""
    h, b = model.hidden, int(model.add_bias_linear)
    up = model.up_projections * ffn
    return up * (h + b) // tp + ffn * h // tp + b * h


def layer_params(model: ModelConfig, tp: int, mlp: bool = True) -> int:
    """Parameters of one transformer layer on one tensor-parallel rank (biases as the model
    has them: Megatron-LM's GPT has all, Llama-style models none; norms replicated); without
    its MLP when ``mlp`` is false."""
    h = model.hidden
    kv = model.kv_heads * (h // model.heads)
    qkv = (h + 2 * kv) * (h + int(model.has_qkv_bias)) // tp
    proj = h * h // tp + int(model.add_bias_linear) * h
    norms = 2 * (2 * h if model.normalization == "layernorm" else h)
    return qkv + proj + norms + (_mlp_params(model, model.ffn_hidden, tp) if mlp else 0)


def moe_layer_params(cfg: WorkloadConfig) -> tuple[int, int]:
    """``(all, experts)``: parameters of one MoE layer on one rank, and how many of them are
    its ``experts / ep`` routed experts (each split over ``etp``); the router is replicated,
    the shared experts split over ``tp`` like a dense MLP."""
    m, p = cfg.model, cfg.parallel
    moe = m.moe
    assert moe is not None
    experts = moe.experts // p.ep * routed_expert_params(m) // p.expert_tp
    shared = _mlp_params(m, moe.shared_ffn_hidden, p.tp) if moe.shared_ffn_hidden else 0
    return layer_params(m, p.tp, mlp=False) + moe.experts * m.hidden + shared + experts, experts


def stage_moe_layers(cfg: WorkloadConfig, stage: int) -> int:
    """MoE layers one GPU of pipeline ``stage`` holds (over its virtual stages)."""
    if cfg.model.moe is None:
        return 0
    dense = cfg.model.moe.first_dense_layers if stage == 0 else 0
    return sum(chunk_layers(cfg, stage)) - dense


def stage_expert_params(cfg: WorkloadConfig, stage: int) -> int:
    """Routed-expert parameters one GPU of ``stage`` holds (sharded over expert data parallel
    ranks by the distributed optimizer instead of the data-parallel ones)."""
    moe_layers = stage_moe_layers(cfg, stage)
    return moe_layers * moe_layer_params(cfg)[1] if moe_layers else 0


def stage_params(cfg: WorkloadConfig, stage: int) -> int:
    """Parameters one GPU of pipeline ``stage`` holds: its layers, plus the word (and learned
    position) embedding on the first stage, the final norm and output layer on the last (a copy
    of the tied word embedding when the pipeline has more than one stage)."""
    m, p = cfg.model, cfg.parallel
    moe_layers = stage_moe_layers(cfg, stage)
    dense_layers = sum(chunk_layers(cfg, stage)) - moe_layers
    n = layer_params(m, p.tp) * dense_layers
    if moe_layers:
        n += moe_layer_params(cfg)[0] * moe_layers
    word = m.vocab * m.hidden // p.tp
    if stage == 0:
        n += word + (m.seq_len * m.hidden if m.position == "learned" else 0)
    if stage == p.pp - 1:
        n += (2 if m.normalization == "layernorm" else 1) * m.hidden
        if not m.tie_embeddings or p.pp > 1:
            n += word
    return n


def _elem_bytes(cfg: WorkloadConfig) -> int:
    """Bytes per element of what the GEMMs read and write: activations and the compute copy
    of the parameters (16-bit; bf16 for fp8 training; 4 bytes for fp32)."""
    return 4 if cfg.dtype == "fp32" else 2


def layer_activation_bytes(
    cfg: WorkloadConfig, recompute: str | None = None, moe: bool = False
) -> int:
    """Bytes one transformer layer stores for its backward, per micro-batch, on one GPU.

    With 16-bit activations, unfused attention and no GQA or SwiGLU this is Korthikanti et al.'s
    Table 2: ``sbh(10 + 24/t + 5as/(ht))`` with tensor parallelism, ``sbh(34/t + 5as/(ht))``
    adding sequence parallelism, without the ``5as`` term under selective recomputation, and
    ``2sbh`` (``/t`` with sequence parallelism) under full recomputation.

    An MoE layer (``moe``) keeps, instead of the MLP's activations, the shared experts' (as a
    dense MLP of ``shared_ffn_hidden``), the router's scores, and on the busiest rank the
    grouped GEMMs' inputs and activation output for its received tokens
    (:func:`~echo_view.sim.moe.expert_tokens`) and the combined copies before the weighted sum.
    """
    m, p = cfg.model, cfg.parallel
    rec = p.recompute if recompute is None else recompute
    e, t = _elem_bytes(cfg), p.tp
    s, b, h, a = m.seq_len // p.cp, cfg.batch.micro, m.hidden, m.heads
    sbh = s * b * h
    shard = t if p.sequence_parallel else 1  # what sequence parallelism splits over t
    if rec == "full":
        return e * sbh // shard
    kv = s * b * m.kv_heads * (h // m.heads)
    gated = m.up_projections
    # Replicated without sequence parallelism: two norm inputs, the QKV and first MLP linear
    # inputs (e each), two dropout masks (1 byte each): 10 sbh for 16-bit.
    masks = 2 if m.hidden_dropout > 0 else 0
    replicated = (4 * e + masks) * sbh
    # Split over t: Q, K, V, the output projection's input, the MLP activation's input and
    # output: 24 sbh / t for 16-bit GPT.
    ffn = m.moe.shared_ffn_hidden if moe and m.moe is not None else m.ffn_hidden
    split = e * (sbh + 2 * kv + sbh) + e * (gated + 1) * s * b * ffn
    # Core attention: flash keeps its fp32 log-sum-exp per head and token; unfused attention
    # the softmax output, its dropout mask and the dropout output (s x s per head).
    flash = resolve_attention(cfg) == "flash"
    probs = e + (e + 1 if m.attention_dropout > 0 else 0)
    core = 4 * a * s * b if flash else probs * a * s * s * b
    if rec != "none":
        core = 0
    routed = _routed_activation_bytes(cfg, e) if moe else 0
    return replicated // shard + split // t + core // t + routed


def _routed_activation_bytes(cfg: WorkloadConfig, e: int) -> int:
    """What an MoE layer's routed part stores on the busiest rank (see
    :func:`layer_activation_bytes`): the router's scores (fp32), the received tokens (the
    first grouped GEMM's input), that GEMM's output and the activation's (the second GEMM's
    input), and the combined copies (weighted by the probabilities in the unpermutation)."""
    m, p = cfg.model, cfg.parallel
    moe = m.moe
    assert moe is not None
    tok = expert_tokens(cfg)
    rows = tok.per_expert * tok.local_experts  # after the etp all-gather
    f = moe.moe_ffn_hidden // p.expert_tp
    gated = m.up_projections
    router = 4 * local_tokens(cfg) * moe.experts
    tokens = e * m.hidden * (tok.routed + rows)
    return router + tokens + e * rows * (gated + 1) * f


def inflight(cfg: WorkloadConfig, stage: int) -> list[int]:
    """Forward passes per local chunk that ``stage`` holds at its peak: those its schedule
    (:func:`~echo_view.sim.schedule.schedule`) runs before the first backward."""
    p = cfg.parallel
    m, pp, v = cfg.micro_batches, p.pp, p.virtual_stages
    if v == 1:  # 1F1B: the warm-up forwards and the first steady one
        return [min(pp - stage, m)]
    g = p.microbatch_group
    held = [0] * v
    # The first `forwards` entries of group_table(m, v, g), counted group by group (the table
    # has m * v entries: 10 M for 1,250 chunks of 8,192 micro-batches, per stage and layout).
    left = min(interleaved_warmup(stage, pp, m, v, g) + 1, m * v)
    for first in range(0, m, g):
        if left <= 0:
            break
        size = m - first if first + g >= m else g  # the last group takes the rest
        taken = min(left, v * size)
        full, part = divmod(taken, size)
        for c in range(full):
            held[c] += size
        if part:
            held[full] += part
        left -= taken
    return held


@dataclass(frozen=True, slots=True)
class StageMemory:
    """One GPU of a pipeline stage at its peak, in bytes."""

    stage: int
    weights: int
    grads: int
    optimizer: int
    activations: int
    #: Micro-batches whose activations are held (summed over the stage's model chunks).
    inflight_microbatches: int
    transient: int
    #: The fp32 copy of 16-bit gradients the optimizer step makes (when activations are gone).
    grad_copy: int = 0

    @property
    def peak(self) -> int:
        states = self.weights + self.grads + self.optimizer
        return states + max(self.activations + self.transient, self.grad_copy)

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "peak_bytes": self.peak}


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Every stage's peak and the verdict against the GPU's memory."""

    stages: tuple[StageMemory, ...]
    gpu_bytes: int
    sharding: str

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: (s.peak, -s.stage))

    @property
    def needed_bytes(self) -> int:
        """The peak with the allocator margin and the memory outside the allocator."""
        return round(self.peak.peak * (1 + ALLOCATOR_MARGIN)) + RESERVED_BYTES

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.gpu_bytes

    def to_json(self) -> dict[str, object]:
        return {
            "peak_bytes": self.peak.peak,
            "peak_stage": self.peak.stage,
            "needed_bytes": self.needed_bytes,
            "gpu_bytes": self.gpu_bytes,
            "fits": self.fits,
            "oom": not self.fits,
            "allocator_margin": ALLOCATOR_MARGIN,
            "reserved_bytes": RESERVED_BYTES,
            "sharding": self.sharding,
            "stages": [s.to_json() for s in self.stages],
        }


def _state_bytes(cfg: WorkloadConfig) -> tuple[int, int, int, int]:
    """Bytes per parameter of weights, gradients and optimizer states (unsharded), in
    Megatron-LM's accounting: 16-bit weights, the main-gradient buffer, and the fp32 master
    copy and Adam's moments; then the fp32 copy of 16-bit gradients the optimizer step makes.
    Under ``torch.autocast`` the fp32 weights are the ones Adam updates (their 16-bit copies
    are transient)."""
    grad = grad_reduce_bytes(cfg)
    if cfg.dtype == "fp32" or cfg.autocast:
        return 4, grad, 8, 0
    return 2, grad, 12, 4 if grad == 2 else 0


def _fsdp_states(cfg: WorkloadConfig, n: int, d: int, shard_mode: str) -> tuple[int, int, int]:
    """PyTorch FSDP's weights, gradients and optimizer states of ``n`` parameters sharded
    ``d`` ways: fp32 shards of the parameters and gradients, Adam's fp32 moments; with
    ``grad_op`` also the gathered compute-dtype parameters, kept through the backward."""
    weights = -(-4 * n // d)
    if shard_mode == "grad_op":
        weights += _elem_bytes(cfg) * n
    return weights, -(-4 * n // d), -(-8 * n // d)


def stage_memory(cfg: WorkloadConfig, stage: int, sharding: str | None = None) -> StageMemory:
    """The peak of one GPU of pipeline ``stage``; ``sharding`` overrides :func:`sharding_of`."""
    shard_mode = sharding_of(cfg) if sharding is None else sharding
    if shard_mode not in SHARDING:
        raise ConfigError(f"sharding must be one of {', '.join(SHARDING)}, got {shard_mode!r}")
    m, p = cfg.model, cfg.parallel
    d = p.dp * p.cp  # Megatron shards optimizer states over data- and context-parallel ranks
    n = stage_params(cfg, stage)
    experts = stage_expert_params(cfg, stage)
    wb, gb, ob, cb = _state_bytes(cfg)
    fsdp = p.fsdp != "none" and shard_mode in ("full", "grad_op")
    copy = 0
    if fsdp:  # PyTorch FSDP's mixed precision: what it gathers is in the compute dtype
        wb = _elem_bytes(cfg)
        deferred = p.pp > 1 and p.fsdp_sync == "last_microbatch"
        weights, grads, optimizer = _fsdp_states(cfg, n, d, "grad_op" if deferred else shard_mode)
        if deferred:  # gradients accumulate unsharded until the last backward
            grads += grad_reduce_bytes(cfg) * n
    else:
        weights, grads, optimizer, copy = n * wb, n * gb, n * ob, n * cb
        if shard_mode != "none":  # expert states over the expert data-parallel ranks

            def sharded(per_param: int) -> int:
                return -(-(n - experts) * per_param // d) + -(-experts * per_param // p.expert_dp)

            # The step copies the gradients of the shard it updates.
            optimizer, copy = sharded(ob), sharded(cb)
        if shard_mode in ("full", "grad_op"):
            grads = -(-grads // d)
        if shard_mode == "full":
            weights = -(-weights // d)
    e, t = _elem_bytes(cfg), p.tp
    s, b, h = m.seq_len // p.cp, cfg.batch.micro, m.hidden
    shard = t if p.sequence_parallel else 1
    held = inflight(cfg, stage)
    per_layer = layer_activation_bytes(cfg)
    # Each chunk's forwards hold that chunk's layers.
    held_layers = sum(n * k for n, k in zip(chunk_layers(cfg, stage), held, strict=True))
    act = per_layer * held_layers
    if m.moe is not None and p.recompute != "full":
        # A chunk's MoE layers hold the MoE layer's activations instead (chunk 0 of stage 0
        # starts with the dense layers).
        dense = m.moe.first_dense_layers if stage == 0 else 0
        moe_held = held_layers - dense * held[0]
        act += (layer_activation_bytes(cfg, moe=True) - per_layer) * moe_held
    last = stage == p.pp - 1
    if stage == 0 and m.hidden_dropout > 0:
        act += s * b * h // shard * held[0]  # the embedding's dropout mask
    if last:
        # Final norm and output layer inputs, fp32 logits for the cross-entropy.
        act += (2 * e * s * b * h // shard + 4 * s * b * m.vocab // t) * held[-1]
    transient = WORKSPACE_BYTES
    working = 0
    if p.recompute != "none":
        working = layer_activation_bytes(cfg, "none") - layer_activation_bytes(cfg)
    if last:
        working = max(working, e * s * b * m.vocab // t)
    transient += working
    if p.pp > 1:
        transient += 2 * e * s * b * h // shard  # send and receive buffers
    if shard_mode == "full":
        transient += 2 * layer_params(m, t) * (wb + gb)
    elif shard_mode == "grad_op":
        transient += 2 * layer_params(m, t) * gb
    return StageMemory(stage, weights, grads, optimizer, act, sum(held), transient, copy)


def memory_report(cfg: WorkloadConfig, gpu_bytes: int, sharding: str | None = None) -> MemoryReport:
    """Every pipeline stage's peak memory, and whether it fits ``gpu_bytes``."""
    stages = tuple(stage_memory(cfg, s, sharding) for s in range(cfg.parallel.pp))
    return MemoryReport(stages, gpu_bytes, sharding_of(cfg) if sharding is None else sharding)
