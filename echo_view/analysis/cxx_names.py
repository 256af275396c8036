"""Readable names for C++ kernel signatures.

A GPU kernel's name is its C++ signature: ``void at::native::vectorized_elementwise_kernel<4,
at::native::FillFunctor<float>, ...>(int, ...)``. Cutting it at the first ``<`` breaks on
anonymous namespaces (Nsight writes ``at::native::<unnamed>::vectorized_layer_norm_kernel<...>``)
and keeps the namespace while dropping what tells two launches of one generic kernel apart (the
functor). :func:`short_kernel_name` parses the signature instead: the kernel's own identifier,
plus, for a kernel templated on a callable, that callable (``vectorized_elementwise_kernel
<FillFunctor>``, ``elementwise_kernel<MulFunctor>``, ``unrolled_elementwise_kernel
<direct_copy_kernel_cuda>``). :func:`qualified_base` keeps the namespaces and drops the template
arguments and parameters (the kernel classes of ``echo-view diff``). Itanium-mangled names
(``_ZN...``, left so by some CUPTI versions) are demangled first where the C++ runtime offers
``__cxa_demangle``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
from dataclasses import dataclass
from functools import lru_cache

#: Both spellings of an anonymous namespace (GCC/CUPTI and Nsight/EDG).
_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")
ANON = "{anon}"
#: ``operator()`` / ``operator ()``: its parentheses are part of the name, not a parameter list.
_CALL_OPERATOR = re.compile(r"\boperator\s*\(\)")
#: Casts in non-type template arguments (``(int)128``, ``(unsigned long)4096``, ``(bool)0``).
_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool)?\)(?=-?\d)")
#: A name that reads as a C++ signature: an identifier (maybe qualified) then ``<`` or ``(``.
_CXX = re.compile(r"(?:void\s+)?[A-Za-z_{][\w:{}]*\s*[<(]")
_IDENT = re.compile(r"[A-Za-z_~{][\w{}~]*")
#: Template arguments that never name what a kernel does.
_PLAIN_TYPES = frozenset(
    ("void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed",
     "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "uint8_t", "int8_t", "half",
     "__half", "__nv_bfloat16", "BFloat16", "Half", "float2", "float4", "int4",
     "T", "T1", "T2", "T3", "T4", "T5")
)  # fmt: skip
#: Identifiers that look like a callable: functors, operator structs, kernels, implementations
#: (but not their traits, policies and parameter structs).
_CALLABLE = re.compile(r"functor|ops?$|kernel|impl|func", re.IGNORECASE)
_NOT_CALLABLE = re.compile(r"traits|policy|params|args|metadata|state", re.IGNORECASE)
#: Generic launcher names that say nothing without their first template argument (CUTLASS).
_GENERIC = frozenset({"Kernel", "Kernel2", "kernel", "device_kernel"})
_OPEN, _CLOSE = "<([{", ">)]}"
#: Only this much of a name is parsed (real kernel signatures run to about 2,000 characters;
#: the identifier and the callable come first), so an absurd name costs bounded time.
MAX_PARSE = 4096


@dataclass(frozen=True, slots=True)
class _Part:
    """One ``::``-separated component: its identifier, template arguments and whether it is a
    lambda or an operator (whose enclosing function names it)."""

    ident: str
    targs: tuple[str, ...]
    anonymous_fn: bool


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` where no bracket is open (unbalanced brackets close at the end)."""
    out, depth, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(text[start:])
    return out


def _bracket(text: str, i: int) -> int:
    """Index just past the bracket group opening at ``text[i]`` (or the end of ``text``)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in _OPEN:
            depth += 1
        elif text[j] in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _part(text: str) -> _Part:
    text = text.strip()
    if text.startswith(("[lambda", "{lambda", "lambda")):
        return _Part("lambda", (), True)
    m = _IDENT.match(text)
    ident = m.group(0) if m else ""
    targs: tuple[str, ...] = ()
    if m and m.end() < len(text) and text[m.end()] == "<":
        inner = text[m.end() + 1 : _bracket(text, m.end()) - 1]
        targs = tuple(a.strip() for a in _split_top(inner, ",") if a.strip())
    return _Part(ident, targs, ident in ("operator", "lambda"))


def _parts(signature: str) -> list[_Part]:
    """The ``::`` components of a signature, without its return type and parameter list."""
    s = signature.strip()
    if s.startswith("void "):
        s = s[5:]
    parts = [_part(p) for p in _split_top(s, "::")]
    return [p for p in parts if p.ident]


def _normalise(name: str) -> str:
    s = _ANON.sub(ANON, name.strip()[:MAX_PARSE])
    s = _CALL_OPERATOR.sub("operator", s)
    return _CAST.sub("", s)


def _named_part(parts: list[_Part]) -> _Part | None:
    """The component that names the thing: the function enclosing a lambda or operator, else
    the last one."""
    for i, p in enumerate(parts):
        if p.anonymous_fn:
            return next((q for q in reversed(parts[:i]) if not q.anonymous_fn), None)
    return parts[-1] if parts else None


def _candidates(part: _Part) -> list[tuple[_Part, int]]:
    """Template arguments of ``part`` that name something (not pointers or plain types):
    ``(the part that names it, rank)``, in order; rank 2 for a lambda's enclosing function, 1
    for a name that reads as a callable, 0 for any other type."""
    out = []
    for arg in part.targs:
        if arg.endswith(("*", "&")):
            continue
        parts = _parts(arg)
        named = _named_part(parts)
        if named is None or named.ident in _PLAIN_TYPES or named.ident == ANON:
            continue
        if any(p.anonymous_fn for p in parts):
            rank = 2
        elif _CALLABLE.search(named.ident) and not _NOT_CALLABLE.search(named.ident):
            rank = 1
        else:
            rank = 0
        out.append((named, rank))
    return out


def _best_callable(part: _Part) -> _Part | None:
    """The first lambda-enclosing template argument of ``part``, else the first callable one."""
    cands = _candidates(part)
    best = max((rank for _, rank in cands), default=0)
    return next((c for c, rank in cands if rank == best), None) if best else None


def _payload(part: _Part, depth: int = 0) -> str:
    """The innermost callable ``part`` is templated on (``part`` itself when there is none)."""
    inner = _best_callable(part) if depth < 8 else None
    return part.ident if inner is None else _payload(inner, depth + 1)


def _libcxx_demangler() -> ctypes._NamedFuncPointer | None:
    for lib in ("stdc++", "c++", "c++abi"):
        path = ctypes.util.find_library(lib)
        if path is None:
            continue
        try:
            fn = getattr(ctypes.CDLL(path), "__cxa_demangle", None)
        except OSError:
            continue
        if fn is not None:
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            return fn  # type: ignore[no-any-return]
    return None


_DEMANGLER: list[ctypes._NamedFuncPointer | None] = []
# (an identifier's length has at most 9 digits: a longer run is no length, and would overflow
# a slice)
_LENGTH_PREFIXED = re.compile(r"(\d{1,9})(?!\d)")
#: A nested-name start and/or a substitution (``N``, ``S_``, ``S0_``) before a template argument.
_SUBSTITUTION = re.compile(r"N?(?:S[0-9A-Z]*_)?")


def _length_prefixed(name: str, i: int) -> tuple[list[str], int]:
    """The ``<length><identifier>`` run of a mangled name from ``i``, and where it stops."""
    idents = []
    while (m := _LENGTH_PREFIXED.match(name, i)) is not None:
        n = int(m.group(1))
        idents.append(name[m.end() : m.end() + n])
        i = m.end() + n
    return idents, i


def _mangled_prefix(name: str) -> str:
    """The nested name at the start of a mangled name that could not be demangled, with the
    name of its first template argument (``_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23
    ImplicitGemm...`` -> ``cutlass_cudnn_train::Kernel<conv::kernel::ImplicitGemm>``)."""
    idents, i = _length_prefixed(name, 3 if name.startswith("_ZN") else 2)
    if not idents:
        return name
    head = "::".join(idents)
    if name.startswith("I", i):
        m = _SUBSTITUTION.match(name, i + 1)
        inner, _ = _length_prefixed(name, m.end() if m else i + 1)
        if inner:
            head += "<" + "::".join(inner) + ">"
    return head


@lru_cache(maxsize=16384)
def demangle(name: str) -> str:
    """``name`` demangled when it is an Itanium-mangled symbol (``_Z...``); unchanged otherwise
    or when it cannot be demangled (then :func:`short_kernel_name` reads its nested name)."""
    if not name.startswith("_Z") or len(name) > 4 * MAX_PARSE:
        return name
    if not _DEMANGLER:
        _DEMANGLER.append(_libcxx_demangler())
    fn = _DEMANGLER[0]
    if fn is None:
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


def is_cxx_signature(name: str) -> bool:
    """Whether ``name`` reads as a C++ signature (or a mangled one) rather than free text."""
    return name.startswith("_Z") or _CXX.match(name) is not None


@lru_cache(maxsize=65536)
def short_kernel_name(name: str) -> str:
    """The readable part of a C++ kernel signature: its identifier without namespaces, and the
    callable it is templated on, if any (``elementwise_kernel<MulFunctor>``). Names that are not
    signatures come back unchanged."""
    full = demangle(name)
    if full.startswith("_Z"):
        full = _mangled_prefix(full)
    elif not is_cxx_signature(full):
        return name
    parts = _parts(_normalise(full))
    named = _named_part(parts)
    if named is None:
        return name
    inner = _best_callable(named)
    if inner is None and named.ident in _GENERIC:
        inner = next((c for c, _ in _candidates(named)), None)
    return named.ident if inner is None else f"{named.ident}<{_payload(inner)}>"


@lru_cache(maxsize=65536)
def qualified_base(name: str) -> str:
    """``name`` without ``void``, template arguments and parameters, namespaces kept and
    anonymous ones written ``{anon}`` (``at::native::{anon}::vectorized_layer_norm_kernel``)."""
    full = demangle(name.strip())
    if full.startswith("_Z"):
        full = _mangled_prefix(full)
    if not is_cxx_signature(full):
        return full
    parts = _parts(_normalise(full))
    return "::".join(p.ident for p in parts if not p.anonymous_fn) or name
