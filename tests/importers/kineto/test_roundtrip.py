"""Reading back echo-view's own Perfetto JSON export: ranks, lanes, steps and clock survive."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from echo_view.model import ClockAlignment, Job, LaneKind
from exporters import perfetto_json
from importers.kineto import KinetoImporter
from tests.importers.kineto.files import DLRM


@pytest.fixture(scope="module")
def dlrm() -> Job:
    return KinetoImporter().read([DLRM])


def gpu_lanes(job: Job) -> dict[int, set[tuple[int, int]]]:
    return {
        t.rank: {(ln.device, ln.stream) for ln in t.lanes if ln.kind == LaneKind.GPU_STREAM}
        for t in job
    }


def test_export_reads_back_as_the_same_job(dlrm: Job, tmp_path: Path) -> None:
    shifted = replace(
        dlrm,
        alignment=ClockAlignment("collective-end", tuple(range(0, 8000, 1000)), 1234, "test"),
        predicted=True,
    )
    path = tmp_path / "job.json.gz"
    perfetto_json.PerfettoJsonExporter().write(shifted, path)
    back = KinetoImporter().read([path])
    assert back.ranks == dlrm.ranks and back.world_size == 8 and back.predicted
    # The export applied the offsets, so they are zero now; method and error are kept.
    assert back.alignment.method == "collective-end"
    assert back.alignment.offsets_ns == (0,) * 8 and back.alignment.uncertainty_ns == 1234
    assert gpu_lanes(back) == gpu_lanes(dlrm)
    for a, b in zip(dlrm, back, strict=True):
        off = shifted.offset_ns(a.rank)
        assert b.metadata["rank_source"] == "echo-view export"
        # Names, SMs, memory and compute capability: read back they were lost (GPU unknown,
        # so a simulation of the export had no cluster).
        assert b.devices == a.devices and a.devices[0].name == "Tesla V100-SXM2-32GB"
        assert b.steps.number.tolist() == a.steps.number.tolist()
        assert b.steps.start_ns.tolist() == [int(s) + off for s in a.steps.start_ns]
        assert Counter(a.kind(i) for i in range(len(a))) == Counter(
            b.kind(i) for i in range(len(b))
        )
        assert sorted(int(s) + off for s in a.events.start_ns) == sorted(
            int(s) for s in b.events.start_ns
        )
        assert len(b.collectives) == len(a.collectives) == 8
        assert len(b.flows) == len(a.flows)
