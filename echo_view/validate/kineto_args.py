"""Kineto ``args`` read by the rules, and the rank summary built from what they carry.

Only the fields the rules need are decoded (``correlation`` and the collective fields PyTorch
writes on ``record_param_comms`` and NCCL kernels); ``Process Group Ranks`` may be a list or
the string ``"[0, 1]"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model.job import group_ranks
from echo_view.validate.events import UNSET
from echo_view.validate.summary import RankSummary

#: One collective as gathered from a trace: (group, kind label, dtype, in elements,
#: out elements, seq, start ns, end ns, traceEvents index).
CollectiveRow = tuple[str, str, str, int, int, int, int, int, int]


class KinetoArgs(msgspec.Struct, gc=False):
    """The ``args`` fields the Kineto rules read."""

    correlation: Any = UNSET
    collective: Any = msgspec.field(default=UNSET, name="Collective name")
    in_nelems: Any = msgspec.field(default=UNSET, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=UNSET, name="Out msg nelems")
    dtype: Any = UNSET
    pg_name: Any = msgspec.field(default=UNSET, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=UNSET, name="Process Group Ranks")
    seq: Any = msgspec.field(default=UNSET, name="Seq")


_ARGS = msgspec.json.Decoder(list[KinetoArgs | None])
_ONE = msgspec.json.Decoder(KinetoArgs)


def decode_args(raws: list[msgspec.Raw]) -> list[KinetoArgs | None]:
    if not raws:
        return []
    joined = b",".join(r if len(r) else b"null" for r in raws)
    try:
        return _ARGS.decode(b"[" + joined + b"]")
    except msgspec.ValidationError:
        out: list[KinetoArgs | None] = []
        for r in raws:
            try:
                out.append(_ONE.decode(r) if len(r) else None)
            except msgspec.ValidationError:
                out.append(None)
        return out


def as_int(value: Any) -> int:
    """An int64 from an int or a decimal string; -1 for anything else, or beyond int64 (such
    ids and counts are none: they would overflow the int64 columns the rules compare)."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else -1
    if isinstance(value, str):
        s = value.strip()
        digits = s[1:] if s.startswith("-") else s
        # ASCII digits only (not '²', '--5' and such), and 18 at most (int64; int() also
        # refuses more than 4,300).
        if digits.isascii() and digits.isdigit() and len(digits) <= 18:
            return int(s)
    return -1


def rank_summary(
    path: str,
    top: Mapping[str, Any],
    colls: list[CollectiveRow],
    pg_ranks: Mapping[str, tuple[int, ...]],
    steps: tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]],
) -> RankSummary:
    """A rank's summary from its top-level keys (``distributedInfo``, ``baseTimeNanoseconds``),
    its collectives, the groups seen in args and its ProfilerStep spans (ns, trace clock)."""
    info = top.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    base = top.get("baseTimeNanoseconds")
    # A base beyond 2^62 ns (year 2116) would overflow the int64 times it is added to.
    base_ns = base if type(base) is int and abs(base) < 2**62 else 0
    rank = info.get("rank")
    ws = info.get("world_size")
    groups: dict[str, tuple[int, ...]] = {}
    pg_config = info.get("pg_config")
    if isinstance(pg_config, list):
        for pg in pg_config:
            if isinstance(pg, dict) and "pg_name" in pg:
                ranks = group_ranks(pg.get("ranks"))
                if ranks is not None:
                    groups[str(pg["pg_name"])] = ranks
    for name, ranks in pg_ranks.items():
        groups.setdefault(name, ranks)
    colls = sorted(colls, key=lambda c: (c[6], c[8]))
    cols = list(zip(*colls, strict=True)) if colls else [()] * 9

    def i64(values: tuple[Any, ...]) -> npt.NDArray[np.int64]:
        return np.array(values, dtype=np.int64)

    return RankSummary(
        source=path,
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        world_size=ws if isinstance(ws, int) and not isinstance(ws, bool) else None,
        rank_recorded=isinstance(rank, int),
        groups=groups,
        group=list(cols[0]),
        kind=list(cols[1]),
        dtype=list(cols[2]),
        in_size=i64(cols[3]),
        out_size=i64(cols[4]),
        seq=i64(cols[5]),
        start_ns=i64(cols[6]) + base_ns,
        end_ns=i64(cols[7]) + base_ns,
        index=i64(cols[8]),
        step_number=np.asarray(steps[0], np.int64),
        step_start_ns=np.asarray(steps[1], np.int64) + base_ns,
        step_end_ns=np.asarray(steps[2], np.int64) + base_ns,
    )
