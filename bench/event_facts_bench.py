"""What the typed event facts (launches, operator inputs, syncs) cost once a command reads them:
CPU time to read them from the args on first use, and their bytes beside the event table's.

    python bench/event_facts_bench.py [TRACE ...]

Default inputs: the two ``bench/data`` files of ``bench/ingest_import_bench.py`` (run it once to
generate them) and, where ``../shared`` exists, ``hta-tests/trace_diff/control`` (recorded
shapes); each is read in this process (``echo_view.loading.read_job``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import read_job  # noqa: E402

DEFAULT = [
    ROOT / "bench/data/df_index_resolver_x200MB.json",
    ROOT / "bench/data/rank-0_x200MB.json",
    ROOT.parent / "shared/data/hta-tests/trace_diff/control/control.json.gz",
]
_EVENT_COLUMNS = ("kind", "start_ns", "dur_ns", "name", "cat", "lane", "correlation",
                  "external_id", "args_offsets")  # fmt: skip


def measure(path: Path) -> str:
    trace = read_job([path]).traces[0]
    ev = trace.events
    base = sum(getattr(ev, c).nbytes for c in _EVENT_COLUMNS) + len(ev.args_blob)
    c0 = time.process_time()
    la, oi, sy = trace.launches, trace.op_inputs, trace.syncs
    cpu = time.process_time() - c0
    typed = sum(getattr(la, c).nbytes for c in la.__dataclass_fields__)
    typed += sum(getattr(oi, c).nbytes for c in ("event", "dims", "types", "concrete"))
    typed += sum(getattr(sy, c).nbytes for c in sy.__dataclass_fields__)
    n = len(ev)
    return (
        f"{path.name}: {n} events, event table {base / n:.0f} B/event; typed tables "
        f"{typed / n:.1f} B/event ({typed / base * 100:.1f}%: {len(la)} launches, {len(oi)} "
        f"op inputs, {len(oi.values)} distinct records, {len(sy)} syncs); read on first use "
        f"in {cpu:.2f} s CPU"
    )


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [p for p in DEFAULT if p.exists()]
    if not paths:
        raise SystemExit("no inputs: run bench/ingest_import_bench.py once, or give traces")
    for path in paths:
        print(measure(path), flush=True)


if __name__ == "__main__":
    main()
