"""The memory model against Korthikanti et al. 2022's activation formulas (arXiv 2205.05198,
Table 2 and section 4.2.3), Megatron-LM's bytes per parameter, and the OOM verdict."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config import (
    BatchConfig,
    ClusterConfig,
    ModelConfig,
    ParallelConfig,
    WorkloadConfig,
)
from echo_view.sim.memory import (
    ALLOCATOR_MARGIN,
    RESERVED_BYTES,
    inflight,
    layer_activation_bytes,
    layer_params,
    memory_report,
    stage_memory,
    stage_params,
)
from echo_view.sim.schedule import schedule

# The paper's models (Table 3): 22B, 175B, 530B, 1T.
PAPER_MODELS = [(48, 6144, 64, 8), (96, 12288, 96, 8), (105, 20480, 128, 8), (128, 25600, 160, 8)]


def _cfg(
    layers: int = 96,
    hidden: int = 12288,
    heads: int = 96,
    tp: int = 8,
    pp: int = 1,
    *,
    sp: bool = False,
    recompute: str = "none",
    micro: int = 1,
    seq: int = 2048,
    global_batch: int = 64,
    vp: int = 1,
    dist_opt: bool = False,
    dp: int = 1,
    dtype: str = "fp16",
) -> WorkloadConfig:
    model = ModelConfig(
        kind="gpt", layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=51200,
        ffn_hidden=4 * hidden, kv_heads=heads, attention="unfused",
    )  # fmt: skip
    par = ParallelConfig(
        tp=tp, pp=pp, dp=dp, virtual_stages=vp, sequence_parallel=sp, recompute=recompute,
        distributed_optimizer=dist_opt,
    )  # fmt: skip
    gpus = tp * pp * dp
    return WorkloadConfig(
        model, par, BatchConfig(global_batch, micro), ClusterConfig("A100", gpus, 1), dtype
    )


def _paper(cfg: WorkloadConfig, technique: str) -> Fraction:
    """Table 2 of the paper, per layer, as exact rationals."""
    m = cfg.model
    s, b, h, a, t = m.seq_len, cfg.batch.micro, m.hidden, m.heads, cfg.parallel.tp
    sbh = Fraction(s * b * h)
    return {
        "none": sbh * (34 + Fraction(5 * a * s, h)),
        "tp": sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t)),
        "tp+sp": sbh * (Fraction(34, t) + Fraction(5 * a * s, h * t)),
        "tp+selective": sbh * (10 + Fraction(24, t)),
        "tp+sp+selective": sbh * Fraction(34, t),
        "full": 2 * sbh,
    }[technique]


@pytest.mark.parametrize(("layers", "hidden", "heads", "tp"), PAPER_MODELS)
@pytest.mark.parametrize("micro", [1, 4])
def test_activations_per_layer_equal_table_2(
    layers: int, hidden: int, heads: int, tp: int, micro: int
) -> None:
    base = _cfg(layers, hidden, heads, tp, micro=micro)
    cases = {
        "none": replace(base, parallel=replace(base.parallel, tp=1)),
        "tp": base,
        "tp+sp": replace(base, parallel=replace(base.parallel, sequence_parallel=True)),
        "tp+selective": replace(base, parallel=replace(base.parallel, recompute="selective")),
        "tp+sp+selective": replace(
            base, parallel=replace(base.parallel, sequence_parallel=True, recompute="selective")
        ),
        "full": replace(base, parallel=replace(base.parallel, recompute="full")),
    }
    for technique, cfg in cases.items():
        assert layer_activation_bytes(cfg) == _paper(cfg, technique), technique


def test_sequence_parallel_full_recompute_keeps_the_sharded_input() -> None:
    cfg = _cfg(sp=True, recompute="full")
    assert layer_activation_bytes(cfg) == 2 * 2048 * 12288 // 8


@pytest.mark.parametrize(("pp", "vp", "m"), [(8, 1, 64), (8, 3, 64), (4, 2, 8), (16, 1, 4)])
def test_first_stage_holds_the_papers_in_flight_layers(pp: int, vp: int, m: int) -> None:
    # Section 4.2.3: the first stage of 1F1B stores p micro-batches of its L/p layers (L layers'
    # worth); interleaving multiplies this by 1 + (p - 1)/(p v). Fewer micro-batches than
    # stages hold only m. The embedding's dropout mask (sbh/t per micro-batch) is held for the
    # chunk-0 passes before the first backward: p for 1F1B; for interleaving the warm-up's
    # (p-1)*2 + (v-1)p + 1 passes visit chunk 0 in their first group of p and the last p - 1.
    cfg = _cfg(pp=pp, vp=vp, sp=True, recompute="selective", global_batch=m)
    per_layer = layer_activation_bytes(cfg)
    first = stage_memory(cfg, 0)
    s, b, h, t = 2048, 1, 12288, 8
    embedding_mask = s * b * h // t * (min(pp, m) if vp == 1 else 2 * pp - 1)
    layers_held = Fraction(96, pp) * min(pp, m) if vp == 1 else 96 * (1 + Fraction(pp - 1, pp * vp))
    assert first.activations == per_layer * layers_held + embedding_mask
    # The last stage of 1F1B holds one micro-batch (interleaved: its (v-1)p warm-up passes and
    # one more), plus the output layer's 4sbh/t (1 + V/h) for the one in its last chunk.
    last = stage_memory(cfg, pp - 1)
    output = Fraction(4 * s * b * h, t) * (1 + Fraction(51200, h))
    passes = 1 if vp == 1 else (vp - 1) * pp + 1
    assert last.activations == per_layer * 96 // (pp * vp) * passes + output


def test_bytes_per_parameter_follow_megatron() -> None:
    # Megatron-LM's distributed-optimizer guide: bf16 params with fp32 grads take 18 bytes per
    # parameter, 6 + 12/d with the distributed optimizer; fp16 with fp16 grads 20 and 4 + 16/d.
    bf16 = _cfg(dtype="bf16", dp=4, pp=2)
    n = stage_params(bf16, 1)
    plain = stage_memory(bf16, 1)
    assert plain.weights + plain.grads + plain.optimizer == 18 * n
    dist_cfg = replace(bf16, parallel=replace(bf16.parallel, distributed_optimizer=True))
    dist = stage_memory(dist_cfg, 1)
    assert (dist.weights, dist.grads, dist.optimizer) == (2 * n, 4 * n, -(-12 * n // 4))
    fp16 = replace(bf16, dtype="fp16")
    fs = stage_memory(fp16, 1)
    # The guide's 20 bytes: 16 held all step, 4 (the fp32 copy of the gradients) made by the
    # optimizer step, after the backward freed the activations.
    assert (fs.weights + fs.grads + fs.optimizer, fs.grad_copy) == (16 * n, 4 * n)
    assert fs.peak == 16 * n + max(fs.activations + fs.transient, 4 * n)
    fs_dist = stage_memory(replace(fp16, parallel=dist_cfg.parallel), 1)
    assert (fs_dist.optimizer, fs_dist.grad_copy) == (-(-12 * n // 4), -(-4 * n // 4))
    assert stage_memory(bf16, 1).grad_copy == 0  # fp32 gradients: nothing to copy
    full = stage_memory(bf16, 1, sharding="full")
    assert full.weights + full.grads + full.optimizer == pytest.approx(18 * n / 4, abs=3)
    with pytest.raises(ConfigError):
        stage_memory(bf16, 1, sharding="zero9")


def test_autocast_keeps_fp32_weights_gradients_and_adam_moments() -> None:
    """torch.autocast: fp32 weights (4 bytes), fp32 gradients (4) and Adam's two fp32 moments
    (8), 16 bytes per parameter, no 16-bit model copy beside an fp32 master copy."""
    cfg = _cfg(dtype="bf16", dp=4, pp=1)
    cfg = replace(cfg, autocast=True)
    n = stage_params(cfg, 0)
    mem = stage_memory(cfg, 0)
    assert (mem.weights, mem.grads, mem.optimizer) == (4 * n, 4 * n, 8 * n)


def test_the_fsdp_key_sets_the_sharding() -> None:
    """``[parallel] fsdp`` reaches the memory model, in PyTorch FSDP's mixed-precision
    accounting (fp32 shards of parameters and gradients, Adam's two moments: 16 bytes per
    parameter over the data-parallel ranks, no master copy): ``full_shard`` (ZeRO-3) holds
    two gathered layers; ``shard_grad_op`` (ZeRO-2) keeps the bf16 weights gathered through
    the backward and holds two layers' unsharded gradients."""
    base = _cfg(dtype="bf16", dp=8, tp=1)
    n, per_layer = stage_params(base, 0), layer_params(base.model, 1)
    dist = replace(base.parallel, distributed_optimizer=True)
    full_cfg = replace(base, parallel=replace(dist, fsdp="full_shard"))
    report = memory_report(full_cfg, 80 << 30)
    assert report.sharding == "full"
    full = report.stages[0]
    assert (full.weights, full.grads, full.optimizer) == (
        -(-4 * n // 8),
        -(-4 * n // 8),
        -(-8 * n // 8),
    )
    assert full.weights + full.grads + full.optimizer == pytest.approx(16 * n / 8, abs=3)
    plain = stage_memory(replace(base, parallel=dist), 0)
    assert full.transient - plain.transient == 2 * per_layer * (2 + 4)
    zero2_cfg = replace(base, parallel=replace(dist, fsdp="shard_grad_op"))
    zero2 = stage_memory(zero2_cfg, 0)
    assert memory_report(zero2_cfg, 80 << 30).sharding == "grad_op"
    assert (zero2.weights, zero2.grads, zero2.optimizer) == (
        2 * n + -(-4 * n // 8),
        -(-4 * n // 8),
        -(-8 * n // 8),
    )
    assert zero2.transient - plain.transient == 2 * per_layer * 4


def test_parameter_count_of_gpt3_175b() -> None:
    cfg = _cfg(tp=1)
    total = stage_params(cfg, 0)
    # 96 layers of 12 h^2 + 13 h, embeddings (51200 + 2048) h: 174.6 billion.
    assert total == 96 * (12 * 12288**2 + 13 * 12288) + (51200 + 2048) * 12288 + 2 * 12288
    # Tensor parallelism splits the matrices, not the norms and row-parallel biases.
    assert layer_params(cfg.model, 8) * 8 > layer_params(cfg.model, 1)


def test_models_without_linear_biases() -> None:
    base = _cfg(tp=1)
    h = 12288
    no_bias = replace(base, model=replace(base.model, add_bias_linear=False))
    # Per layer 13 h parameters are biases and norms: QKV 3 h, proj h, FC1 4 h, FC2 h, and
    # two LayerNorms of 2 h each; without linear biases only the norms' 4 h remain.
    assert layer_params(no_bias.model, 1) == 12 * h * h + 4 * h
    qkv_only = replace(no_bias, model=replace(no_bias.model, add_qkv_bias=True))
    assert layer_params(qkv_only.model, 1) == 12 * h * h + 4 * h + 3 * h
    # With tensor parallelism the QKV bias is split with its matrix.
    assert layer_params(qkv_only.model, 8) == 12 * h * h // 8 + 4 * h + 3 * h // 8


def test_verdict_uses_the_margin_and_the_reserved_memory() -> None:
    cfg = _cfg(sp=True, recompute="selective", pp=8, vp=3, global_batch=64)
    rep = memory_report(cfg, 80 * 10**9)
    peak = rep.peak.peak
    assert rep.needed_bytes == round(peak * (1 + ALLOCATOR_MARGIN)) + RESERVED_BYTES
    assert rep.fits  # the paper trained this layout on 80 GB A100s
    assert not memory_report(cfg, rep.needed_bytes - 1).fits
    out = rep.to_json()
    assert out["peak_stage"] == rep.peak.stage and len(out["stages"]) == 8  # type: ignore[arg-type]
    # Without recomputation the paper's 175B on tp 8, pp 8 does not fit: it needed selective.
    none = replace(cfg, parallel=replace(cfg.parallel, recompute="none"))
    assert not memory_report(none, 80 * 10**9).fits


@pytest.mark.parametrize(
    ("pp", "vp", "m"), [(4, 2, 8), (4, 2, 4), (8, 3, 64), (2, 4, 6), (3, 2, 9)]
)
def test_in_flight_passes_follow_the_schedule(pp: int, vp: int, m: int) -> None:
    cfg = _cfg(layers=24 * vp, pp=pp, vp=vp, global_batch=m)
    for stage in range(pp):
        held = [0] * vp
        for step in schedule(stage, pp, m, vp):
            if not step.forward:
                break
            held[step.chunk] += 1
        assert inflight(cfg, stage) == held, stage


@pytest.mark.parametrize(("pp", "vp", "m", "n"), [(2, 2, 5, 3), (4, 3, 12, 6), (3, 2, 7, 7)])
def test_in_flight_passes_follow_the_schedule_with_groups(pp: int, vp: int, m: int, n: int) -> None:
    base = _cfg(layers=24 * vp, pp=pp, vp=vp, global_batch=m)
    cfg = replace(base, parallel=replace(base.parallel, microbatch_group_size_per_vp_stage=n))
    for stage in range(pp):
        held = [0] * vp
        for step in schedule(stage, pp, m, vp, n):
            if not step.forward:
                break
            held[step.chunk] += 1
        assert inflight(cfg, stage) == held, stage


def test_in_flight_passes_of_a_deep_interleaving_without_its_table() -> None:
    # 1,250 chunks of 8,192 micro-batches: the schedule's table has 10 M entries, which `plan`
    # built for every stage of every layout it screened (minutes for one config). Stage 0 warms
    # up (8 - 1) * 2 + (1,250 - 1) * 8 = 10,006 forwards and holds the next: the first group of
    # 8 micro-batches through all 1,250 chunks (10,000 passes), then 7 of the next group's.
    cfg = _cfg(layers=10_000, pp=8, vp=1250, global_batch=8192)
    assert inflight(cfg, 0) == [15] + [8] * 1249


def test_contiguous_micro_batches_per_chunk_raise_the_in_flight_count() -> None:
    # pp 2, v 2, m 5, N 3 (Megatron-Core's example): stage 0 warms up (2 - 1) * 2 + 3 = 5
    # forwards and holds the 6th too (micro-batches 0-2 of both chunks); stage 1 warms up 3
    # and holds micro-batches 0-2 of chunk 0 and 0 of chunk 1.
    base = _cfg(layers=48, pp=2, vp=2, global_batch=5)
    cfg = replace(base, parallel=replace(base.parallel, microbatch_group_size_per_vp_stage=3))
    assert inflight(cfg, 0) == [3, 3]
    assert inflight(cfg, 1) == [3, 1]
    # m = 6: the default N = p = 2 holds (2 - 1) * 2 + 2 + 1 = 5 passes, N = m = 6 nine.
    base = _cfg(layers=48, pp=2, vp=2, global_batch=6)
    full = replace(base, parallel=replace(base.parallel, microbatch_group_size_per_vp_stage=6))
    assert inflight(base, 0) == [3, 2]
    assert inflight(full, 0) == [6, 3]
    per_layer = 12 * layer_activation_bytes(base)  # 12 layers per chunk
    assert stage_memory(full, 0).activations - stage_memory(base, 0).activations == (
        per_layer * 4 + 2048 * 12288 * 3  # and chunk 0's embedding dropout mask, 3 more times
    )


def test_uneven_interleaved_chunks_hold_their_own_layers() -> None:
    # 30 layers on pp 4, vp 2 with the embedding and the loss counted as layers: 32 slots,
    # 4 per chunk, so stage 0 holds chunks of 3 and 4 layers, stage 3 of 4 and 3. With m = 8
    # stage 0's warm-up is (p - 1) * 2 + (v - 1) * p = 10 forwards, and its peak (the 11th)
    # holds micro-batches 0-3 and 8-10 of chunk 0 (7) and 0-3 of chunk 1 (4).
    even = _cfg(layers=32, pp=4, vp=2, sp=True, recompute="selective", global_batch=8)
    counted = replace(
        even.parallel,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    cfg = replace(even, model=replace(even.model, layers=30), parallel=counted)
    assert inflight(cfg, 0) == [7, 4]
    per_layer = layer_activation_bytes(cfg)
    mask = 2048 * 12288 // 8 * 7  # the embedding's dropout mask, per chunk-0 micro-batch
    assert stage_memory(cfg, 0).activations == per_layer * (3 * 7 + 4 * 4) + mask
    assert stage_memory(even, 0).activations == per_layer * (4 * 7 + 4 * 4) + mask
    assert stage_params(cfg, 0) == stage_params(even, 0) - layer_params(cfg.model, 8)
    assert stage_params(cfg, 1) == stage_params(even, 1) == 8 * layer_params(cfg.model, 8)


def test_without_dropout_no_masks_are_kept() -> None:
    cfg = _cfg(sp=True)  # unfused attention, as in the paper
    m, t = cfg.model, cfg.parallel.tp
    s, b, h, a = m.seq_len, cfg.batch.micro, m.hidden, m.heads
    no_hidden = replace(cfg, model=replace(m, hidden_dropout=0.0))
    # Two 1-byte masks per layer, split over t by sequence parallelism.
    assert layer_activation_bytes(cfg) - layer_activation_bytes(no_hidden) == 2 * s * b * h // t
    no_attention = replace(cfg, model=replace(m, attention_dropout=0.0))
    # The attention probabilities' mask (1 byte) and dropped copy (2 bytes), s x s per head.
    assert layer_activation_bytes(cfg) - layer_activation_bytes(no_attention) == (
        3 * a * s * s * b // t
    )
