"""The aten-op catalogue: GEMM dimensions from traced shapes, FLOP rules, op classes."""

from __future__ import annotations

import pytest

from echo_view.model.aten_ops import GemmDims, attention_flops, gemm_dims, op_class
from echo_view.model.graph import OpClass, parse_shapes_text, shapes_text


@pytest.mark.parametrize(
    ("name", "shapes", "dims"),
    [
        ("aten::mm", "[16384,4096]x[4096,1024]", (1, 16384, 1024, 4096)),
        ("aten::addmm", "[1536]x[16384,4096]x[4096,1536]", (1, 16384, 1536, 4096)),
        ("aten::bmm", "[12,2048,128]x[12,128,2048]", (12, 2048, 2048, 128)),
        ("aten::baddbmm", "[12,2048,2048]x[12,2048,128]x[12,128,2048]", (12, 2048, 2048, 128)),
        ("aten::addbmm", "[64,32]x[4,64,16]x[4,16,32]", (1, 64, 32, 64)),
        ("aten::linear", "[2,8,512]x[1024,512]", (1, 16, 1024, 512)),
        ("aten::matmul", "[8,64,32]x[32,16]", (1, 512, 16, 32)),
    ],
)
def test_dims_of_traced_products(name: str, shapes: str, dims: tuple[int, ...]) -> None:
    shape_list = parse_shapes_text(shapes)
    assert shape_list is not None
    got = gemm_dims(name, shape_list)
    assert got is not None and (got.batch, got.m, got.n, got.k) == dims


@pytest.mark.parametrize(
    ("name", "shapes"),
    [("aten::add", "[4,4]x[4,4]"), ("aten::mm", "[4096]"), ("aten::mm", "[1,x]x[2,3]"), ("", "")],
)
def test_dims_unknown(name: str, shapes: str) -> None:
    shape_list = parse_shapes_text(shapes)
    assert shape_list is None or gemm_dims(name, shape_list) is None


def test_shapes_text_round_trips() -> None:
    shapes = [[1536], [16384, 4096], [4096, 1536], []]
    assert shapes_text(shapes) == "[1536]x[16384,4096]x[4096,1536]x[]"
    assert parse_shapes_text(shapes_text(shapes)) == [(1536,), (16384, 4096), (4096, 1536), ()]


def test_flops_of_products_and_attention_by_hand() -> None:
    assert GemmDims(1, 512, 256, 1024, bias=True).flops == 2.0 * 512 * 256 * 1024 + 512 * 256
    assert GemmDims(8, 64, 128, 32).out_numel == 8 * 64 * 128
    # b=2, h=16, s=2048, d=128: QK^T and PV are 2*b*h*s*s*d each; causal halves them.
    full = 2 * 2 * 2.0 * 16 * 2048 * 2048 * 128
    assert attention_flops(2, 16, 2048, 2048, 128, causal=False, backward=False) == full
    assert attention_flops(2, 16, 2048, 2048, 128, causal=True, backward=False) == full / 2
    assert attention_flops(2, 16, 2048, 2048, 128, causal=True, backward=True) == full / 2 * 2.5


def test_op_classes() -> None:
    assert op_class("addbmm") == OpClass.GEMM
    assert op_class("native_layer_norm") == OpClass.NORMALIZATION
    assert op_class("_foreach_mul_") == OpClass.OPTIMIZER
    assert op_class("gelu") == OpClass.ELEMENTWISE
