"""Tokens/s per GPU and MFU (PaLM's 6N + 12LHQT model FLOPs), against numbers worked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from echo_view.model.config import (
    BatchConfig,
    ClusterConfig,
    ModelConfig,
    ParallelConfig,
    WorkloadConfig,
)
from echo_view.sim.throughput import matmul_params, model_flops_per_token, throughput


def _model(**kw: int) -> ModelConfig:
    shape = {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 128, "vocab": 1000}
    shape |= {"ffn_hidden": 256, "kv_heads": 4} | kw
    return ModelConfig(kind="gpt", **shape)


def test_small_model_by_hand() -> None:
    # per layer: Q and output 2*64*64 = 8192, K and V 2*64*(4*16) = 8192, MLP 2*64*256 = 32768;
    # N = 2 * 49152 + output layer 64*1000 = 162,304; attention 12*2*4*16*128 = 196,608.
    assert matmul_params(_model()) == 162_304
    assert model_flops_per_token(_model()) == 6 * 162_304 + 196_608 == 1_170_432
    # GQA with one K/V head: K and V shrink to 2*64*16 = 2048 per layer, attention FLOPs stay.
    assert matmul_params(_model(kv_heads=1)) == 162_304 - 2 * (8192 - 2048)
    # SwiGLU adds a gate projection of 64*256 per layer.
    assert matmul_params(replace(_model(), activation="swiglu")) == 162_304 + 2 * 64 * 256


def test_gpt3_175b_is_175_billion_parameters() -> None:
    gpt3 = _model(
        layers=96, hidden=12288, heads=96, kv_heads=96, seq_len=2048, vocab=51200, ffn_hidden=49152
    )
    # 96 * 12 * 12288^2 + 12288 * 51200; attention 12 * 96 * 96 * 128 * 2048.
    assert matmul_params(gpt3) == 174_575_321_088
    assert model_flops_per_token(gpt3) == 1_076_442_955_776


def test_throughput_and_mfu() -> None:
    cfg = WorkloadConfig(
        model=_model(),
        parallel=ParallelConfig(tp=1, pp=1, dp=2),
        batch=BatchConfig(global_batch=8, micro=1),
        cluster=ClusterConfig(gpu="H100", gpus_per_node=2, nodes=1),
        dtype="bf16",
    )
    t = throughput(cfg, step_s=10.0, peak_flops_per_gpu=1e12)
    # 8 sequences * 128 tokens = 1024 tokens in 10 s on 2 GPUs = 51.2 tokens/s per GPU;
    # 51.2 * 1,170,432 FLOP/token = 59,926,118.4 FLOP/s of 1e12.
    assert t.tokens_per_step == 1024
    assert t.tokens_per_s_per_gpu == pytest.approx(51.2)
    assert t.mfu == pytest.approx(5.99261184e-5)
    assert t.to_json()["mfu"] == t.mfu
