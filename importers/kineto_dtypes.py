"""Element types of collective payloads: PyTorch's and NCCL's spellings, and their sizes."""

from __future__ import annotations

import functools

_DTYPE_ALIASES: dict[str, str] = {
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "double": "float64",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "int": "int32",
    "int32": "int32",
    "int32_t": "int32",
    "i32": "int32",
    "uint32": "uint32",
    "uint32_t": "uint32",
    "u32": "uint32",
    "long": "int64",
    "int64": "int64",
    "int64_t": "int64",
    "i64": "int64",
    "uint64": "uint64",
    "uint64_t": "uint64",
    "u64": "uint64",
    "short": "int16",
    "int16": "int16",
    "byte": "uint8",
    "uint8": "uint8",
    "uint8_t": "uint8",
    "u8": "uint8",
    "char": "int8",
    "int8": "int8",
    "int8_t": "int8",
    "i8": "int8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3",
    "float8_e4m3": "float8_e4m3",
    "f8e4m3": "float8_e4m3",
    "fp8_e4m3": "float8_e4m3",
    "float8_e5m2": "float8_e5m2",
    "f8e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
}
#: Bytes per element of each canonical dtype.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "int16": 2,
    "uint8": 1,
    "int8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3": 1,
    "float8_e5m2": 1,
}


@functools.lru_cache(maxsize=256)
def _canonical(name: str) -> str:
    key = name.strip().lower().removeprefix("c10::").removeprefix("at::")
    return _DTYPE_ALIASES.get(key, key)


def canonical_dtype(name: object) -> str | None:
    """``Float``/``c10::BFloat16``/``int8_t``... as ``float32``/``bfloat16``/``int8``."""
    if not isinstance(name, str) or not name.strip():
        return None
    return _canonical(name)
