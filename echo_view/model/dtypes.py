"""The element types echo-view knows: one catalogue for every spelling and size.

Each input names element types its own way: PyTorch's profiler writes ``float``, ``c10::BFloat16``
or ``long int`` in ``Input type``; NCCL and ``record_param_comms`` write ``Float``, ``int8_t`` or
``float8_e4m3fn``; configs and the cost model use short names (``fp32``, ``bf16``, ``fp8``); the
tracer records ``torch.bfloat16``. :func:`canonical_dtype` turns any of them into one canonical
name (PyTorch's: ``float32``, ``bfloat16``, ``float8_e4m3``), :func:`dtype_bytes` gives its size
and :func:`short_dtype` the cost model's name. Adding a type is one row of :data:`DTYPES`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """One element type: canonical name, bytes per element, the cost model's short name, and
    every other spelling an input may use (lower case, without a ``c10::``/``at::``/``torch.``
    prefix)."""

    name: str
    size: int
    short: str
    aliases: tuple[str, ...] = ()


DTYPES: tuple[DType, ...] = (
    DType("float32", 4, "fp32", ("float", "fp32", "f32")),
    DType("float16", 2, "fp16", ("half", "fp16", "f16")),
    DType("bfloat16", 2, "bf16", ("bf16",)),
    DType("float64", 8, "fp64", ("double", "fp64", "f64")),
    DType("int64", 8, "int64", ("long", "long int", "long long", "int64_t", "i64")),
    DType("uint64", 8, "uint64", ("unsigned long", "uint64_t", "u64")),
    DType("int32", 4, "int32", ("int", "int32_t", "i32")),
    DType("uint32", 4, "uint32", ("unsigned int", "uint32_t", "u32")),
    DType("int16", 2, "int16", ("short", "short int", "int16_t", "i16")),
    DType("int8", 1, "int8", ("char", "signed char", "int8_t", "i8")),
    DType("uint8", 1, "uint8", ("byte", "unsigned char", "uint8_t", "u8")),
    DType("bool", 1, "bool"),
    DType("complex64", 8, "complex64", ("complexfloat",)),
    DType("complex128", 16, "complex128", ("complexdouble",)),
    # FP8: Transformer Engine's two formats; the ``fnuz`` variants are AMD's encodings of them.
    DType(
        "float8_e4m3",
        1,
        "fp8",
        ("float8_e4m3fn", "float8_e4m3fnuz", "f8e4m3", "fp8_e4m3", "fp8"),
    ),
    DType("float8_e5m2", 1, "fp8", ("float8_e5m2fnuz", "f8e5m2", "fp8_e5m2")),
)

_BY_SPELLING: dict[str, DType] = {}
for _d in DTYPES:
    for _spelling in (_d.name, *_d.aliases):
        if _BY_SPELLING.setdefault(_spelling, _d) is not _d:
            raise AssertionError(f"dtype spelling {_spelling!r} is listed twice")


@functools.lru_cache(maxsize=512)
def _lookup(name: str) -> DType | None:
    key = " ".join(name.strip().lower().split())
    for prefix in ("c10::", "at::", "torch."):
        key = key.removeprefix(prefix)
    return _BY_SPELLING.get(key)


def dtype_info(name: object) -> DType | None:
    """The catalogue row of any spelling of an element type, ``None`` when unknown."""
    if not isinstance(name, str) or not name.strip():
        return None
    return _lookup(name)


def canonical_dtype(name: object) -> str | None:
    """``Float``/``c10::BFloat16``/``int8_t``/``bf16`` as ``float32``/``bfloat16``/``int8``.

    An unknown but non-empty name is returned as it was written, lower case, so that it can
    still be shown; :func:`dtype_bytes` of it is ``None``.
    """
    if not isinstance(name, str) or not name.strip():
        return None
    info = _lookup(name)
    return info.name if info is not None else name.strip().lower()


def dtype_bytes(name: object) -> int | None:
    """Bytes per element of any spelling of a known type, else ``None``."""
    info = dtype_info(name)
    return info.size if info is not None else None


def short_dtype(name: object) -> str | None:
    """The cost model's name (``fp32``, ``bf16``, ``fp8``...) of any spelling, else ``None``."""
    info = dtype_info(name)
    return info.short if info is not None else None
