"""TOML files (workload configs, calibration and model files): decoding with the limits every
reader shares, so that a hostile file ends in one :class:`~echo_view.errors.ConfigError`, and
the one writer every calibration output uses (``tomli_w``, a maintained TOML encoder).

Python's ``tomllib`` recurses once per nested inline table or array (``RecursionError`` near 500
levels) and keeps every prefix of a dotted key (quadratic memory: ``a.a.a...`` 10^5 parts long
needs tens of GB), so nesting and dotted keys are bounded before and after decoding.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from echo_view.errors import ConfigError, InputError

#: Largest TOML input read (the biggest real config or calibration file is a few KB).
MAX_TOML_BYTES = 4 << 20
#: Deepest nesting of tables, inline tables, arrays and dotted-key parts (real files: 3).
MAX_TOML_DEPTH = 32
_HINT = "a config or calibration file is small, UTF-8 TOML nested a few levels deep"
# One key part and the dot after it (bare or quoted), outside or inside a string: MAX_TOML_DEPTH
# of them in a row are refused (a string with so many dots too, which no real file has). They
# are counted in one pass over the text: a search for the whole chain retried from every
# character (a 40,000-character comment took 34 s; a 4 MiB file of 31-part chains 4 s).
_DOTTED_PART = re.compile(
    r"""(?:(?<![A-Za-z0-9_-])[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')[ \t]*\.[ \t]*"""
)


def _too_many_parts(text: str) -> int | None:
    """The offset of the first run of MAX_TOML_DEPTH dotted key parts, else ``None``."""
    run, end, first = 0, -1, 0
    for m in _DOTTED_PART.finditer(text):
        if m.start() == end:
            run += 1
        else:
            run, first = 1, m.start()
        if run >= MAX_TOML_DEPTH:
            return first
        end = m.end()
    return None


#: Python refuses to convert integers of more digits than this (``sys.get_int_max_str_digits``).
_MAX_DIGITS = 4300
_LONG_NUMBER = re.compile(r"(?<![0-9_])[0-9_]{" + str(_MAX_DIGITS + 1) + ",}")


def parse_toml(text: str, path: str | Path | None = None) -> dict[str, Any]:
    """Decode TOML ``text``; syntax errors and excess nesting are :class:`ConfigError`."""
    at = _too_many_parts(text)
    if at is not None:
        raise _too_deep(path, text.count("\n", 0, at) + 1)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=path, hint="fix the syntax") from None
    except RecursionError:
        raise _too_deep(path, _deep_line(text)) from None
    except ValueError:  # an integer past Python's 4,300-digit conversion limit
        m = _LONG_NUMBER.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        raise ConfigError(
            f"a number of more than {_MAX_DIGITS:,} digits",
            path=path,
            where=None if line is None else f"line {line}",
            hint="numbers in a config have a few digits",
        ) from None
    _check_depth(data, path, text)
    return data


def read_toml(path: Path) -> dict[str, Any]:
    """Read and decode a TOML file (see :func:`read_toml_text`)."""
    return parse_toml(read_toml_text(path), path)


@dataclass(frozen=True)
class TomlDoc:
    """A decoded TOML file and where it was read from (for messages): what the reading layer
    hands the simulator, which reads no files."""

    data: dict[str, Any]
    path: Path


def read_toml_doc(path: Path) -> TomlDoc:
    """:func:`read_toml` with its path kept."""
    return TomlDoc(read_toml(path), path)


def read_toml_text(path: Path) -> str:
    """The text of a TOML file: at most :data:`MAX_TOML_BYTES`, UTF-8."""
    try:
        # Non-blocking open: a FIFO would block it until a writer came (the Python API reads
        # these paths without the command line's checks).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise InputError(
                f"not a regular file ({what})", path=path, hint="give the TOML file itself"
            )
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_TOML_BYTES + 1)
    except OSError as exc:
        hint = "check the path" if exc.errno == errno.ENOENT else None
        raise InputError(f"cannot read: {exc.strerror}", path=path, hint=hint) from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(
            f"larger than {MAX_TOML_BYTES >> 20} MiB, too large for a TOML input", path=path,
            hint=_HINT,
        )  # fmt: skip
    try:
        # A byte-order mark (Windows editors write one) is no TOML: tomllib stops at it.
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            path=path,
            where=f"line {line}",
            hint="TOML files are UTF-8; convert it (a UTF-16 file starts with 0xff 0xfe)",
        ) from None


def _too_deep(path: str | Path | None, line: int) -> ConfigError:
    return ConfigError(
        f"nested more than {MAX_TOML_DEPTH} levels (tables, arrays or dotted-key parts)",
        path=path,
        where=f"line {line}",
        hint=_HINT,
    )


def _deep_line(text: str) -> int:
    """The first line whose brackets open more than :data:`MAX_TOML_DEPTH` levels (strings
    ignored only roughly: this is the place of an error already found)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        for c in line:
            if c in "[{":
                depth += 1
                if depth > MAX_TOML_DEPTH:
                    return number
            elif c in "]}":
                depth -= 1
    return 1


def _check_depth(data: dict[str, Any], path: str | Path | None, text: str) -> None:
    """Nesting of the decoded value, without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            raise _too_deep(path, _deep_line(text))
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, dict | list))


def significant(value: Any, digits: int = 6) -> Any:
    """``value`` with every float rounded to ``digits`` significant digits, in lists and tables
    too (fitted constants are not exact beyond that; the files stay readable)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, Mapping):
        return {k: significant(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [significant(v, digits) for v in value]
    return value


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and tuples as lists, recursively; keys
    whose value is ``None`` are left out (TOML has no null: a missing key is "unknown")."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def dump_toml(doc: Mapping[str, Any], comment: str = "") -> str:
    """TOML text of ``doc`` (tables in insertion order), after ``comment`` as ``#`` lines."""
    head = "".join(f"# {line}".rstrip() + "\n" for line in comment.splitlines())
    return head + tomli_w.dumps(_plain(doc))
