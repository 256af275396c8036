"""Read traced-graph JSON (written by :mod:`exporters.graph`) back into a
:class:`~echo_view.model.graph.TracedGraph`, checking the format name, version and shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from echo_view.errors import InputError
from echo_view.formats import GRAPH_FORMAT, is_graph_file
from echo_view.model.graph import (
    GRAPH_SCHEMA_VERSION,
    OP_COLUMNS,
    OPTIONAL_COLUMNS,
    OpTable,
    Role,
    TracedGraph,
)
from echo_view.model.strings import StringTable
from echo_view.text import clipped
from importers.chrome_json_text import HINT_DEEP, TOO_DEEP, file_blocks, line_col, too_deep_at

FORMAT_NAME = GRAPH_FORMAT
#: The sniff of a traced graph (one place: :mod:`echo_view.formats` names the file with it).
is_graph_document = is_graph_file


def _load(path: Path) -> Any:
    raw = b"".join(file_blocks(path))  # gzip or not; inflation bounded
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        line, col = line_col(raw, too_deep_at(raw))
        raise InputError(
            TOO_DEEP, path=path, where=f"line {line} column {col}", hint=HINT_DEEP
        ) from None
    except msgspec.DecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", path=path, hint="re-run echo-view trace") from exc


def _table(data: Any, path: Path, where: str) -> OpTable:
    if not isinstance(data, dict):
        raise InputError("an op table must be an object", path=path, where=where)
    missing = [c for c in OP_COLUMNS if c not in data and c not in OPTIONAL_COLUMNS]
    if missing:
        raise InputError(f"op table lacks column {missing[0]!r}", path=path, where=where)
    cols = {}
    for c, dtype in OP_COLUMNS.items():
        if c not in data:  # an optional column: OpTable fills its default
            continue
        values = data[c]
        try:
            col = np.asarray(values) if isinstance(values, list) else None
        except (ValueError, TypeError, OverflowError):  # ragged or mixed lists
            col = None
        # Every value must fit its column exactly: a cast would wrap or truncate silently.
        if col is None or col.ndim != 1 or (len(col) and not _fits(col, np.dtype(dtype))):
            raise InputError(
                f"column {c!r} must be a list of {np.dtype(dtype).name} values",
                path=path,
                where=f"{where}.{c}",
                hint="re-run echo-view trace",
            )
        cols[c] = col
    try:
        return OpTable(**cols)
    except (ValueError, TypeError) as exc:
        raise InputError(f"bad op table: {exc}", path=path, where=where) from exc


def _fits(col: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> bool:
    """Whether every value of ``col`` is representable in ``dtype`` without change."""
    if dtype.kind == "f":
        return col.dtype.kind in "iuf" and bool(np.isfinite(col.astype(np.float64)).all())
    if col.dtype.kind not in "iu":
        return False
    info = np.iinfo(dtype)
    return bool(col.min() >= info.min and col.max() <= info.max)


def _int(value: Any, path: Path, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """A JSON integer (not a bool, float or string) within ``[lo, hi]``, else an InputError
    at ``where``."""
    if type(value) is not int:
        raise InputError(f"expected an integer, got {clipped(repr(value))}", path=path, where=where)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise InputError(
            f"must be {bounds}, got {clipped(repr(value))}",
            path=path,
            where=where,
            hint="re-run echo-view trace",
        )
    return value


#: ``meta`` entries the simulator reads as counts per pipeline stage (``{"0": n, ...}``).
_STAGE_COUNTS = ("param_tensors", "expert_params")


def _check_meta(meta: Any, path: Path) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise InputError("'meta' must be an object", path=path, where="meta")
    for key in _STAGE_COUNTS:
        counts = meta.get(key, {})
        if not isinstance(counts, dict):
            raise InputError(
                "must be an object of counts per stage", path=path, where=f"meta.{key}"
            )
        for stage, n in counts.items():
            _int(n, path, f"meta.{key}.{clipped(str(stage))}", lo=0)
    return meta


def read_graph(path: Path) -> TracedGraph:
    """Read a traced graph; :class:`InputError` names the place of any problem."""
    path = Path(path)
    doc = _load(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise InputError(
            "not a traced-graph file",
            path=path,
            where="format",
            hint="create one with: echo-view trace CONFIG.toml -o GRAPH.json",
        )
    version = doc.get("version")
    if version != GRAPH_SCHEMA_VERSION:
        raise InputError(
            f"unknown traced-graph version {clipped(repr(version))} (this echo-view reads "
            f"{GRAPH_SCHEMA_VERSION})",
            path=path,
            where="version",
            hint="re-trace the config with this echo-view",
        )
    strings = doc.get("strings")
    roles_doc = doc.get("roles")
    if not isinstance(strings, list) or not isinstance(roles_doc, list) or not roles_doc:
        raise InputError("missing 'strings' or 'roles'", path=path, hint="re-run echo-view trace")
    roles = []
    for i, r in enumerate(roles_doc):
        where = f"roles[{i}]"
        try:
            fwd = tuple(
                _table(t, path, f"{where}.forward[{c}]") for c, t in enumerate(r["forward"])
            )
            bwd = tuple(
                _table(t, path, f"{where}.backward[{c}]") for c, t in enumerate(r["backward"])
            )
            opt = _table(r["optimizer"], path, f"{where}.optimizer")
            stages = tuple(_int(s, path, f"{where}.stages", lo=0) for s in r["stages"])
            params = _int(r["params"], path, f"{where}.params", lo=0)
            # (the bytes of one gradient element: 1 for fp8 up to 8 for fp64)
            grad = _int(r.get("grad_dtype_bytes", 4), path, f"{where}.grad_dtype_bytes", 1, 8)
            roles.append(Role(stages, fwd, bwd, opt, params, grad))
        except KeyError as exc:
            raise InputError(f"role lacks field {exc}", path=path, where=where) from exc
        except TypeError as exc:
            raise InputError(f"role is malformed: {exc}", path=path, where=where) from exc
    if not all(isinstance(x, str) for x in strings) or len(set(strings)) != len(strings):
        raise InputError("'strings' must be unique strings", path=path, where="strings")
    table = StringTable(strings)
    for role in roles:
        for t in (*role.forward, *role.backward, role.optimizer):
            if len(t) and (t.name.max() >= len(table) or t.name.min() < 0):
                raise InputError("an op name refers to a missing string", path=path)
    config = {"config": doc.get("config", {}), "key": doc.get("key", {})}
    meta = _check_meta(doc.get("meta", {}), path)
    return TracedGraph(table, tuple(roles), config=config, meta=meta)
