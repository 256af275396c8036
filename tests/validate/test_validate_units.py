"""Building blocks of the validator: exact times, flow ids, Perfetto's stack replay, codes and
the report, streaming in chunks, and the cross-rank rules on model jobs."""

from __future__ import annotations

import gzip
from decimal import Decimal

import msgspec
import numpy as np
import pytest

from echo_view.model import ClockAlignment, CollectiveKind, EventKind, Job, LaneKind, TraceBuilder
from echo_view.model.trace_rules import parse_flow_id, partial_overlaps
from echo_view.units import us_texts_to_ns
from echo_view.validate import (
    CODES,
    FileValidator,
    Report,
    Selection,
    check_job,
    summaries_from_job,
    validate_document,
)
from echo_view.validate.events import UNSET, decode_events
from echo_view.validate.times import (
    T_BIG_FLOAT,
    T_FLOAT,
    T_INT,
    T_INVALID,
    T_MISSING,
    T_RANGE,
    T_STRING,
    times_to_ns,
)
from tests.conftest import SAMPLES


def test_times_convert_exactly_in_every_form() -> None:
    ns, kind = times_to_ns(
        [
            1694128201436255,
            12.5,
            Decimal("4458676524648.797"),
            UNSET,
            "7.25",
            None,
            True,
            "x",
            1e300,
        ]
    )
    assert ns[:5].tolist() == [1694128201436255000, 12500, 4458676524648797, 0, 7250]
    assert kind.tolist() == [
        T_INT,
        T_FLOAT,
        T_BIG_FLOAT,
        T_MISSING,
        T_STRING,
        T_INVALID,
        T_INVALID,
        T_INVALID,
        T_RANGE,
    ]


def test_big_float_times_beyond_decimal_range_are_out_of_range() -> None:
    # A fuzzer's one-byte edit made a time 4458676524648e797: decimal raised Overflow (a
    # traceback from `check`); 1e500000 would have become a 500,000-digit integer.
    huge = [Decimal("4458676524648e797"), Decimal("1e999999999"), Decimal("-1e500000")]
    ns, kind = times_to_ns([*huge, Decimal("4458676524648.797")])
    assert kind.tolist() == [T_RANGE, T_RANGE, T_RANGE, T_BIG_FLOAT]
    assert ns[3] == 4458676524648797
    ns, kind = times_to_ns(huge)  # all of one type: the bulk path, then one by one
    assert kind.tolist() == [T_RANGE] * 3


@pytest.mark.parametrize(
    "value",
    [
        -(2**63),  # int64's least: its abs is itself, and its ns wrapped to 0 in bulk
        2**63 - 1,
        9_223_372_036_854_776,  # one µs past the largest whole µs that ns hold
        Decimal("9223372036854775.5"),  # past it by less than 1 µs: bulk converted these
        Decimal("-9223372036854775.807"),
    ],
)
def test_the_bulk_path_bounds_times_as_one_by_one(value: object) -> None:
    for values in ([value], [value, value], [value, 0 if isinstance(value, int) else Decimal(0)]):
        ns, kind = times_to_ns(values)
        assert kind[0] == T_RANGE and ns[0] == 0
    # The edge itself converts in either form.
    edge = [9_223_372_036_854_775, -9_223_372_036_854_775]
    assert times_to_ns(edge)[0].tolist() == [e * 1000 for e in edge]
    assert times_to_ns([Decimal(e) for e in edge])[0].tolist() == [e * 1000 for e in edge]


def test_sub_ns_digits_round_half_to_even_as_the_importer_rounds() -> None:
    texts = ["4458676524648.7975", "4458676524648.7985", "-4458676524648.7975"]
    ns, kind = times_to_ns([Decimal(t) for t in texts])  # the bulk path truncated before
    assert ns.tolist() == [4458676524648798, 4458676524648798, -4458676524648798]
    assert kind.tolist() == [T_BIG_FLOAT] * 3
    assert ns.tolist() == us_texts_to_ns([t.encode() for t in texts])[0].tolist()
    one = [times_to_ns([t])[0][0] for t in texts]  # numeric strings: one by one
    assert one == ns.tolist()


def test_decoder_keeps_big_float_text() -> None:
    (e,) = decode_events(b'[{"ph":"X","ts":1707417525512110.123,"dur":0.001}]')
    assert e.ts == Decimal("1707417525512110.123") and e.dur == 0.001
    # A double cannot hold it: its nearest value is 123 ns away.
    assert round(float(e.ts) * 1000) != 1707417525512110123


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (-1, 2**64 - 1),
        ("1f", 31),
        ("0x1F", 31),
        ("", None),
        ("zz", None),
        (True, None),
        ({"global": "0x10"}, 16),
        ({"local": 16}, 16 ^ (1 << 63)),
        (1.5, None),
    ],
)
def test_flow_ids_parse_like_perfetto(value: object, expected: int | None) -> None:
    assert parse_flow_id(value) == expected


def test_stack_replay_spills_partial_overlaps_only() -> None:
    # parent [0,10) holds child [2,5); [5,12) crosses the parent's end; [10,11) follows it.
    starts, ends = [0, 2, 5, 10], [10, 5, 12, 11]
    assert partial_overlaps(starts, ends) == [(2, 0)]
    # Equal ends nest; a slice that starts where the previous ends is a sibling.
    assert partial_overlaps([0, 0, 4], [8, 8, 8]) == []
    assert partial_overlaps([0, 3], [3, 6]) == []


def test_selection_accepts_prefixes_and_rejects_typos() -> None:
    sel = Selection.parse(["EV3,EV401"], ["EV303"])
    assert sel.wants("EV301") and sel.wants("EV401") and not sel.wants("EV303")
    assert not sel.wants("EV402")
    with pytest.raises(ValueError, match="EV9"):
        Selection.parse(["EV9"])


def test_a_selection_of_nothing_is_refused() -> None:
    # A blank --select read as "all"; ignoring all that was selected checked nothing and
    # reported the trace clean.
    for select in ([""], [","]):
        with pytest.raises(ValueError, match="--select names no code"):
            Selection.parse(select)
    with pytest.raises(ValueError, match="leave no code to check"):
        Selection.parse(["EV3"], ["EV3"])
    assert Selection.parse([], [""]) == Selection()  # ignoring nothing checks everything


def test_report_counts_all_but_keeps_a_few() -> None:
    report = Report(keep=2)
    events = [{"ph": "X", "name": "e", "ts": i, "pid": 1, "tid": 1} for i in range(10)]
    validate_document({"traceEvents": events}, report=report)
    assert report.count("EV208") == 10 and len(report.tallies["EV208"].first) == 2
    assert report.exit_code() == 1


def test_codes_are_documented() -> None:
    doc = (SAMPLES.parent / "docs" / "validation-codes.md").read_text()
    missing = [c for c in CODES if f"### {c}" not in doc]
    assert not missing


def test_streaming_in_chunks_matches_one_pass() -> None:
    raw = gzip.decompress((SAMPLES / "hta_nccl" / "nccl_data.json.gz").read_bytes())
    events = msgspec.json.decode(raw, type=dict)["traceEvents"]
    evs = decode_events(msgspec.json.encode(events))

    def run(step: int) -> dict[str, int]:
        report = Report()
        v = FileValidator("t", report)
        for lo in range(0, len(evs), step):
            v.feed(evs[lo : lo + step], lo)
        v.finish()
        return {t.code: t.count for t in report}

    whole = run(len(evs))
    assert whole == run(997) == run(10_000)
    assert whole.get("EV212", 0) > 0


def _rank(
    rank: int,
    kinds: list[CollectiveKind],
    nbytes: int = 4096,
    dtype: str = "Float",
    shift_ns: int = 0,
    step_ns: int = 1_000_000,
) -> TraceBuilder:
    b = TraceBuilder(rank, source=f"rank{rank}")
    stream = b.gpu_stream(0, 7)
    cpu = b.lane(LaneKind.CPU_THREAD, 100 + rank, 100 + rank)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, step_ns, cpu)
    g = b.group("0", (0, 1, 2))
    for i, kind in enumerate(kinds):
        row = b.event(EventKind.KERNEL, f"nccl{kind.label}", 10_000 * i + shift_ns, 5_000, stream)
        b.collective(row, kind, nbytes=nbytes, dtype=dtype, group=g, seq=i)
    b.step(1, 0, step_ns)
    return b


def _job(*builders: TraceBuilder) -> Job:
    traces = tuple(b.build() for b in builders)
    return Job(traces, ClockAlignment("none", (0,) * len(traces), 0), world_size=3)


AR, AG = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER


def _codes(job: Job) -> dict[str, int]:
    report = Report()
    check_job(summaries_from_job(job), report, "job")
    return {t.code: t.count for t in report}


def test_cross_rank_rules_on_a_model_job() -> None:
    assert _codes(_job(_rank(0, [AR, AG]), _rank(1, [AR, AG]), _rank(2, [AR, AG]))) == {}
    # Rank 2 misses sequence number 1: the others would hang.
    assert "EV703" in _codes(_job(_rank(0, [AR, AG]), _rank(1, [AR, AG]), _rank(2, [AR])))
    assert "EV704" in _codes(_job(_rank(0, [AR, AG]), _rank(1, [AG, AR]), _rank(2, [AR, AG])))
    assert "EV705" in _codes(_job(_rank(0, [AR]), _rank(1, [AR]), _rank(2, [AR], nbytes=8)))
    assert "EV706" in _codes(_job(_rank(0, [AR]), _rank(1, [AR]), _rank(2, [AR], dtype="Half")))
    skew = _codes(
        _job(_rank(0, [AR, AG]), _rank(1, [AR, AG]), _rank(2, [AR, AG], shift_ns=900_000))
    )
    assert skew.get("EV707") == 1
    slow = _codes(_job(_rank(0, [AR]), _rank(1, [AR]), _rank(2, [AR], step_ns=3_000_000)))
    assert slow.get("EV708") == 1


def test_step_summary_from_model() -> None:
    (s,) = summaries_from_job(_job(_rank(0, [AR])))[:1]
    assert s.kind == ["all_reduce"] and s.seq.tolist() == [0]
    assert np.array_equal(s.step_number, [1])


def test_a_flow_at_the_start_of_a_zero_length_slice_is_inside_it() -> None:
    """EV405 follows the binding rule the importers use (echo_view.model.trace_rules): a point
    at the start of a zero-length slice binds to it; one at a slice's end is outside."""
    slice_ = {"ph": "X", "name": "launch", "ts": 5, "dur": 0, "pid": 1, "tid": 1}
    end = {"ph": "X", "name": "k", "ts": 9, "dur": 1, "pid": 1, "tid": 2}

    def flows(s_ts: int) -> list[dict[str, object]]:
        s = {"ph": "s", "id": 1, "cat": "ac2g", "name": "f", "ts": s_ts, "pid": 1, "tid": 1}
        f = {"ph": "f", "bp": "e", "id": 1, "cat": "ac2g", "name": "f", "ts": 9, "pid": 1}
        return [s, {**f, "tid": 2}]

    inside, after = Report(), Report()
    validate_document({"traceEvents": [slice_, end, *flows(5)]}, report=inside)
    validate_document({"traceEvents": [slice_, end, *flows(6)]}, report=after)
    assert inside.count("EV405") == 0
    assert after.count("EV405") == 1
