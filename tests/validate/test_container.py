"""EV105 and baseTimeNanoseconds: reported only where ignoring it misplaces one file against
another (one rank's file of a larger job), never for a file whose events share the base."""

from __future__ import annotations

from typing import Any

import pytest

from echo_view.validate.container import ContainerFacts, check_container
from echo_view.validate.findings import Report


def _ev105(top: dict[str, Any]) -> list[str]:
    report = Report()
    check_container(ContainerFacts(path="t.json", top=top, events=3), report)
    return [f.message for t in report if t.code == "EV105" for f in t.first]


def test_base_shared_by_the_whole_file_is_not_reported() -> None:
    assert _ev105({"traceEvents": [], "baseTimeNanoseconds": 5}) == []
    assert _ev105({"baseTimeNanoseconds": 5, "metadata": {"ranks": [0, 1]}}) == []


@pytest.mark.parametrize("world", [2, 64])
def test_base_of_one_ranks_file_is_reported(world: int) -> None:
    top = {"baseTimeNanoseconds": 5, "distributedInfo": {"rank": 1, "world_size": world}}
    (message,) = _ev105(top)
    assert message.startswith("2 key(s) ignored by Perfetto: baseTimeNanoseconds, distributedInfo")
    assert "lines up with the other ranks' files in Perfetto only where they share its base" in (
        message
    )


@pytest.mark.parametrize("info", [{"rank": 0, "world_size": 1}, {"world_size": True}, "x"])
def test_single_rank_jobs_keep_the_base_unreported(info: Any) -> None:
    (message,) = _ev105({"baseTimeNanoseconds": 5, "distributedInfo": info})
    assert message == "1 key(s) ignored by Perfetto: distributedInfo"


def test_other_ignored_keys_are_still_reported() -> None:
    (message,) = _ev105({"deviceProperties": [], "schemaVersion": 1})
    assert message == "2 key(s) ignored by Perfetto: deviceProperties, schemaVersion"
