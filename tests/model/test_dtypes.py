"""The element-type catalogue: every spelling the inputs use, one canonical name and size."""

from __future__ import annotations

import pytest

from echo_view.model.dtypes import DTYPES, canonical_dtype, dtype_bytes, dtype_info, short_dtype

# (spelling as an input writes it, canonical name, bytes, cost-model name), from real inputs:
# Kineto ``Input type`` (``float``, ``c10::BFloat16``, ``long int``), record_param_comms ``dtype``
# (``Float``, ``BFloat16``), NCCL's ``ncclDataType_t`` names, configs (``bf16``), the tracer
# (``torch.bfloat16``) and Transformer Engine's FP8 types.
SPELLINGS = [
    ("float", "float32", 4, "fp32"),
    ("Float", "float32", 4, "fp32"),
    ("c10::Half", "float16", 2, "fp16"),
    ("c10::BFloat16", "bfloat16", 2, "bf16"),
    ("BFloat16", "bfloat16", 2, "bf16"),
    ("torch.bfloat16", "bfloat16", 2, "bf16"),
    ("bf16", "bfloat16", 2, "bf16"),
    ("double", "float64", 8, "fp64"),
    ("long int", "int64", 8, "int64"),
    ("long  int", "int64", 8, "int64"),
    ("int64_t", "int64", 8, "int64"),
    ("int", "int32", 4, "int32"),
    ("unsigned int", "uint32", 4, "uint32"),
    ("short int", "int16", 2, "int16"),
    ("signed char", "int8", 1, "int8"),
    ("unsigned char", "uint8", 1, "uint8"),
    ("bool", "bool", 1, "bool"),
    ("c10::Float8_e4m3fn", "float8_e4m3", 1, "fp8"),
    ("c10::Float8_e5m2fnuz", "float8_e5m2", 1, "fp8"),
    ("fp8", "float8_e4m3", 1, "fp8"),
    ("ComplexFloat", "complex64", 8, "complex64"),
]


@pytest.mark.parametrize(("spelling", "name", "size", "short"), SPELLINGS)
def test_every_spelling_has_one_name_and_size(
    spelling: str, name: str, size: int, short: str
) -> None:
    assert canonical_dtype(spelling) == name
    assert dtype_bytes(spelling) == size
    assert short_dtype(spelling) == short


def test_unknown_names_are_kept_for_display_but_have_no_size() -> None:
    assert canonical_dtype(" Quantized_Int4 ") == "quantized_int4"
    assert dtype_bytes("Quantized_Int4") is None
    assert short_dtype("Quantized_Int4") is None
    for empty in ("", "   ", None, 3, ["float"]):
        assert canonical_dtype(empty) is None
        assert dtype_info(empty) is None


def test_short_and_canonical_names_round_trip() -> None:
    for d in DTYPES:
        assert canonical_dtype(d.name) == d.name
        assert dtype_bytes(d.short) == d.size
