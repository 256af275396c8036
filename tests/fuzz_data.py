"""A small real Kineto trace and the Hypothesis settings and values that the fuzz tests
(tests/importers/kineto/test_fuzz.py, tests/validate/test_check_fuzz.py) damage it with.
``FUZZ_EXAMPLES=3000`` in the environment runs a longer, random search instead of the
fixed, derandomised one CI runs."""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES

SOURCE = sorted((SAMPLES / "dlrm_kineto").glob("worker0_*.json.gz"))[0]


def _base() -> dict[str, Any]:
    """The real DLRM rank 0 trace cut to its metadata and its first 4 ms of events (CPU ops,
    launches, kernels, copies, flows, NCCL kernels and annotations are all among them)."""
    with gzip.open(SOURCE, "rt", encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    events = doc["traceEvents"]
    t0 = min(e["ts"] for e in events if e.get("ph") != "M")
    keep = [e for e in events if e.get("ph") == "M" or e["ts"] < t0 + 4_000]
    return {**doc, "traceEvents": keep}


BASE = _base()
BASE_TEXT = json.dumps(BASE).encode()
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=os.environ.get("FUZZ_EXAMPLES") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Strings that look numeric to one parser and not to another.
TRICKY = ["", " ", "-", "--5", " 7 ", "²", "٣", "0x1f", "1e5", "1_000", "nan", "inf", "-0",
          "9" * 30, "\u0000", "é", "[]", "{}"]  # fmt: skip
ODD_VALUES = st.one_of(
    st.sampled_from(TRICKY),
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def byte_edits(size: int) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    """One to four places in a text of ``size`` bytes, each with 0-3 bytes to put there."""
    return st.lists(
        st.tuples(st.integers(0, size - 1), st.binary(max_size=3)), min_size=1, max_size=4
    )


def apply_edits(data: bytes, edits: list[tuple[int, bytes]]) -> bytes:
    """``data`` with each edit's bytes written over it (no bytes: one byte removed)."""
    out = bytearray(data)
    for pos, new in edits:
        out[pos : pos + len(new) or pos + 1] = new
    return bytes(out)


#: Event fields a trace-event reader depends on.
EVENT_FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s"]
Pick = tuple[int, str, Any]


def field_picks(fields: list[str]) -> st.SearchStrategy[list[Pick]]:
    """One to four (event index, field, new value or ``"<delete>"``) of :data:`BASE`;
    a field ``"args.X"`` names key X of the event's args."""
    return st.lists(
        st.tuples(
            st.integers(0, len(BASE["traceEvents"]) - 1),
            st.sampled_from(fields),
            st.one_of(st.just("<delete>"), ODD_VALUES),
        ),
        min_size=1,
        max_size=4,
    )


def damaged(picks: list[Pick]) -> bytes:
    """:data:`BASE`'s text with ``picks`` applied."""
    doc = json.loads(BASE_TEXT)
    for i, key, value in picks:
        node = doc["traceEvents"][i]
        if key.startswith("args."):
            node, key = node.get("args"), key[5:]
            if not isinstance(node, dict):
                continue
        if value == "<delete>":
            node.pop(key, None)
        else:
            node[key] = value
    return json.dumps(doc).encode()
