"""Parsing a decoded TOML mapping into a :class:`~echo_view.model.config.WorkloadConfig`.

Parsing is strict, like Calculon's: an unknown key or an inconsistent value is a
:class:`~echo_view.errors.ConfigError` naming the key. Reading the TOML file itself is the CLI's
job; this module validates the decoded mapping: each section's keys and bounds
(:class:`_Section`), then the rules between sections (:func:`_check_consistency`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from echo_view.errors import ConfigError, known_keys_hint
from echo_view.model.attention_kernels import KERNELS as ATTENTION_KERNELS
from echo_view.model.config import (
    ACTIVATIONS,
    ATTENTION,
    DEFAULT_DROPOUT,
    DTYPES,
    FP8_RECIPES,
    FSDP,
    FSDP_GRAD_SYNC,
    GRAD_ACCUMULATION,
    GRAD_ALLREDUCE,
    GRAD_CHECKS,
    IMPLEMENTATIONS,
    LIMITS,
    MASKED_SOFTMAX,
    MASTER_COPIES,
    MAX_STEP_TIME_S,
    MODEL_KINDS,
    NORMALIZATIONS,
    POSITIONS,
    RECOMPUTE,
    TRANSFORMER_IMPLS,
    BatchConfig,
    ClusterConfig,
    ModelConfig,
    ParallelConfig,
    Reference,
    TrainingConfig,
    WorkloadConfig,
    chunk_layers,
    microbatch_group_error,
    resolve_attention,
    split_script,
)
from echo_view.model.moe_config import check_moe_layout, parse_moe
from echo_view.text import clipped


class _Section:
    """Typed access to one TOML table that remembers which keys were read."""

    def __init__(self, data: Mapping[str, Any], name: str, source: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"[{name}] must be a table", path=source or None)
        self.data = data
        self.name = name
        self.source = source
        self.used: set[str] = set()

    def _err(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, path=self.source or None, where=f"{self.name}.{key}")

    def get(self, key: str, kind: type, default: Any = None, *, required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required:
                near = difflib.get_close_matches(key, [str(k) for k in self.data], n=1)
                typo = f" (is {near[0]!r} a misspelling of it?)" if near else ""
                raise self._err(key, f"required key is missing{typo}")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is int and isinstance(value, bool):
            raise self._err(key, f"expected an integer, got {clipped(repr(value))}")
        if not isinstance(value, kind):
            what = f"{type(value).__name__} {clipped(repr(value))}"
            raise self._err(key, f"expected {kind.__name__}, got {what}")
        return value

    def has(self, key: str) -> bool:
        """Whether the table sets ``key`` (an optional key read only when set: still one of
        the keys an unknown key's hint lists)."""
        self.used.add(key)
        return key in self.data

    def positive(self, key: str, default: int | None = None, *, required: bool = True) -> int:
        """A positive integer, at most ``LIMITS[key]`` (or :data:`LIMITS` ``["gpus"]``)."""
        value = self.get(key, int, default, required=required and default is None)
        if value is None or value < 1:
            raise self._err(key, f"must be a positive integer, got {value!r}")
        limit = LIMITS.get(key, LIMITS["gpus"])
        if value > limit:
            raise self._err(key, f"{value} is more than echo-view's limit of {limit:,}")
        return int(value)

    def probability(self, key: str, default: float) -> float:
        """A probability in [0, 1) (a dropout rate)."""
        value = float(self.get(key, float, default))
        if not 0.0 <= value < 1.0:  # also rejects nan
            raise self._err(key, f"must be a probability in [0, 1), got {value!r}")
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str | None = None) -> str:
        value = self.get(key, str, default, required=default is None)
        if value not in options:
            raise self._err(key, f"must be one of {', '.join(options)}; got {clipped(repr(value))}")
        return str(value)

    def rest(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k not in self.used}

    def finish(self) -> None:
        extra = sorted(self.rest())
        if extra:
            err = self._err(extra[0], "unknown key")
            err.hint = known_keys_hint(extra[0], sorted(self.used))
            raise err


_SECTIONS = ("model", "parallel", "batch", "cluster", "precision", "reference", "training")


def parse_workload_config(data: Mapping[str, Any], source: str = "") -> WorkloadConfig:
    """Validate a decoded TOML mapping into a :class:`WorkloadConfig`."""
    for key in data:
        if key not in _SECTIONS:
            raise ConfigError(
                f"unknown table [{key}]",
                path=source or None,
                hint=known_keys_hint(key, _SECTIONS, "known tables"),
            )
    for key in _SECTIONS[:5]:
        if key not in data:
            raise ConfigError(f"required table [{key}] is missing", path=source or None)

    m = _Section(data["model"], "model", source)
    script = m.get("script", str)
    kind = m.choice("kind", MODEL_KINDS, "gpt" if script is not None else None)
    hidden = m.positive("hidden")
    heads = m.positive("heads")
    ffn_hidden = m.positive("ffn_hidden", 4 * hidden)
    model = ModelConfig(
        kind=kind,
        layers=m.positive("layers"),
        hidden=hidden,
        heads=heads,
        seq_len=m.positive("seq_len"),
        vocab=m.positive("vocab"),
        ffn_hidden=ffn_hidden,
        kv_heads=m.positive("kv_heads", heads),
        attention=m.choice("attention", ATTENTION, "auto"),
        attention_kernel=m.choice("attention_kernel", ATTENTION_KERNELS, "auto"),
        activation=m.choice("activation", ACTIVATIONS, "gelu"),
        normalization=m.choice("normalization", NORMALIZATIONS, "layernorm"),
        position=m.choice("position", POSITIONS, "learned"),
        tie_embeddings=m.get("tie_embeddings", bool, True),
        cross_entropy=m.choice("cross_entropy", IMPLEMENTATIONS, "megatron"),
        script=script,
        moe=parse_moe(m, ffn_hidden),
        hidden_dropout=m.probability("hidden_dropout", DEFAULT_DROPOUT),
        attention_dropout=m.probability("attention_dropout", DEFAULT_DROPOUT),
        add_bias_linear=m.get("add_bias_linear", bool, True),
        add_qkv_bias=m.get("add_qkv_bias", bool, False),
        bias_dropout_fusion=m.get("bias_dropout_fusion", bool, True),
        masked_softmax=m.choice("masked_softmax", MASKED_SOFTMAX, "fused"),
        transformer_impl=m.choice("transformer_impl", TRANSFORMER_IMPLS, "transformer_engine"),
    )
    m.finish()

    p = _Section(data["parallel"], "parallel", source)
    fsdp = p.choice("fsdp", FSDP, "none")
    ddp = p.choice("ddp", IMPLEMENTATIONS, "megatron")
    parallel = ParallelConfig(
        tp=p.positive("tp"),
        pp=p.positive("pp"),
        dp=p.positive("dp"),
        cp=p.positive("cp", 1),
        virtual_stages=p.positive("virtual_stages", 1),
        sequence_parallel=p.get("sequence_parallel", bool, False),
        recompute=p.choice("recompute", RECOMPUTE, "none"),
        # FSDP shards the optimizer states: unset, distributed_optimizer follows it.
        distributed_optimizer=p.get("distributed_optimizer", bool, fsdp != "none"),
        # PyTorch's DDP always reduces its buckets during the backward pass.
        overlap_grad_reduce=p.get("overlap_grad_reduce", bool, ddp == "torch"),
        first_stage_layers=p.get("first_stage_layers", int),
        last_stage_layers=p.get("last_stage_layers", int),
        account_for_embedding_in_pipeline_split=p.get(
            "account_for_embedding_in_pipeline_split", bool, False
        ),
        account_for_loss_in_pipeline_split=p.get("account_for_loss_in_pipeline_split", bool, False),
        tp_comm_overlap=p.get("tp_comm_overlap", bool, False),
        overlap_param_gather=p.get("overlap_param_gather", bool, False),
        align_param_gather=p.get("align_param_gather", bool, True),
        ddp_bucket_size=p.positive("ddp_bucket_size") if p.has("ddp_bucket_size") else None,
        grad_reduce_in_fp32=p.get("grad_reduce_in_fp32", bool),
        overlap_p2p_comm=p.get("overlap_p2p_comm", bool, True),
        async_tensor_model_parallel_allreduce=p.get(
            "async_tensor_model_parallel_allreduce", bool, True
        ),
        batch_p2p_sync=p.get("batch_p2p_sync", bool, True),
        fsdp=fsdp,
        fsdp_grad_sync=(
            p.choice("fsdp_grad_sync", FSDP_GRAD_SYNC, "every_microbatch")
            if p.has("fsdp_grad_sync")
            else None
        ),
        ep=p.positive("ep", 1),
        etp=p.positive("etp", 1) if p.has("etp") else None,
        ddp=ddp,
        microbatch_group_size_per_vp_stage=(
            p.positive("microbatch_group_size_per_vp_stage")
            if p.has("microbatch_group_size_per_vp_stage")
            else None
        ),
    )
    p.finish()

    b = _Section(data["batch"], "batch", source)
    batch = BatchConfig(global_batch=b.positive("global"), micro=b.positive("micro"))
    b.finish()

    c = _Section(data["cluster"], "cluster", source)
    gpu = c.get("gpu", str, required=True)
    gpn = c.positive("gpus_per_node")
    nodes = c.positive("nodes")
    cluster = ClusterConfig(gpu, gpn, nodes, MappingProxyType(c.rest()))

    pr = _Section(data["precision"], "precision", source)
    dtype = pr.choice("dtype", DTYPES)
    recipe = pr.choice("fp8_recipe", FP8_RECIPES, "delayed")
    if "fp8_recipe" in pr.data and dtype != "fp8":
        raise pr._err("fp8_recipe", f'needs dtype = "fp8" (dtype is {dtype!r})')
    autocast = pr.get("autocast", bool, False)
    if autocast and dtype not in ("bf16", "fp16"):
        raise pr._err("autocast", f'needs dtype = "bf16" or "fp16" (dtype is {dtype!r})')
    pr.finish()

    reference = None
    if "reference" in data:
        r = _Section(data["reference"], "reference", source)
        step = r.get("step_time_s", float, required=True)
        if not 0 < step <= MAX_STEP_TIME_S:
            raise r._err("step_time_s", f"must be > 0 and <= {MAX_STEP_TIME_S:g}, got {step}")
        reference = Reference(step, r.get("source", str, ""), r.get("source_id", str, ""))
        r.finish()

    t = _Section(data.get("training", {}), "training", source)
    clip = t.get("clip_grad", float, 1.0)
    if not 0 <= clip < float("inf"):
        raise t._err("clip_grad", f"must be a number >= 0, got {clip!r}")
    accumulation = t.choice("grad_accumulation", GRAD_ACCUMULATION, "main_grad")
    cast_add = accumulation == "cast_add"
    # DeepSpeed's weight-gradient GEMMs write a new 16-bit gradient: no fusion by default.
    fusion = t.get("gradient_accumulation_fusion", bool, not cast_add)
    if cast_add and fusion:
        raise t._err(
            "gradient_accumulation_fusion",
            'cannot be true with grad_accumulation = "cast_add" (its weight-gradient GEMMs '
            "write 16-bit gradients): leave it unset",
        )
    training = TrainingConfig(
        clip,
        t.get("log_num_zeros_in_grad", bool, False),
        t.choice("clip_grad_norm", IMPLEMENTATIONS, "megatron"),
        fusion,
        t.choice("grad_checks", GRAD_CHECKS, "fused"),
        t.choice("master_copies", MASTER_COPIES, "fused"),
        t.choice("grad_allreduce", GRAD_ALLREDUCE, "buffer"),
        t.get("deterministic", bool, False),
        accumulation,
        t.get("log_params_norm", bool, False),
    )
    t.finish()

    cfg = WorkloadConfig(
        model, parallel, batch, cluster, dtype, reference, source, recipe, training, autocast
    )
    _check_consistency(cfg)
    return cfg


def _check_consistency(cfg: WorkloadConfig) -> None:
    src = cfg.source or None
    par, mod = cfg.parallel, cfg.model

    def err(where: str, message: str) -> ConfigError:
        return ConfigError(message, path=src, where=where)

    if par.world_size > LIMITS["gpus"]:
        raise err(
            "parallel",
            f"tp*pp*dp*cp = {par.world_size} GPUs is more than echo-view's limit of "
            f"{LIMITS['gpus']:,}",
        )
    if par.world_size != cfg.cluster.gpus:
        raise err(
            "parallel",
            f"tp*pp*dp*cp = {par.tp}*{par.pp}*{par.dp}*{par.cp} = {par.world_size} GPUs, but the "
            f"cluster has gpus_per_node*nodes = {cfg.cluster.gpus_per_node}*{cfg.cluster.nodes} "
            f"= {cfg.cluster.gpus}",
        )
    uneven = (
        par.first_stage_layers is not None
        or par.last_stage_layers is not None
        or par.account_for_embedding_in_pipeline_split
        or par.account_for_loss_in_pipeline_split
    )
    if mod.script is not None and not split_script(mod.script)[0].strip():
        raise err("model.script", "names no file: give the script's path, e.g. train.py")
    if mod.script is not None and par.pp > 1:
        raise err("parallel.pp", "a script is traced as one pipeline stage: it needs pp = 1")
    if mod.script is not None and par.fsdp != "none":
        raise err(
            "parallel.fsdp",
            "a script's graph holds the FSDP collectives it runs: leave fsdp unset",
        )
    _check_torch_native(cfg, err)
    if cfg.training.grad_allreduce == "flatten":
        _check_flatten(par, err)
    if cfg.training.grad_accumulation == "cast_add":
        _check_cast_add(cfg, err)
    if cfg.training.deterministic and mod.script is not None:
        raise err(
            "training.deterministic",
            "is traced for the built-in model only; a script's own "
            "torch.use_deterministic_algorithms is not: leave it unset",
        )
    if uneven:
        _check_uneven(cfg, err)
    elif mod.layers % (par.pp * par.virtual_stages):
        raise err(
            "model.layers",
            f"{mod.layers} layers do not split into pp*virtual_stages = "
            f"{par.pp * par.virtual_stages} equal chunks",
        )
    if par.virtual_stages > 1 and par.pp == 1:
        raise err("parallel.virtual_stages", "interleaving needs pp > 1")
    if mod.heads % par.tp:
        raise err("model.heads", f"{mod.heads} heads are not divisible by tp = {par.tp}")
    if mod.heads % mod.kv_heads:
        raise err("model.kv_heads", f"{mod.heads} heads are not divisible by {mod.kv_heads}")
    if mod.kv_heads % par.tp and par.tp % mod.kv_heads:
        raise err("model.kv_heads", f"{mod.kv_heads} kv heads cannot be split over tp = {par.tp}")
    if mod.ffn_hidden % par.tp:
        # Megatron-LM's column-parallel linear divides its outputs evenly (``divide``).
        raise err(
            "model.ffn_hidden", f"ffn_hidden {mod.ffn_hidden} is not divisible by tp = {par.tp}"
        )
    if mod.vocab < par.tp:
        # Megatron pads the vocabulary to a multiple of 128 * tp; a smaller one than tp leaves
        # a rank no row of the output layer.
        raise err(
            "model.vocab", f"a vocabulary of {mod.vocab} does not split over tp = {par.tp} ranks"
        )
    if mod.hidden % mod.heads:
        raise err("model.hidden", f"hidden {mod.hidden} is not divisible by heads {mod.heads}")
    if cfg.batch.global_batch % (cfg.batch.micro * par.dp):
        raise err(
            "batch.global",
            f"global batch {cfg.batch.global_batch} is not divisible by micro*dp = "
            f"{cfg.batch.micro}*{par.dp}",
        )
    if cfg.micro_batches > LIMITS["micro_batches"]:
        raise err(
            "batch.global",
            f"{cfg.micro_batches:,} micro-batches per step (global / (micro * dp)) is more than "
            f"echo-view's limit of {LIMITS['micro_batches']:,}",
        )
    if mod.seq_len % par.cp:
        raise err("model.seq_len", f"seq_len {mod.seq_len} is not divisible by cp = {par.cp}")
    if par.cp > 1 and mod.seq_len % (2 * par.cp):
        # Megatron-Core cuts the sequence into 2 x cp chunks and gives each rank two, one from
        # each end, to balance the causal mask (get_batch_on_this_cp_rank).
        raise err(
            "model.seq_len",
            f"seq_len {mod.seq_len} is not divisible by 2 x cp = {2 * par.cp} (context "
            "parallelism gives each rank two of 2 x cp chunks)",
        )
    if par.cp > 1 and resolve_attention(cfg) != "flash":
        raise err(
            "parallel.cp",
            "context parallelism needs fused (flash) attention: a bf16/fp16/fp8 model, "
            'recompute other than selective, or model.attention = "flash"',
        )
    if mod.masked_softmax != "fused" and resolve_attention(cfg) != "unfused":
        raise err(
            "model.masked_softmax",
            'sets how unfused attention masks its scores: it needs model.attention = "unfused" '
            "(or fp32 or selective recompute, for which auto means unfused)",
        )
    if par.sequence_parallel and par.cp > 1 and (mod.seq_len // par.cp) % par.tp:
        raise err(
            "parallel.sequence_parallel",
            f"seq_len / cp = {mod.seq_len // par.cp} is not divisible by tp = {par.tp}",
        )
    if par.sequence_parallel and mod.seq_len % par.tp:
        raise err(
            "parallel.sequence_parallel",
            f"seq_len {mod.seq_len} is not divisible by tp = {par.tp}",
        )
    if par.tp_comm_overlap and not par.sequence_parallel:
        raise err(
            "parallel.tp_comm_overlap",
            "needs sequence_parallel = true (Transformer Engine overlaps the all-gather and "
            "reduce-scatter of sequence-parallel linears)",
        )
    if par.overlap_param_gather and not (par.distributed_optimizer and par.overlap_grad_reduce):
        raise err(
            "parallel.overlap_param_gather",
            "needs distributed_optimizer = true and overlap_grad_reduce = true (as in Megatron-LM)",
        )
    if par.fsdp != "none":
        _check_fsdp(par, err)
    elif par.fsdp_grad_sync is not None:
        raise err("parallel.fsdp_grad_sync", "applies to FSDP only: set fsdp or drop it")
    if par.virtual_stages > 1 and not par.overlap_p2p_comm and par.pp < 3:
        raise err(
            "parallel.overlap_p2p_comm",
            "the interleaved schedule with blocking transfers needs pp > 2 (as in Megatron-LM: "
            "two stages would send and receive twice between the same ranks per batch)",
        )
    if par.microbatch_group_size_per_vp_stage is not None and par.virtual_stages == 1:
        raise err(
            "parallel.microbatch_group_size_per_vp_stage",
            "only the interleaved schedule groups micro-batches: set virtual_stages > 1 or drop it",
        )
    if par.virtual_stages > 1 and par.microbatch_group_size_per_vp_stage is None:
        if cfg.micro_batches % par.pp:
            raise err(
                "batch.global",
                f"the interleaved schedule needs micro-batches per step ({cfg.micro_batches}) "
                f"to be a multiple of pp = {par.pp} (or set microbatch_group_size_per_vp_stage)",
            )
    elif par.virtual_stages > 1:
        why = microbatch_group_error(par.pp, cfg.micro_batches, par.microbatch_group)
        if why is not None:
            raise err("parallel.microbatch_group_size_per_vp_stage", why)
    check_moe_layout(cfg, err)
    dense = mod.moe.first_dense_layers if mod.moe is not None else 0
    first_chunk = chunk_layers(cfg, 0)[0]
    if dense > first_chunk:
        raise err(
            "model.first_dense_layers",
            f"{dense} dense layers must fit in the first model chunk ({first_chunk} "
            "layers): raise parallel.first_stage_layers or use fewer pipeline stages",
        )


def _check_cast_add(cfg: WorkloadConfig, err: Any) -> None:
    """DeepSpeed's bf16 optimizer keeps fp32 gradients beside bf16 params and reduces them
    itself: no PyTorch DDP or FSDP, no 2019 copies, bf16 only (fp16 has its own optimizer)."""
    par, tr = cfg.parallel, cfg.training
    reason = None
    if par.ddp != "megatron" or par.fsdp != "none":
        reason = "leave parallel.ddp and parallel.fsdp unset"
    elif not cfg.half_params or cfg.dtype != "bf16":
        reason = 'is DeepSpeed\'s bf16 optimizer: needs dtype = "bf16" (not autocast)'
    elif tr.master_copies != "fused" or tr.grad_allreduce != "buffer":
        reason = "leave training.master_copies and training.grad_allreduce unset"
    elif cfg.model.script is not None:
        reason = "is traced for the built-in model only"
    if reason is not None:
        raise err("training.grad_accumulation", f'"cast_add" {reason}')


def _check_flatten(par: ParallelConfig, err: Any) -> None:
    """Megatron-LM of 2019 reduced all gradients once after the backward, on every rank: no
    other data-parallel wrapper, no sharded optimizer, no overlapped or bucketed reduction."""
    if par.ddp != "megatron" or par.fsdp != "none":
        raise err(
            "training.grad_allreduce",
            '"flatten" is Megatron-LM\'s own data parallelism: leave parallel.ddp and '
            "parallel.fsdp unset",
        )
    for key, on in (
        ("distributed_optimizer", par.distributed_optimizer),
        ("overlap_grad_reduce", par.overlap_grad_reduce),
    ):
        if on:
            raise err(
                "training.grad_allreduce",
                f'"flatten" reduces every gradient after the backward: drop parallel.{key}',
            )


def _check_fsdp(par: ParallelConfig, err: Any) -> None:
    """FSDP shards the optimizer states itself and gathers parameters per unit, so Megatron's
    sharded-optimizer gather does not apply; its reduction after the last micro-batch only is
    modelled under pipeline parallelism (the pp = 1 program reduces every micro-batch)."""
    if par.fsdp_grad_sync == "last_microbatch" and par.pp == 1:
        raise err(
            "parallel.fsdp_grad_sync",
            '"last_microbatch" is modelled with pp > 1 only: drop it (with pp = 1 FSDP '
            "reduce-scatters after every micro-batch)",
        )
    if not par.distributed_optimizer:
        raise err(
            "parallel.fsdp",
            "FSDP shards the optimizer states: drop distributed_optimizer = false (it is implied)",
        )
    if par.overlap_param_gather:
        raise err(
            "parallel.overlap_param_gather",
            "is Megatron's distributed-optimizer "
            "gather; FSDP gathers each unit's parameters itself: drop it",
        )


def _check_torch_native(cfg: WorkloadConfig, err: Any) -> None:
    """The PyTorch-native keys only where the PyTorch program they name exists (and is
    modelled): ``F.cross_entropy`` takes whole-vocabulary logits; DDP replicates the optimizer
    and reduces during the backward; autocast is traced for one-stage dense models."""
    par, mod = cfg.parallel, cfg.model
    if mod.cross_entropy == "torch" and par.tp > 1:
        raise err(
            "model.cross_entropy",
            f'"torch" takes whole-vocabulary logits: it needs tp = 1 (got tp = {par.tp})',
        )
    main_grad = cfg.training.grad_accumulation == "main_grad"
    if (
        not cfg.training.gradient_accumulation_fusion
        and main_grad
        and (par.ddp == "torch" or mod.script is not None)
    ):
        raise err(
            "training.gradient_accumulation_fusion",
            'is Megatron\'s built-in GPT with its DDP (main_grad): drop it with ddp = "torch" '
            "or a script",
        )
    if par.ddp == "torch":
        if cfg.half_params:
            raise err(
                "parallel.ddp",
                '"torch" is modelled with fp32 parameters: set [precision] autocast = true '
                '(or dtype = "fp32")',
            )
        if par.fsdp != "none" or par.distributed_optimizer:
            raise err(
                "parallel.ddp",
                '"torch" replicates the optimizer: it needs fsdp = "none" and '
                "distributed_optimizer = false",
            )
        if not par.overlap_grad_reduce:
            raise err(
                "parallel.overlap_grad_reduce",
                'PyTorch DDP always overlaps its bucket all-reduces: drop it with ddp = "torch"',
            )
    if cfg.autocast:
        if par.pp > 1 or mod.moe is not None:
            raise err(
                "precision.autocast",
                "is modelled for dense models without pipeline stages (pp = 1, no experts)",
            )
        if par.grad_reduce_in_fp32 is False:
            raise err(
                "parallel.grad_reduce_in_fp32",
                "autocast keeps fp32 gradients, reduced in fp32: drop it",
            )


def _check_uneven(cfg: WorkloadConfig, err: Any) -> None:
    """The layer counts :func:`chunk_layers` reads are whole, under Megatron-Core's rules
    (``TransformerConfig`` checks in ``megatron/core/transformer/transformer_config.py``), and
    positive but for the model's first / last chunk when the embedding / loss is counted."""
    par, layers = cfg.parallel, cfg.model.layers
    pp, v = par.pp, par.virtual_stages
    first, last = par.first_stage_layers, par.last_stage_layers
    emb = par.account_for_embedding_in_pipeline_split
    loss = par.account_for_loss_in_pipeline_split
    if first is None and last is None:
        # The embedding and/or the loss count as one layer each in an even split; a chunk
        # then holds at least one slot, so the first (last) chunk at least zero layers.
        slots = layers + emb + loss
        if slots % pp:
            raise err(
                "model.layers",
                f"{layers} layers + {emb + loss} (embedding/loss) = {slots} do not split evenly "
                f"over pp = {pp} stages: pick a pp that divides them",
            )
        if (slots // pp) % v:
            raise err(
                "parallel.virtual_stages",
                f"{slots // pp} layers per stage (embedding/loss counted) do not split into "
                f"virtual_stages = {v} equal chunks: pick a virtual_stages that divides them",
            )
        return
    if emb or loss:
        raise err(
            "parallel.first_stage_layers",
            "cannot be combined with account_for_embedding/loss_in_pipeline_split (as in "
            "Megatron-Core): use one or the other",
        )
    if pp < 2:
        raise err("parallel.first_stage_layers", "uneven stages need pp >= 2")
    for key, value in (("first_stage_layers", first), ("last_stage_layers", last)):
        if value is not None and value < 1:
            raise err(f"parallel.{key}", f"must be a positive integer, got {value}")
        if value is not None and value >= layers:
            raise err(
                f"parallel.{key}",
                f"{value:,} layers on one stage leave none of the model's {layers:,} for the "
                "others",
            )
        if value is not None and value % v:
            raise err(
                f"parallel.{key}",
                f"{value} layers do not split into virtual_stages = {v} equal chunks (Megatron-"
                "Core splits each stage's layers evenly over its chunks)",
            )
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if middle_stages == 0:
        if rest != 0:
            raise err("model.layers", f"{layers} layers != first + last stage layers")
        return
    if rest < middle_stages or rest % middle_stages:
        raise err(
            "model.layers" if rest >= 0 else "parallel.last_stage_layers",
            f"the {rest} layers left after the first/last stages do not split evenly over "
            f"the other {middle_stages} stages",
        )
    if (rest // middle_stages) % v:
        raise err(
            "parallel.virtual_stages",
            f"the other stages' {rest // middle_stages} layers each do not split into "
            f"virtual_stages = {v} equal chunks: change first/last_stage_layers or "
            "virtual_stages",
        )
