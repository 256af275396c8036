"""The workload configuration: a GPT-style model, its 3D-parallel layout, batch, cluster and
precision, as users write it in TOML.

The typed config, its bounds and the quantities derived from it; parsing and the consistency
rules are :mod:`echo_view.model.config_parse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from echo_view.model.job import MAX_RANKS
from echo_view.model.moe_config import SIMULATION_ONLY_KEYS, MoEConfig

#: Upper bounds of config magnitudes: far beyond any real job (the largest today: ~10^5 GPUs,
#: ~10^2 layers, hidden ~10^4, vocab ~10^5, 10^3-10^4 micro-batches), so that a typo or a
#: hostile value is refused with the limit instead of running for hours.
LIMITS: dict[str, int] = {
    "gpus": MAX_RANKS,
    "gpus_per_node": 1_024,
    "layers": 10_000,
    "hidden": 1 << 20,
    "ffn_hidden": 1 << 22,
    "heads": 1 << 16,
    "kv_heads": 1 << 16,
    "seq_len": 1 << 27,
    "vocab": 1 << 24,
    "global": 1 << 24,
    "micro": 1 << 16,
    "micro_batches": 1 << 14,
    # Parameters per data-parallel bucket: beyond any model's parameter count.
    "ddp_bucket_size": 1 << 44,
}
#: A reference step time, seconds.
MAX_STEP_TIME_S = 1e6
#: Megatron-LM's default ``--hidden-dropout`` and ``--attention-dropout``.
DEFAULT_DROPOUT = 0.1
RECOMPUTE = ("none", "selective", "full")
DTYPES = ("fp32", "fp16", "bf16", "fp8")
MODEL_KINDS = ("gpt",)
ATTENTION = ("auto", "flash", "unfused")
#: How unfused attention scales, masks and normalises its scores (``masked_softmax``).
MASKED_SOFTMAX = ("fused", "masked_fill", "multiply")
ACTIVATIONS = ("gelu", "swiglu")
NORMALIZATIONS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")
FP8_RECIPES = ("delayed", "tensorwise", "blockwise")
#: Who writes a piece of the training program: Megatron-LM's implementation (the default)
#: or PyTorch's own (``cross_entropy``, ``ddp``, ``clip_grad_norm``; docs/workloads.md,
#: "PyTorch-native training").
IMPLEMENTATIONS = ("megatron", "torch")
#: How the optimizer checks gradients for overflow and takes their norm: ``fused`` (one pass over
#: all of them, one read on the host; Megatron-LM since December 2020) or ``per_tensor`` (a pass
#: and a host read per gradient tensor; Megatron-LM of 2019, docs/workloads.md "Host path").
GRAD_CHECKS = ("fused", "per_tensor")
#: How a mixed-precision optimizer moves gradients and parameters between the 16-bit model and
#: its fp32 master copy: ``fused`` (gradients accumulate into fp32 ``main_grad`` buffers, one
#: copy of the updated params and one zeroing of the buffer over all tensors; Megatron-LM since
#: December 2020) or ``per_tensor`` (Megatron-LM of 2019's ``FP16_Optimizer``: per parameter
#: tensor a copy of its fp16 gradient into an fp32 one, the loss-scale division, the copy of the
#: updated param back, and both gradients zeroed; docs/workloads.md "Host path").
MASTER_COPIES = ("fused", "per_tensor")
#: How data parallelism reduces the gradients: ``buffer`` (they live in one contiguous buffer
#: that is reduced in place; Megatron-LM since 2021, PyTorch DDP's buckets) or ``flatten``
#: (Megatron-LM of 2019's ``DistributedDataParallel.allreduce_params``: every 16-bit gradient
#: copied into one new tensor, divided by the data-parallel size, all-reduced, the host waiting
#: for it, and copied back tensor by tensor; docs/workloads.md "Host path").
GRAD_ALLREDUCE = ("buffer", "flatten")
#: Where a 16-bit model's gradients accumulate over micro-batches: ``main_grad`` (Megatron's
#: fp32 buffer, which its DDP hook or the fused weight-gradient GEMMs add to; PyTorch DDP's
#: buckets with ``parallel.ddp = "torch"``) or ``cast_add`` (DeepSpeed's ``BF16_Optimizer``:
#: after each micro-batch's backward every parameter's bf16 gradient is cast to fp32 and added
#: to the optimizer's fp32 gradient, two kernels per tensor, ``update_hp_grads`` in
#: deepspeed/runtime/bf16_optimizer.py; docs/workloads.md "DeepSpeed's bf16 optimizer").
GRAD_ACCUMULATION = ("main_grad", "cast_add")
#: Megatron-LM's ``--transformer-impl``: the layers are Transformer Engine's modules or
#: Megatron's own (``local``: PyTorch GEMMs, Apex norms, a preallocated attention-score buffer).
#: The traced ops are the same; which buffers are allocated per op differs, which matters
#: under ``[training] deterministic`` (docs/workloads.md, "Deterministic mode").
TRANSFORMER_IMPLS = ("transformer_engine", "local")
#: PyTorch FSDP sharding strategies (``ShardingStrategy``, lower case): ``none`` is no FSDP.
FSDP = ("none", "full_shard", "shard_grad_op")
#: When FSDP reduce-scatters gradients: after every micro-batch's backward (FSDP without
#: ``no_sync``), or only after each model chunk's last one (``torch.distributed.pipelining``).
FSDP_GRAD_SYNC = ("every_microbatch", "last_microbatch")
#: Parallel options that change only how the simulator schedules communication, never a rank's
#: ops, so they stay out of the tracing key (configs differing only in them share a graph;
#: whether ``fsdp`` is set does change the ops and
#: :func:`~echo_view.model.config_keys.tracing_key` adds it on its own).
SIMULATION_ONLY = (
    "tp_comm_overlap",
    "overlap_param_gather",
    "align_param_gather",
    "ddp_bucket_size",
    "grad_reduce_in_fp32",
    "overlap_p2p_comm",
    "batch_p2p_sync",
    "fsdp",
    "fsdp_grad_sync",
    "microbatch_group_size_per_vp_stage",
    "async_tensor_model_parallel_allreduce",
)
#: Model options the simulator alone reads (the traced ops are the same for every value).
MODEL_SIMULATION_ONLY = (*SIMULATION_ONLY_KEYS, "attention_kernel")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Transformer shape. ``ffn_hidden`` defaults to 4 * hidden; ``kv_heads`` to ``heads``.

    ``attention`` picks the core-attention kernels: ``flash`` (one fused kernel forward, one
    backward), ``unfused`` (batched GEMMs around a softmax, as Megatron-LM ran before fused
    attention), or ``auto`` (see :func:`resolve_attention`). ``attention_kernel`` names the fused
    kernel that times it (:mod:`echo_view.model.attention_kernels`; ``auto``: Transformer
    Engine's choice for the GPU). ``activation`` ``swiglu`` has a gate
    and an up projection of ``ffn_hidden`` each (Llama); ``normalization``, ``position`` and
    ``tie_embeddings`` default to Megatron-LM's GPT defaults (LayerNorm, learned absolute
    positions, output layer sharing the word embedding).
    """

    kind: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int
    kv_heads: int
    attention: str = "auto"
    attention_kernel: str = "auto"
    activation: str = "gelu"
    normalization: str = "layernorm"
    position: str = "learned"
    tie_embeddings: bool = True
    #: The loss: Megatron-LM's vocab-parallel cross entropy or PyTorch's ``F.cross_entropy``.
    cross_entropy: str = "megatron"
    #: ``FILE.py[:FUNCTION]`` of a training step to trace instead of the built-in GPT
    #: (relative to the config); the shape keys above are passed to it and size the report.
    script: str | None = None
    #: The MoE layers (:mod:`echo_view.model.moe_config`); ``None`` for a dense model.
    moe: MoEConfig | None = None
    #: Dropout probability after each layer's attention and MLP blocks (Megatron-LM's
    #: ``--hidden-dropout``, default 0.1); 0 runs no dropout kernels and keeps no masks.
    hidden_dropout: float = 0.1
    #: Dropout probability on the attention probabilities (``--attention-dropout``); it runs
    #: kernels of its own only with unfused attention (a fused kernel applies it inside).
    attention_dropout: float = 0.1
    #: Biases on the attention and MLP linears (Megatron-LM's ``--add-bias-linear``, default
    #: on; ``--disable-bias-linear`` for Llama-style models, which have none).
    add_bias_linear: bool = True
    #: A bias on the QKV projection alone when ``add_bias_linear`` is off (``--add-qkv-bias``:
    #: Qwen2).
    add_qkv_bias: bool = False
    #: Megatron-LM's ``--bias-dropout-fusion`` (default on; ``--no-bias-dropout-fusion``): each
    #: residual branch's bias addition, hidden dropout and residual addition run as one
    #: jit-compiled kernel forward (``bias_dropout_add_fused_train``). PyTorch-native programs
    #: (``autocast``) have no such kernel and ignore it.
    bias_dropout_fusion: bool = True
    #: How unfused attention turns its QK^T product into probabilities. ``fused``: one
    #: kernel scales, masks and normalises (Megatron-LM's ``--masked-softmax-fusion``, its
    #: default); ``masked_fill``: the scale in the GEMM, ``masked_fill_`` then a softmax
    #: (``--no-masked-softmax-fusion``); ``multiply``: GPT-2's form, as Megatron-LM of 2019
    #: ran it: the product divided by sqrt(d), multiplied by the 0/1 causal mask, 10,000 times
    #: the mask's complement subtracted, then a softmax.
    masked_softmax: str = "fused"
    #: :data:`TRANSFORMER_IMPLS` (Megatron-LM's ``--transformer-impl``).
    transformer_impl: str = "transformer_engine"

    @property
    def has_qkv_bias(self) -> bool:
        """Whether the QKV projection carries a bias."""
        return self.add_bias_linear or self.add_qkv_bias

    @property
    def up_projections(self) -> int:
        """Input-side matrices of one MLP (or expert): SwiGLU's gate and up, else one up; the
        MLP has these and one down projection."""
        return 2 if self.activation == "swiglu" else 1


def split_script(text: str) -> tuple[str, str]:
    """``FILE.py[:FUNCTION]`` as (file, function; ``""`` when not given). A text that ends in
    ``.py`` is all file: a ``:`` in a file name is no function."""
    if text.endswith(".py") or ":" not in text:
        return text, ""
    path, _, function = text.rpartition(":")
    return path, function


def microbatch_group_error(stages: int, microbatches: int, group: int) -> str | None:
    """Why Megatron-Core's interleaved schedule refuses ``group`` contiguous micro-batches per
    chunk, or ``None``: it must lie in ``[pp, m]``, and a shorter last group must still hold
    ``pp`` (else, as Megatron-Core says, it "introduces dependency bubbles")."""
    if not stages <= group <= microbatches:
        return (
            f"the interleaved schedule needs between pp = {stages} and the micro-batches per "
            f"step ({microbatches}) contiguous micro-batches per chunk, got {group}"
        )
    rest = microbatches % group
    if 0 < rest < stages:
        return (
            f"the last group of micro-batches ({microbatches} mod {group} = {rest}) must be "
            f"empty or hold at least pp = {stages}"
        )
    return None


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """Megatron-style layout: tensor, pipeline, data and context parallel sizes and options.

    ``grad_reduce_in_fp32`` ``None`` means Megatron-LM's default for the dtype
    (:func:`grad_reduce_bytes`); ``overlap_p2p_comm`` (Megatron's default: on) matters only for
    the interleaved schedule, as in Megatron-LM, which turns it off otherwise. ``fsdp``
    is PyTorch FSDP's sharding strategy over the data- and context-parallel ranks
    (:mod:`echo_view.sim.fsdp`); it implies the sharded optimizer (``distributed_optimizer``).
    ``ep`` and ``etp`` are the MoE layers' expert- and expert-tensor-parallel sizes
    (``etp`` ``None``: ``tp``, as in Megatron-Core), folded onto a stage's ranks.
    ``ddp_bucket_size`` is Megatron-LM's ``--ddp-bucket-size``, parameters per data-parallel
    bucket (``None``: its default, :func:`ddp_bucket_params`).
    """

    tp: int
    pp: int
    dp: int
    cp: int = 1
    virtual_stages: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    tp_comm_overlap: bool = False
    overlap_param_gather: bool = False
    #: Megatron-Core's ``align_param_gather`` (``--no-align-param-gather`` turns it off): with
    #: the interleaved schedule and ``overlap_param_gather`` each chunk's parameter gather is
    #: dispatched by the schedule, all stages at once, instead of bucket by bucket from the
    #: forward pre-hook (:mod:`echo_view.sim.compose`).
    align_param_gather: bool = True
    ddp_bucket_size: int | None = None
    grad_reduce_in_fp32: bool | None = None
    overlap_p2p_comm: bool = True
    batch_p2p_sync: bool = True
    fsdp: str = "none"
    #: :data:`FSDP_GRAD_SYNC`; ``None``: ``every_microbatch`` with pp = 1, ``last_microbatch``
    #: with pipeline parallelism (:attr:`fsdp_sync`).
    fsdp_grad_sync: str | None = None
    ep: int = 1
    etp: int | None = None
    #: The data-parallel wrapper: Megatron-Core's gradient buffer or PyTorch's
    #: ``DistributedDataParallel`` buckets (``gradient_as_bucket_view``).
    ddp: str = "megatron"
    #: Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``: contiguous
    #: micro-batches per chunk in the interleaved schedule (``None``: ``pp``).
    microbatch_group_size_per_vp_stage: int | None = None
    #: Megatron-LM's asynchronous tensor-parallel all-reduce (``--no-async-tensor-model-
    #: parallel-allreduce`` turned it off; the default since September 2021): without sequence
    #: parallelism a column-parallel linear all-reduces its input gradient beside its
    #: weight-gradient GEMM instead of after it (:mod:`echo_view.sim.tp_overlap`).
    async_tensor_model_parallel_allreduce: bool = True

    @property
    def microbatch_group(self) -> int:
        """The interleaved schedule's contiguous micro-batches per chunk (default ``pp``)."""
        g = self.microbatch_group_size_per_vp_stage
        return self.pp if g is None else g

    @property
    def fsdp_sync(self) -> str:
        """When FSDP reduce-scatters gradients (:data:`FSDP_GRAD_SYNC`): as set, else
        ``every_microbatch`` with pp = 1 and ``last_microbatch`` with pipeline parallelism."""
        if self.fsdp_grad_sync is not None:
            return self.fsdp_grad_sync
        return "every_microbatch" if self.pp == 1 else "last_microbatch"

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism (``etp``, or ``tp`` when unset)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data parallelism: a stage's ``tp * cp * dp`` ranks over ``etp * ep``."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """Global batch and micro-batch, in sequences."""

    global_batch: int
    micro: int


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """GPU preset name and topology; ``overrides`` are other cluster knobs, checked by the
    simulator's cluster model (an unknown one is an error there)."""

    gpu: str
    gpus_per_node: int
    nodes: int
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True, slots=True)
class Reference:
    """A measured step time the simulator reports against (and never uses)."""

    step_time_s: float
    source: str = ""
    #: One id per publication or data set (e.g. ``korthikanti2022``): cross-validation leaves
    #: out all runs of one source together.
    source_id: str = ""


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """Megatron-LM training options: ``clip_grad`` (``--clip-grad``, Megatron's default 1.0; 0
    is no clipping) and ``log_num_zeros_in_grad`` (``--log-num-zeros-in-grad``) make the host
    wait for the GPU once per step (:mod:`echo_view.sim.host`); ``gradient_accumulation_fusion``
    (``--no-gradient-accumulation-fusion`` sets it false) decides whether the linear layers'
    weight-gradient GEMMs accumulate into the fp32 ``main_grad`` themselves or write a 16-bit
    gradient that Megatron's DDP hook adds to it (traced, docs/workloads.md); ``grad_checks``
    (:data:`GRAD_CHECKS`) whether the overflow check and the norm read one value or one per
    gradient tensor on the host (simulated, :mod:`echo_view.sim.host`); ``master_copies``
    (:data:`MASTER_COPIES`) whether the fp16/fp32 copies run once over all tensors or once per
    tensor (traced, and the per-tensor launches simulated on the host); ``grad_allreduce``
    (:data:`GRAD_ALLREDUCE`) whether gradients are reduced in place or through a flattened
    copy (traced, and the copies back launched per tensor on the host); ``deterministic``
    (``--deterministic-mode``: ``torch.use_deterministic_algorithms(True)``) whether PyTorch
    fills each new buffer before use (traced, docs/workloads.md "Deterministic mode");
    ``grad_accumulation`` (:data:`GRAD_ACCUMULATION`) where the 16-bit gradients accumulate
    over micro-batches (traced); ``log_params_norm`` (``--log-params-norm``) whether the
    training loop takes the parameters' norm after every step, launches on the host and a
    read that waits for the GPU (simulated, :mod:`echo_view.sim.host_loops`)."""

    clip_grad: float = 1.0
    log_num_zeros_in_grad: bool = False
    #: Megatron-LM's ``clip_grad_by_total_norm_fp32`` or ``torch.nn.utils.clip_grad_norm_``.
    clip_grad_norm: str = "megatron"
    gradient_accumulation_fusion: bool = True
    grad_checks: str = "fused"
    master_copies: str = "fused"
    grad_allreduce: str = "buffer"
    deterministic: bool = False
    grad_accumulation: str = "main_grad"
    log_params_norm: bool = False

    @property
    def optimizer_sync(self) -> bool:
        """Whether the optimizer step reads a gradient statistic on the host (``.item()``)
        before it updates the parameters (PyTorch's clipping keeps its norm on the GPU)."""
        megatron_clip = self.clip_grad > 0 and self.clip_grad_norm == "megatron"
        return megatron_clip or self.log_num_zeros_in_grad


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """A whole ``simulate`` / ``trace`` input."""

    model: ModelConfig
    parallel: ParallelConfig
    batch: BatchConfig
    cluster: ClusterConfig
    dtype: str
    reference: Reference | None = None
    source: str = ""
    fp8_recipe: str = "delayed"
    training: TrainingConfig = TrainingConfig()
    #: ``torch.autocast`` mixed precision: fp32 parameters, gradients and optimizer, matrix
    #: products in ``dtype`` (docs/workloads.md, "PyTorch-native training").
    autocast: bool = False

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step: global / (micro * dp)."""
        return self.batch.global_batch // (self.batch.micro * self.parallel.dp)

    @property
    def half_params(self) -> bool:
        """Whether the model's parameters are 16-bit beside fp32 main copies (Megatron's
        mixed precision), not fp32 ones (fp32 training, ``torch.autocast``)."""
        return self.dtype != "fp32" and not self.autocast

    @property
    def per_tensor_master_copies(self) -> bool:
        """Whether the optimizer copies between the 16-bit and the fp32 tensors one tensor at a
        time (``[training] master_copies = "per_tensor"``; only 16-bit params have copies)."""
        return self.half_params and self.training.master_copies == "per_tensor"

    @property
    def megatron_main_grad(self) -> bool:
        """Whether gradients accumulate in Megatron's own fp32 ``main_grad`` buffer: its DDP
        (not PyTorch DDP or FSDP), not Megatron-LM of 2019's flattened all-reduce, not
        DeepSpeed's ``cast_add``, not ``torch.autocast``."""
        p, tr = self.parallel, self.training
        return (
            p.ddp == "megatron"
            and p.fsdp == "none"
            and tr.grad_allreduce == "buffer"
            and tr.grad_accumulation == "main_grad"
            and not self.autocast
        )

    @property
    def per_tensor_param_copies(self) -> bool:
        """Whether Megatron-Core copies the updated fp32 main params into the bf16 model params
        one tensor at a time: it has no bf16 multi-tensor copy (``_dummy_overflow_buf`` is
        ``None`` with ``--bf16``, so ``_multi_tensor_copy_this_to_that`` loops over ``copy_``;
        the distributed optimizer's ``_copy_main_params_to_model_params`` loops over its
        shard's tensors either way), in megatron/core/optimizer/optimizer.py and
        distrib_optimizer.py. fp16 copies without it run as one multi-tensor kernel. Only with
        Megatron's own data parallelism (:attr:`megatron_main_grad`)."""
        looped = self.dtype in ("bf16", "fp8") or self.parallel.distributed_optimizer
        return (
            self.megatron_main_grad
            and self.half_params
            and looped
            and self.training.master_copies == "fused"
        )


def resolve_attention(cfg: WorkloadConfig) -> str:
    """The attention implementation ``auto`` stands for.

    Fused (flash) attention kernels exist for fp16/bf16/fp8 only, and selective recomputation is
    defined on the unfused core attention (it recomputes the softmax and its neighbours), so
    ``auto`` means ``unfused`` for fp32 or selective recompute and ``flash`` otherwise.
    """
    if cfg.model.attention != "auto":
        return cfg.model.attention
    if cfg.dtype == "fp32" or cfg.parallel.recompute == "selective":
        return "unfused"
    return "flash"


#: PyTorch DDP's default ``bucket_cap_mb``: 25 MiB of gradients per bucket.
TORCH_DDP_BUCKET_BYTES = 25 * 2**20


def ddp_bucket_params(p: ParallelConfig, grad_ranks: int) -> int:
    """Parameters per gradient (and, with ``overlap_param_gather``, parameter) bucket:
    ``ddp_bucket_size``, else Megatron-Core's default ``max(40e6, 1e6 * dp)`` over the
    ``grad_ranks`` the gradients are reduced across (``DistributedDataParallel.__init__`` in
    ``megatron/core/distributed/distributed_data_parallel.py``), or with ``ddp = "torch"``
    PyTorch DDP's ``bucket_cap_mb`` of its fp32 gradients."""
    if p.ddp_bucket_size is not None:
        return p.ddp_bucket_size
    if p.ddp == "torch":
        return TORCH_DDP_BUCKET_BYTES // 4
    return max(40_000_000, 1_000_000 * grad_ranks)


def grad_reduce_bytes(cfg: WorkloadConfig) -> int:
    """Bytes per gradient element in the main-gradient buffer and its data-parallel reduction.

    Megatron-LM keeps ``main_grad`` in fp32 and reduces in fp32 when ``grad_reduce_in_fp32``
    (``--accumulate-allreduce-grads-in-fp32``) is set, in the parameter dtype otherwise; it
    turns the option on by itself for ``--bf16`` (``megatron/training/arguments.py``: "bfloat16
    requires gradient accumulation and all-reduce to be done in fp32") and leaves it off for
    ``--fp16``. FP8 training runs with ``--bf16`` parameters. Unset, the key follows that rule.
    """
    if cfg.dtype == "fp32" or cfg.autocast:
        return 4
    fp32 = cfg.parallel.grad_reduce_in_fp32
    if fp32 is None:
        fp32 = cfg.dtype in ("bf16", "fp8")
    return 4 if fp32 else 2


def moe_dense_prefix(cfg: WorkloadConfig, chunk: int) -> int:
    """How many of global model ``chunk``'s first layers are dense in an MoE model (its
    ``first_dense_layers`` lie in chunk 0); 0 for a dense model, whose layers all are."""
    moe = cfg.model.moe
    return moe.first_dense_layers if moe is not None and chunk == 0 else 0


def chunk_layers(cfg: WorkloadConfig, stage: int) -> tuple[int, ...]:
    """Transformer layers of each model chunk of pipeline ``stage``, local chunk ``c`` (global
    chunk ``c * pp + stage``) at index ``c``; the model's layers in order fill global chunk 0,
    1, ... (Megatron-Core's ``get_num_layers_to_build`` and ``get_transformer_layer_offset``).

    - Even: ``layers / (pp * v)`` per chunk.
    - ``first_stage_layers`` / ``last_stage_layers`` (``--decoder-first/last-pipeline-num-
      layers``): that many on the first / last stage, the rest split evenly over the other
      stages; with interleaving each stage's count is split evenly over its ``v`` chunks.
    - ``account_for_embedding_in_pipeline_split`` / ``..._loss_...``: the embedding (loss)
      counts as one layer in an even split of ``layers + 1 (+ 1)`` slots, so the model's first
      (last) chunk holds one transformer layer fewer, possibly none.
    """
    par, layers = cfg.parallel, cfg.model.layers
    pp, v = par.pp, par.virtual_stages
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is not None or last is not None:
        middle_stages = pp - (first is not None) - (last is not None)
        rest = layers - (first or 0) - (last or 0)
        per_stage = rest // middle_stages if middle_stages else 0
        if stage == 0 and first is not None:
            per_stage = first
        elif stage == pp - 1 and last is not None:
            per_stage = last
        return (per_stage // v,) * v
    emb = par.account_for_embedding_in_pipeline_split
    loss = par.account_for_loss_in_pipeline_split
    counts = [(layers + emb + loss) // (pp * v)] * v
    if emb and stage == 0:
        counts[0] -= 1
    if loss and stage == pp - 1:
        counts[-1] -= 1
    return tuple(counts)
