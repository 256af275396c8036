"""``check`` on every real trace in ../shared/data and samples/: no crash, sane findings, and
counts that agree with independent computations on the raw JSON."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from echo_view.units import EXACT_FLOAT_US_LIMIT
from tests.conftest import SAMPLES, shared_path
from tests.exporters.perfetto_checks import json_slices, partial_overlaps
from tests.validate.helpers import run_check


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)


def test_check_reads_every_real_trace_without_crashing() -> None:
    data = shared_path("data")
    files = sorted(data.rglob("*.json.gz"))
    assert len(files) == 24
    files += sorted(data.rglob("*.sqlite.gz"))  # the Nsight Systems captures
    assert len(files) == 27
    report = run_check(data)
    assert {f.path for f in report.files} == {str(f) for f in files}
    assert all(f.usable and f.events > 0 for f in report.files)
    assert report.exit_code() in (0, 1)
    # Known properties of the collection (see docs/validation-codes.md for the table).
    assert report.count("EV301") > 0  # children ending after their parents exist
    assert report.count("EV212") > 0  # Kineto's relative µs floats beyond 2**42


def test_samples_job_is_consistent_across_ranks() -> None:
    report = run_check(SAMPLES / "dlrm_kineto")
    assert len(report.files) == 8 and {f.rank for f in report.files} == set(range(8))
    for code in ("EV701", "EV702", "EV703", "EV704", "EV705", "EV706", "EV707", "EV709"):
        assert report.count(code) == 0, [f.text() for f in report.tallies[code].first]


def test_precision_count_matches_the_raw_text() -> None:
    path = SAMPLES / "hta_nccl" / "nccl_data.json.gz"
    doc = _load(path)
    expected = sum(
        1
        for e in doc["traceEvents"]
        for f in ("ts", "dur")
        if isinstance(e.get(f), Decimal)
        and abs(e[f]) >= Decimal(EXACT_FLOAT_US_LIMIT)
        and e[f] != e[f].to_integral_value()
    )
    report = run_check(path)
    assert expected > 0
    # One finding per event (ts and dur of one event count once).
    per_event = sum(
        1
        for e in doc["traceEvents"]
        if any(
            isinstance(e.get(f), Decimal)
            and abs(e[f]) >= Decimal(EXACT_FLOAT_US_LIMIT)
            and e[f] != e[f].to_integral_value()
            for f in ("ts", "dur")
        )
    )
    assert report.count("EV212") == per_event <= expected


@pytest.mark.parametrize(
    "rel",
    [
        "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "tracelens/mi300/resnet_act_checkpoint.json.gz",
        "deepseek-profile-data/train.json.gz",
    ],
)
def test_overlap_count_matches_an_independent_replay(rel: str) -> None:
    path = shared_path("data", rel)
    doc = _load(path)  # exact decimals: a float parse would move ends by a few ns
    expected = len(partial_overlaps(json_slices(doc)))
    assert run_check(path).count("EV301") == expected


def test_launch_links_on_a_real_trace() -> None:
    """Every kernel of DLRM rank 0 has its launch in the file (EV601 clean), and no kernel
    starts before its launch (EV603)."""
    report = run_check(SAMPLES / "dlrm_kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz")
    assert report.count("EV601") == 0
    assert report.count("EV603") == 0
