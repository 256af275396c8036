"""Read traced-graph JSON (written by :mod:`exporters.graph`) back into a
:class:`~echo_view.model.graph.TracedGraph`, checking the format name, version and shape."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from echo_view.errors import InputError
from echo_view.model.graph import GRAPH_SCHEMA_VERSION, OP_COLUMNS, OpTable, Role, TracedGraph
from echo_view.model.strings import StringTable

FORMAT_NAME = "echo-view.traced-graph"


def _load(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read: {exc}", path=path, hint="is the file complete?") from exc
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", path=path, hint="re-run echo-view trace") from exc


def _table(data: Any, path: Path, where: str) -> OpTable:
    if not isinstance(data, dict):
        raise InputError("an op table must be an object", path=path, where=where)
    missing = [c for c in OP_COLUMNS if c not in data]
    if missing:
        raise InputError(f"op table lacks column {missing[0]!r}", path=path, where=where)
    try:
        cols = {c: np.asarray(data[c]) for c in OP_COLUMNS}
        return OpTable(**cols)
    except (ValueError, TypeError) as exc:
        raise InputError(f"bad op table: {exc}", path=path, where=where) from exc


def is_graph_document(path: Path) -> bool:
    """Cheap sniff: does the file start like traced-graph JSON?"""
    try:
        with path.open("rb") as f:
            head = f.read(256)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(256)
    except (OSError, EOFError, zlib.error):
        return False
    return FORMAT_NAME.encode() in head


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
            f"unknown traced-graph version {version!r} (this echo-view reads "
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
            roles.append(
                Role(
                    tuple(int(s) for s in r["stages"]),
                    fwd,
                    bwd,
                    opt,
                    int(r["params"]),
                    int(r.get("grad_dtype_bytes", 4)),
                )
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"role lacks field {exc}", path=path, where=where) from exc
    table = StringTable(strings)
    if len(table) != len(strings) or not all(isinstance(x, str) for x in strings):
        raise InputError("'strings' must be unique strings", path=path, where="strings")
    for role in roles:
        for t in (*role.forward, *role.backward, role.optimizer):
            if len(t) and (t.name.max() >= len(table) or t.name.min() < 0):
                raise InputError("an op name refers to a missing string", path=path)
    config = {"config": doc.get("config", {}), "key": doc.get("key", {})}
    meta = doc.get("meta", {})
    return TracedGraph(table, tuple(roles), config=config, meta=meta)
