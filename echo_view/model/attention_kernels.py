"""Measured speed of fused attention kernels, by GPU architecture, kernel, pass, mask, head
dimension and sequence length: the data behind the simulator's attention times.

Rates are TFLOP/s as the papers count them: forward ``4 * seq^2 * head_dim * heads * batch``,
halved with a causal mask; backward 2.5x the forward (the same convention as
:func:`echo_view.model.aten_ops.attention_flops`). Each series is measured at sequence lengths
:data:`SEQ_LENS` with ``batch * seq = 16k`` tokens and hidden size 2,048 (so 32 heads of 64, 16
of 128, 8 of 256), fp16/bf16.

Hopper (H100 80GB SXM5, 989.4 TFLOP/s dense bf16) — Shah et al. 2024, "FlashAttention-3"
(arXiv 2407.08608):

=====================  ==========================================================
Figure                 Series (key here)
=====================  ==========================================================
Fig. 5 (forward)       non-causal and causal, head dim 64 / 128 / 256:
                       FlashAttention-2 (``fa2``), Triton (``triton``, head dim 64
                       and 128 only), cuDNN (``cudnn``), FlashAttention-3 (``fa3``)
Fig. 6 (backward)      non-causal, head dim 64 / 128: ``fa2``, ``cudnn``, ``fa3``
=====================  ==========================================================

Forward + backward (one time for both passes), FlashAttention-2 paper — Dao 2023,
"FlashAttention-2" (arXiv 2307.08691), same batch, hidden size and FLOP count as above:

=====================  ==========================================================
Figure                 Series (key here)
=====================  ==========================================================
Fig. 7 (H100 80GB      non-causal and causal, head dim 64 / 128: FlashAttention
SXM5)                  (``fa1``, flash-attn 1.x)
Fig. 4 (A100 80GB      non-causal and causal, head dim 64 / 128: FlashAttention
SXM4, 312 TFLOP/s)     (``fa1``)
=====================  ==========================================================

``flash_attn_triton`` is ``flash_attn/flash_attn_triton.py`` of the flash-attention repository
(2022) on the pre-MLIR Triton compiler: the kernel MosaicML llm-foundry vendored and ran as
``attn_impl: triton`` in 2023 (``llmfoundry/models/layers/flash_attn_triton.py``). No figure
measures it; FlashAttention 1.x stands in for it (:data:`STAND_IN`).

A kernel measured forward + backward only (:data:`RATES_FWD_BWD`) runs both passes at that rate:
the two passes' sum, which is what was measured, comes out exact.

What the figures do not give is derived, never fitted (see :func:`efficiency`): a causal
backward is the non-causal backward times the same kernel's causal/non-causal forward ratio at
that head dimension and length (the mask skips the same blocks in both passes); head dimensions
outside a series' measured ones take the nearest measured one; the Triton kernel's backward,
not in Fig. 6, is FlashAttention-2's (:data:`BACKWARD_STAND_IN`); ``flash_attn_triton``
is FlashAttention 1.x's (:data:`STAND_IN`). The papers' "standard
attention" is the unfused path, which the tracer records as its GEMMs and softmax
(``model.attention = "unfused"``), so it has no series here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

#: ``[model] attention_kernel`` values: ``auto`` (:func:`resolve_kernel`) or a kernel of the
#: tables below.
KERNELS: Final = ("auto", "fa1", "fa2", "fa3", "cudnn", "triton", "flash_attn_triton")
#: Sequence lengths of every series.
SEQ_LENS: Final = (512, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True, slots=True)
class Measured:
    """The GPU a set of series was measured on and its dense fp16/bf16 peak (TFLOP/s)."""

    gpu: str
    peak_tflops: float
    source: str


MEASURED: Final = MappingProxyType(
    {
        "hopper": Measured(
            "H100-SXM5-80GB",
            989.4,
            "Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), Fig. 5 and 6; "
            "Dao 2023, FlashAttention-2 (arXiv 2307.08691), Fig. 7",
        ),
        "ampere": Measured(
            "A100-SXM4-80GB", 312.0, "Dao 2023, FlashAttention-2 (arXiv 2307.08691), Fig. 4"
        ),
    }
)

# (arch, kernel, backward, causal) -> {head_dim: TFLOP/s at SEQ_LENS}
_Series = dict[int, tuple[float, ...]]
RATES: Final[MappingProxyType[tuple[str, str, bool, bool], _Series]] = MappingProxyType(
    {
        # FlashAttention-3 paper, Fig. 5: forward, without causal mask.
        ("hopper", "fa2", False, False): {
            64: (282, 306, 318, 321, 322, 324),
            128: (309, 350, 362, 368, 370, 370),
            256: (275, 313, 321, 323, 324, 326),
        },
        ("hopper", "triton", False, False): {
            64: (340, 382, 396, 400, 401, 403),
            128: (323, 372, 389, 389, 392, 395),
        },
        ("hopper", "cudnn", False, False): {
            64: (335, 373, 395, 408, 412, 413),
            128: (497, 574, 617, 609, 600, 595),
            256: (470, 546, 580, 581, 580, 581),
        },
        ("hopper", "fa3", False, False): {
            64: (333, 392, 460, 476, 496, 497),
            128: (467, 565, 625, 638, 646, 648),
            256: (482, 639, 707, 736, 746, 756),
        },
        # Fig. 5: forward, with causal mask.
        ("hopper", "fa2", False, True): {
            64: (180, 229, 262, 284, 295, 299),
            128: (191, 260, 298, 319, 333, 335),
            256: (208, 251, 278, 293, 297, 298),
        },
        ("hopper", "triton", False, True): {
            64: (152, 288, 342, 363, 376, 363),
            128: (146, 273, 323, 353, 369, 378),
        },
        ("hopper", "cudnn", False, True): {
            64: (225, 288, 334, 363, 379, 388),
            128: (315, 410, 484, 518, 529, 539),
            256: (308, 391, 450, 483, 497, 509),
        },
        ("hopper", "fa3", False, True): {
            64: (197, 265, 371, 420, 460, 473),
            128: (292, 423, 521, 579, 602, 616),
            256: (286, 427, 537, 612, 628, 642),
        },
        # Fig. 6: backward, without causal mask.
        ("hopper", "fa2", True, False): {
            64: (198, 238, 264, 279, 287, 291),
            128: (214, 260, 291, 310, 318, 322),
        },
        ("hopper", "cudnn", True, False): {
            64: (266, 348, 395, 417, 432, 433),
            128: (305, 408, 465, 499, 518, 516),
        },
        ("hopper", "fa3", True, False): {
            64: (272, 363, 422, 453, 472, 474),
            128: (316, 424, 501, 542, 559, 561),
        },
    }
)
# (arch, kernel, causal) -> {head_dim: TFLOP/s at SEQ_LENS}, forward + backward together.
RATES_FWD_BWD: Final[MappingProxyType[tuple[str, str, bool], _Series]] = MappingProxyType(
    {
        # FlashAttention-2 paper, Fig. 7: H100 SXM5, FlashAttention (1.x).
        ("hopper", "fa1", False): {
            64: (157, 159, 161, 161, 166, 168),
            128: (127, 127, 128, 131, 137, 139),
        },
        ("hopper", "fa1", True): {
            64: (104, 123, 136, 138, 149, 156),
            128: (98, 109, 108, 126, 135, 137),
        },
        # Fig. 4: A100 SXM4, FlashAttention (1.x).
        ("ampere", "fa1", False): {
            64: (91, 92, 104, 108, 110, 110),
            128: (76, 72, 76, 80, 82, 83),
        },
        ("ampere", "fa1", True): {
            64: (58, 70, 77, 87, 92, 97),
            128: (55, 62, 69, 76, 80, 83),
        },
    }
)
#: Kernels not measured on an architecture, and the kernel that stands in. The 2022 Triton
#: FlashAttention was written and tested against FlashAttention 1.x on A100: its source says its
#: forward is "generally faster" and its backward "generally slower" than that CUDA kernel's,
#: forward + backward "slightly slower" (``flash_attn_triton.py``). The pre-MLIR Triton that
#: compiles it predates Hopper's asynchronous tensor-core instructions, which FlashAttention
#: 1.x does not use either, so FlashAttention 1.x's measured speed stands in on both
#: architectures — if anything a little fast.
STAND_IN: Final = MappingProxyType(
    {("ampere", "flash_attn_triton"): "fa1", ("hopper", "flash_attn_triton"): "fa1"}
)
#: Kernels whose backward is not measured on an architecture, and the kernel that stands in:
#: the FlashAttention-3 paper times Triton's forward only; FlashAttention-2 is the same
#: algorithm written without Hopper's asynchronous instructions.
BACKWARD_STAND_IN: Final = MappingProxyType({("hopper", "triton"): "fa2"})


def resolve_kernel(kernel: str, arch: str) -> str:
    """The kernel ``auto`` stands for on a GPU architecture: Transformer Engine's choice, the
    attention of Megatron-Core. TE prefers its cuDNN fused attention over FlashAttention on
    Hopper and later ("Disabling FlashAttention to give FusedAttention preference on Hopper+",
    ``get_attention_backend`` in transformer_engine/pytorch/attention/dot_product_attention/
    utils.py) and runs FlashAttention(-2) before Hopper."""
    if kernel != "auto":
        return kernel
    return "cudnn" if arch in ("hopper", "blackwell") else "fa2"


def _interp_seq(series: tuple[float, ...], seq: float) -> float:
    """``series`` at ``seq``, linear in log2(seq) between :data:`SEQ_LENS`, clamped at the ends."""
    x = min(max(math.log2(seq), math.log2(SEQ_LENS[0])), math.log2(SEQ_LENS[-1]))
    pos = x - math.log2(SEQ_LENS[0])
    i = min(int(pos), len(SEQ_LENS) - 2)
    frac = pos - i
    return series[i] * (1.0 - frac) + series[i + 1] * frac


def _rate(by_dim: _Series, head_dim: int, seq: float) -> float:
    """TFLOP/s of one series at ``head_dim`` (linear between measured head dims, clamped)."""
    dims = sorted(by_dim)
    d = min(max(head_dim, dims[0]), dims[-1])
    hi = next(x for x in dims if x >= d)
    lo = max(x for x in dims if x <= d)
    r_lo, r_hi = _interp_seq(by_dim[lo], seq), _interp_seq(by_dim[hi], seq)
    if hi == lo:
        return r_lo
    return r_lo + (r_hi - r_lo) * (d - lo) / (hi - lo)


def rate_tflops(
    arch: str, kernel: str, *, backward: bool, causal: bool, head_dim: int, seq: float
) -> float | None:
    """Measured TFLOP/s of ``kernel`` (not ``auto``) on ``arch`` for one pass, or ``None`` when
    the architecture or the kernel has no measured series (see the module docstring for what
    is derived)."""
    kernel = STAND_IN.get((arch, kernel), kernel)
    both = RATES_FWD_BWD.get((arch, kernel, causal))
    if both is not None:
        return _rate(both, head_dim, seq)
    if backward:
        kernel = BACKWARD_STAND_IN.get((arch, kernel), kernel)
    exact = RATES.get((arch, kernel, backward, causal))
    if exact is not None:
        return _rate(exact, head_dim, seq)
    if not (backward and causal):
        return None
    bwd = RATES.get((arch, kernel, True, False))
    fwd_c = RATES.get((arch, kernel, False, True))
    fwd_n = RATES.get((arch, kernel, False, False))
    if bwd is None or fwd_c is None or fwd_n is None:
        return None
    mask = _rate(fwd_c, head_dim, seq) / _rate(fwd_n, head_dim, seq)
    return _rate(bwd, head_dim, seq) * mask


def efficiency(
    arch: str, kernel: str, *, backward: bool, causal: bool, head_dim: int, seq: float
) -> float | None:
    """:func:`rate_tflops` as a fraction of the measuring GPU's dense peak (a GPU of the same
    architecture with another peak runs at that fraction of its own), or ``None``."""
    rate = rate_tflops(arch, kernel, backward=backward, causal=causal, head_dim=head_dim, seq=seq)
    return None if rate is None else rate / MEASURED[arch].peak_tflops
