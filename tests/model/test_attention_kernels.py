"""The measured attention kernel tables: look-ups, interpolation, clamping and what is derived,
against numbers read off the FlashAttention-3 paper's figures by hand."""

from __future__ import annotations

import math

import pytest

from echo_view.model.attention_kernels import (
    KERNELS,
    MEASURED,
    RATES,
    RATES_FWD_BWD,
    SEQ_LENS,
    STAND_IN,
    efficiency,
    rate_tflops,
    resolve_kernel,
)


def _rate(
    kernel: str, *, backward: bool = False, causal: bool = True, d: int = 128, s: float = 8192
):
    return rate_tflops("hopper", kernel, backward=backward, causal=causal, head_dim=d, seq=s)


def test_measured_points_come_back_as_published() -> None:
    # FA3 paper Fig. 5: causal forward, head dim 128, 8k: FA3 602, cuDNN 529, FA2 333 TFLOP/s;
    # non-causal forward head dim 64 at 512: Triton 340; Fig. 6 backward head dim 64 at 16k:
    # FA3 474.
    assert _rate("fa3") == 602
    assert _rate("cudnn") == 529
    assert _rate("fa2") == 333
    assert _rate("triton", causal=False, d=64, s=512) == 340
    assert _rate("fa3", backward=True, causal=False, d=64, s=16384) == 474


def test_sequence_is_interpolated_in_log_and_clamped_at_the_ends() -> None:
    # Half-way between 2k and 4k in log2: the mean of 521 and 579 (FA3, causal, head dim 128).
    assert _rate("fa3", s=math.sqrt(2048 * 4096)) == pytest.approx((521 + 579) / 2)
    # A quarter of the way from 4k to 8k: 579 + (602 - 579) / 4.
    assert _rate("fa3", s=4096 * 2**0.25) == pytest.approx(579 + 23 / 4)
    assert _rate("fa3", s=65536) == 616  # the 16k value
    assert _rate("fa3", s=128) == 292  # the 512 value


def test_head_dim_is_interpolated_linearly_and_clamped() -> None:
    # 96 is half-way between 64 (496) and 128 (646): non-causal forward FA3 at 8k.
    assert _rate("fa3", causal=False, d=96) == pytest.approx((496 + 646) / 2)
    assert _rate("fa3", causal=False, d=512) == 746  # the head dim 256 value
    assert _rate("fa3", causal=False, d=32) == 496  # the head dim 64 value
    # Triton is measured at head dims 64 and 128 only: 256 takes 128's 392.
    assert _rate("triton", causal=False, d=256) == 392


def test_causal_backward_is_the_non_causal_backward_times_the_forward_mask_ratio() -> None:
    # FA3 head dim 128 at 8k: backward 559 (non-causal) x 602 / 646 (causal / non-causal fwd).
    assert _rate("fa3", backward=True) == pytest.approx(559 * 602 / 646)
    # Head dim 256 has no backward figure: the backward clamps to head dim 128, the mask ratio
    # is head dim 256's forward (628 / 746).
    assert _rate("fa3", backward=True, d=256) == pytest.approx(559 * 628 / 746)


def test_triton_backward_stands_in_as_flashattention2() -> None:
    assert _rate("triton", backward=True, causal=False) == 318
    assert _rate("triton", backward=True) == pytest.approx(318 * 333 / 370)


def test_forward_backward_series_time_both_passes_at_the_measured_rate() -> None:
    # FA2 paper Fig. 7 (H100): FlashAttention 1.x forward + backward, causal, head dim 128,
    # 2k: 108 TFLOP/s. Both passes run at 108, so forward (F) + backward (2.5 F) take 3.5 F /
    # 108, the time the figure measured.
    fwd = _rate("fa1", s=2048)
    bwd = _rate("fa1", backward=True, s=2048)
    assert fwd == bwd == 108
    f = 1e12
    assert f / fwd + 2.5 * f / bwd == pytest.approx(3.5 * f / 108)
    # Fig. 4 (A100): causal head dim 128 at 8k, 80; non-causal head dim 64 at 512, 91.
    assert rate_tflops("ampere", "fa1", backward=True, causal=True, head_dim=128, seq=8192) == 80
    assert rate_tflops("ampere", "fa1", backward=False, causal=False, head_dim=64, seq=512) == 91


def test_flash_attn_triton_stands_in_as_flashattention_1() -> None:
    for arch in ("hopper", "ampere"):
        assert STAND_IN[(arch, "flash_attn_triton")] == "fa1"
        for backward in (False, True):
            got = rate_tflops(
                arch, "flash_attn_triton", backward=backward, causal=True, head_dim=128, seq=4096
            )
            assert got == {"hopper": 126, "ampere": 76}[arch]
    # Its Hopper efficiency: 126 of the H100's 989.4 TFLOP/s.
    eff = efficiency(
        "hopper", "flash_attn_triton", backward=False, causal=True, head_dim=128, seq=4096
    )
    assert eff == pytest.approx(126 / 989.4)


def test_unmeasured_architecture_has_no_rate() -> None:
    assert rate_tflops("ampere", "fa2", backward=False, causal=True, head_dim=128, seq=2048) is None
    assert (
        efficiency("blackwell", "cudnn", backward=True, causal=True, head_dim=128, seq=2048) is None
    )


def test_efficiency_is_the_rate_over_the_measuring_gpus_peak() -> None:
    eff = efficiency("hopper", "fa3", backward=False, causal=True, head_dim=128, seq=8192)
    assert eff == pytest.approx(602 / 989.4)
    assert MEASURED["hopper"].peak_tflops == 989.4


def test_auto_is_transformer_engines_choice() -> None:
    assert resolve_kernel("auto", "hopper") == "cudnn"
    assert resolve_kernel("auto", "blackwell") == "cudnn"
    assert resolve_kernel("auto", "ampere") == "fa2"
    assert resolve_kernel("fa3", "ampere") == "fa3"


def test_every_series_is_complete_and_every_kernel_has_a_forward() -> None:
    for table in (RATES, RATES_FWD_BWD):
        for key, by_dim in table.items():
            for d, series in by_dim.items():
                assert len(series) == len(SEQ_LENS), (key, d)
                assert all(0 < r < MEASURED[key[0]].peak_tflops for r in series), (key, d)
    for kernel in KERNELS[1:]:
        measured = STAND_IN.get(("hopper", kernel), kernel)
        for causal in (False, True):
            assert ("hopper", measured, False, causal) in RATES or (
                "hopper",
                measured,
                causal,
            ) in RATES_FWD_BWD
            assert _rate(kernel, causal=causal) is not None
            assert _rate(kernel, backward=True, causal=causal) is not None
