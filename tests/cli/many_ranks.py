"""A many-rank Kineto job for the tests of commands that read rank files apart."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.cli.hostile_io import SAMPLES

DLRM = SAMPLES / "dlrm_kineto"


def many_ranks(folder: Path, ranks: int) -> Path:
    """A ``ranks``-rank job: rank ``r`` is DLRM rank ``r % 8``, its ``distributedInfo`` saying
    rank ``r`` of ``ranks`` (the shape of bench/ingest_bench.py's jobs, without the repeats)."""
    folder.mkdir()
    texts = [gzip.decompress(f.read_bytes()) for f in sorted(DLRM.glob("*.json.gz"))]
    key = b'"distributedInfo": '
    for r in range(ranks):
        text = texts[r % len(texts)]
        at = text.rindex(key) + len(key)
        end = text.index(b"}", at) + 1
        dist = {**json.loads(text[at:end]), "rank": r, "world_size": ranks}
        (folder / f"rank{r}.json").write_bytes(text[:at] + json.dumps(dist).encode() + text[end:])
    return folder
