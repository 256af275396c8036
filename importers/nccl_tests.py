"""Parser for nccl-tests stdout logs (``all_reduce_perf``, ``all_gather_perf``, ...).

A log holds a header (``# nThread 1 nGpus 8 minBytes ...``), optionally the nccl-tests and NCCL
versions and the test name (``# Collective test starting: all_reduce_perf``), one
``#  Rank  3 [Group 0] Pid 1234 on host device 3 [0x00] NAME`` line per rank, a column header,
and one row per message size with time / algbw / busbw for out-of-place and in-place runs.

Logs gathered through ``mpirun --tag-output`` carry ``[1,0]<stdout>:`` tags, sometimes in the
middle of a line where two processes' output interleaved; the tags are removed wherever they
are. NCCL ``INFO``/``WARN`` lines and other chatter are skipped. A row inside the table that
cannot be read is an :class:`~echo_view.errors.InputError` naming the file and line.

The log does not name the collective in old nccl-tests versions; it is taken, in this order,
from the ``Collective test starting`` line, the file name (``all_gather_perf.log``), or the
table itself (a ``root`` column, a reduction column, and the busbw/algbw ratio, which is
2(n-1)/n for all-reduce and (n-1)/n for all-gather, reduce-scatter and all-to-all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TextIO

from echo_view.errors import InputError
from echo_view.model import CollectiveKind
from echo_view.model.collectives import collective, collective_in_text
from echo_view.text import clipped
from echo_view.units import us_to_ns

_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)  # (the name is stripped after: a lazy name before \s*$ was quadratic in a run of spaces)
_TEST = re.compile(r"^#\s*Collective test starting:\s*(?P<test>\S+)")
_VERSION = re.compile(
    r"^#\s*nccl-tests version\s+(?P<tests>\S++).*?nccl-library=(?P<nccl>\d+)", re.IGNORECASE
)
_ROW_START = re.compile(r"^\s*-?\d+\s")  # (a negative size is a damaged row, not chatter)
_PARAM = re.compile(r"(\w[\w ]*?):?\s+(\S+)")


@dataclass(frozen=True, slots=True)
class NcclTestsRank:
    """One ``# Rank`` line: which host and device a rank ran on."""

    rank: int
    pid: int
    host: str
    device: int
    bus_id: str
    device_name: str


@dataclass(frozen=True, slots=True)
class NcclTestsRow:
    """One message size. Times are integer ns; bandwidths GB/s as printed (None when absent).

    ``nbytes`` is the ``size`` column: the whole buffer (all-reduce, broadcast), the gathered
    output (all-gather) or the scattered input (reduce-scatter), i.e. echo-view's per-rank
    collective payload convention.
    """

    line: int
    nbytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    time_ns: int
    algbw_gbs: float
    busbw_gbs: float
    in_place_time_ns: int | None = None
    in_place_algbw_gbs: float | None = None
    in_place_busbw_gbs: float | None = None


@dataclass(frozen=True)
class NcclTestsLog:
    """A parsed nccl-tests run."""

    path: str
    collective: CollectiveKind
    #: How the collective was determined: ``test line``, ``file name``, ``table`` or ``given``.
    collective_source: str
    ranks: tuple[NcclTestsRank, ...]
    rows: tuple[NcclTestsRow, ...]
    #: ``nThread``, ``nGpus``, ``minBytes``... as printed in the header line.
    params: Mapping[str, str] = field(default_factory=dict)
    test_name: str | None = None
    nccl_tests_version: str | None = None
    #: NCCL's version code (22203 for 2.22.3), when the log prints it.
    nccl_version_code: int | None = None
    avg_busbw_gbs: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Distinct hosts in order of first appearance."""
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def ranks_per_host(self) -> tuple[int, ...]:
        """How many ranks ran on each host, in :attr:`hosts` order."""
        counts = dict.fromkeys(self.hosts, 0)
        for r in self.ranks:
            counts[r.host] += 1
        return tuple(counts.values())

    @property
    def gpus_per_thread(self) -> int:
        """GPUs driven by one host thread (``nGpus``): their launches are serialised."""
        return int(self.params.get("nGpus", "1"))

    @property
    def device_names(self) -> tuple[str, ...]:
        """Distinct device names."""
        return tuple(dict.fromkeys(r.device_name for r in self.ranks))


def _float(text: str) -> float | None:
    """A finite number, else ``None`` (``nan``, ``inf`` and words alike)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _parse_params(text: str) -> dict[str, str]:
    """``nThread 1 nGpus 8 minBytes 8 ... step: 2(factor) warmup iters: 5`` -> dict."""
    out: dict[str, str] = {}
    tokens = text.lstrip("#").split()
    i = 0
    while i < len(tokens):
        key = tokens[i]
        # Keys may be two words ("warmup iters:", "agg iters:").
        if not key.endswith(":") and i + 2 < len(tokens) and tokens[i + 1].endswith(":"):
            key = f"{key} {tokens[i + 1]}"
            i += 1
        if i + 1 >= len(tokens):
            break
        out[key.rstrip(":")] = tokens[i + 1]
        i += 2
    return out


class _Table:
    """Column layout taken from the ``# size count type ...`` header line."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.has_redop = "redop" in names
        self.has_root = "root" in names
        times = [i for i, n in enumerate(names) if n == "time"]
        self.time_cols = times
        self.algbw_cols = [i for i, n in enumerate(names) if n == "algbw"]
        self.busbw_cols = [i for i, n in enumerate(names) if n == "busbw"]

    @classmethod
    def default(cls, ntokens: int) -> _Table:
        """Layouts of known nccl-tests versions, told apart by the number of columns."""
        by_count = {
            13: "size count type redop root time algbw busbw wrong time algbw busbw wrong",
            12: "size count type redop time algbw busbw error time algbw busbw error",
            11: "size count type time algbw busbw error time algbw busbw error",
        }
        layout = by_count.get(ntokens)
        return cls(layout.split() if layout else [])


def _collective_from_name(name: str) -> CollectiveKind | None:
    return collective_in_text(name)


def _collective_from_table(
    rows: Sequence[NcclTestsRow], table: _Table, nranks: int
) -> CollectiveKind | None:
    """Infer the collective from the columns and the busbw/algbw ratio."""
    reduces = table.has_redop and any(r.redop not in (None, "none") for r in rows)
    rooted = table.has_root and any(r.root is not None and r.root >= 0 for r in rows)
    if rooted:
        return CollectiveKind.REDUCE if reduces else CollectiveKind.BROADCAST
    ratios = [r.busbw_gbs / r.algbw_gbs for r in rows if r.algbw_gbs >= 1.0]
    if nranks < 2 or not ratios:
        return CollectiveKind.ALL_REDUCE if reduces and nranks < 2 else None
    ratio = sorted(ratios)[len(ratios) // 2]
    n = nranks
    kinds = (
        (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER)
        if reduces
        else (CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST)
    )
    candidates = {k: collective(k).bus_factor(n) for k in kinds}
    best = min(candidates, key=lambda k: abs(candidates[k] - ratio))
    if abs(candidates[best] - ratio) > 0.02 * candidates[best]:
        return None
    # all-gather, all-to-all and (at n=2) broadcast share busbw factors; only a reduction
    # column tells all-reduce apart, so without one the answer is ambiguous.
    return best if reduces else None


def parse_nccl_tests(
    path: str | Path, text: str | None = None, collective: CollectiveKind | None = None
) -> NcclTestsLog:
    """Parse one nccl-tests log. ``text`` overrides reading ``path``; ``collective`` overrides
    the inference (use it for old logs of all-gather or all-to-all)."""
    path = Path(path)
    if text is not None:
        return _parse_lines(path, text.splitlines(), collective)
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return _parse_lines(path, _bounded_lines(fh), collective)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=path) from exc


#: Result rows a log may hold. nccl-tests writes one row per message size: a ``-f 2`` sweep
#: from 8 B to 16 GiB has 32; even a ``-i`` sweep in 1 MiB steps to 8 GiB has 8,192. The fit
#: costs time and memory per row, so a larger table is refused rather than fitted for minutes.
MAX_ROWS = 10_000

#: Characters of the longest line read. Result rows and headers are under 200; a line this
#: long is chatter or damage and is skipped.
MAX_LINE_CHARS = 1 << 16


def _bounded_lines(fh: TextIO) -> Iterator[str]:
    """The file's lines; one of :data:`MAX_LINE_CHARS` or more is read in pieces and given as
    an empty line (it cannot be a row or a header), so a file with no newline holds at most
    that much in memory at once."""
    while line := fh.readline(MAX_LINE_CHARS):
        if len(line) == MAX_LINE_CHARS and not line.endswith("\n"):
            while (rest := fh.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                pass
            line = ""
        yield line.rstrip("\r\n")


def _parse_lines(
    path: Path, lines: Iterable[str], collective: CollectiveKind | None
) -> NcclTestsLog:
    params: dict[str, str] = {}
    ranks: dict[int, NcclTestsRank] = {}
    rows: list[NcclTestsRow] = []
    table: _Table | None = None
    test_name: str | None = None
    tests_version: str | None = None
    nccl_code: int | None = None
    avg_busbw: float | None = None
    ended = False  # past "# Avg bus bandwidth": no more result rows
    header_line = 0

    for lineno, raw in enumerate(lines, start=1):
        line = _TAG.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if body.startswith("nThread"):
                if rows:
                    raise InputError(
                        "a second nccl-tests run starts here; give one run per file",
                        path=path,
                        where=f"line {lineno}",
                        hint="split the log at each '# nThread' header",
                    )
                params = _parse_params(body)
                header_line = lineno
                n_gpus = params.get("nGpus", "1")
                # (int() raised a traceback on "abc"; 0 or fewer left the harness unmodelled)
                if not (n_gpus.isascii() and n_gpus.isdigit() and 1 <= int(n_gpus) <= 1024):
                    raise InputError(
                        f"nGpus {clipped(n_gpus)!r} is not a GPU count from 1 to 1024",
                        path=path,
                        where=f"line {lineno}",
                        hint="give the log as nccl-tests printed it",
                    )
                continue
            if m := _RANK.match(stripped):
                rank = int(m["rank"])
                ranks.setdefault(
                    rank,
                    NcclTestsRank(
                        rank,
                        int(m["pid"]),
                        m["host"],
                        int(m["device"]),
                        m["bus"],
                        m["name"].rstrip(),
                    ),
                )
                continue
            if m := _TEST.match(stripped):
                test_name = m["test"]
                continue
            if m := _VERSION.match(stripped):
                tests_version, nccl_code = m["tests"], int(m["nccl"])
                continue
            words = body.split()
            if words[:3] == ["size", "count", "type"]:
                table = _Table([w.lstrip("#") for w in words])
                continue
            if body.startswith("Avg bus bandwidth"):
                avg_busbw = _float(body.rsplit(":", 1)[-1].strip())
                ended = True
            continue
        if ended or not _ROW_START.match(line):
            # NCCL INFO lines, MPI chatter, warnings; after "# Avg bus bandwidth" the table has
            # ended: a line there that starts with a number ("3 more processes ...") is chatter.
            continue
        if len(rows) == MAX_ROWS:
            raise InputError(
                f"more than {MAX_ROWS:,} result rows",
                path=path,
                where=f"line {lineno}",
                hint="nccl-tests writes one row per message size; fit on a sweep such as "
                "-b 8 -e 8G -f 2",
            )
        tokens = stripped.split()
        layout = table if table is not None else _Table.default(len(tokens))
        rows.append(_parse_row(path, lineno, tokens, layout))
        if table is None:
            table = layout

    if not rows:
        raise InputError(
            "no nccl-tests result rows found",
            path=path,
            hint="expected lines like '  1048576  262144  float  sum  72.53  14.46  25.30 ...'",
        )
    if not ranks:
        raise InputError(
            "no '# Rank N ... on HOST device D' lines: cannot tell how many ranks ran",
            path=path,
            where=f"line {header_line}" if header_line else None,
            hint="keep the '# Using devices' block of the nccl-tests output",
        )
    rank_list = tuple(ranks[r] for r in sorted(ranks))
    if [r.rank for r in rank_list] != list(range(len(rank_list))):
        raise InputError(
            f"rank lines are not 0..{len(rank_list) - 1}",
            path=path,
            hint="the '# Using devices' block looks truncated",
        )
    assert table is not None
    source = "given"
    kind = collective
    if kind is None and test_name is not None:
        kind, source = _collective_from_name(test_name), "test line"
    if kind is None:
        kind, source = _collective_from_name(path.name), "file name"
    if kind is None:
        kind, source = _collective_from_table(rows, table, len(rank_list)), "table"
    if kind is None:
        raise InputError(
            "cannot tell which collective this log measured",
            path=path,
            hint="name the file after the test (all_gather_perf.log) or pass the collective",
        )
    return NcclTestsLog(
        path=str(path),
        collective=kind,
        collective_source=source,
        ranks=rank_list,
        rows=tuple(rows),
        params=params,
        test_name=test_name,
        nccl_tests_version=tests_version,
        nccl_version_code=nccl_code,
        avg_busbw_gbs=avg_busbw,
    )


#: Range of a row's integers (sizes, counts: int64) and numbers (µs, GB/s: 10^12 µs is 11 days).
_MAX_INT = 2**63 - 1
_MAX_NUMBER = 1e12


def _parse_row(path: Path, lineno: int, tokens: list[str], table: _Table) -> NcclTestsRow:
    where = f"line {lineno}"
    # A damaged header can name fewer algbw/busbw than time columns: use whole sets only.
    sets = min(len(table.time_cols), len(table.algbw_cols), len(table.busbw_cols))
    if len(tokens) != len(table.names) or sets < 1:
        raise InputError(
            f"result row has {len(tokens)} columns, the table header has {len(table.names)}",
            path=path,
            where=where,
            hint="the line looks truncated or two outputs interleaved",
        )

    def integer(i: int, what: str, lo: int = 0) -> int:
        try:
            value = int(tokens[i])
        except ValueError:
            raise InputError(
                f"{what} {clipped(tokens[i])!r} is not an integer", path=path, where=where
            ) from None
        if not lo <= value <= _MAX_INT:
            raise InputError(
                f"{what} {clipped(str(value))} is outside {lo}..2^63-1", path=path, where=where
            )
        return value

    def number(i: int, what: str) -> float:
        value = _float(tokens[i])
        if value is None or not 0 <= value <= _MAX_NUMBER:
            raise InputError(
                f"{what} {clipped(tokens[i])!r} is not a number from 0 to {_MAX_NUMBER:g}",
                path=path,
                where=where,
            )
        return value

    nbytes = integer(0, "size")

    def time_ns(i: int) -> int:
        number(i, "time")
        ns = us_to_ns(tokens[i])
        if ns <= 0 and nbytes > 0:  # (it was left out of the fit without a word)
            raise InputError(
                f"time {clipped(tokens[i])!r} µs for {nbytes:,} bytes: under a nanosecond",
                path=path,
                where=where,
                hint="the row is damaged; run the test again or delete the row",
            )
        return ns

    names = table.names
    redop = tokens[names.index("redop")] if table.has_redop else None
    root = integer(names.index("root"), "root", -1) if table.has_root else None
    t0, a0, b0 = table.time_cols[0], table.algbw_cols[0], table.busbw_cols[0]
    row = NcclTestsRow(
        line=lineno,
        nbytes=nbytes,
        count=integer(1, "count"),
        dtype=tokens[2],
        redop=redop,
        root=root,
        time_ns=time_ns(t0),
        algbw_gbs=number(a0, "algbw"),
        busbw_gbs=number(b0, "busbw"),
    )
    if sets > 1:
        t1, a1, b1 = table.time_cols[1], table.algbw_cols[1], table.busbw_cols[1]
        row = replace(
            row,
            in_place_time_ns=time_ns(t1),
            in_place_algbw_gbs=number(a1, "algbw"),
            in_place_busbw_gbs=number(b1, "busbw"),
        )
    return row


def is_nccl_tests_log(path: Path) -> bool:
    """Cheap check: does the first few KiB look like nccl-tests output?"""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            head = fh.read(8192)
    except OSError:
        return False
    head = _TAG.sub("", head)
    return "nThread" in head and "minBytes" in head
