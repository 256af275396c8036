"""``--workers`` / ``--scheduler``: every command that reads a job prints the same bytes (and
writes the same files) whether its rank files are read in this process or on a real
``dask.distributed`` cluster of worker processes."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from echo_view.analysis.summary import summarize
from echo_view.cli import main
from echo_view.cli.parallel import parallel_of
from echo_view.errors import UsageError
from echo_view.formats import json_text
from echo_view.loading import SERIAL, Parallel, read_job
from tests.cli.many_ranks import DLRM, many_ranks

#: Every command that reads a measured job, on the 8-rank DLRM sample; ``{out}`` is a folder
#: for the files a command writes.
COMMANDS = {
    "info": ["info", str(DLRM), "--json"],
    "info-text": ["info", str(DLRM)],
    "check": ["check", str(DLRM), "--json"],
    "export": ["export", str(DLRM), "-o", "{out}/job.json"],
    "diff": ["diff", str(DLRM), str(DLRM), "--json"],
    "simulate": ["simulate", str(DLRM), "--json", "-o", "{out}/predicted.json"],
    "interference": ["interference", str(DLRM), "--json"],
    "calibrate-compute": ["calibrate", "compute", str(DLRM), "-o", "{out}/c.toml", "--json"],
    "calibrate-interference": ["calibrate", "interference", str(DLRM), "-o", "{out}/i.toml"],
}  # fmt: skip
#: The same on a job of two Nsight Systems captures (read one capture a worker, the second
#: capture's ranks numbered after the first's).
NSYS = [str(Path(__file__).parents[2] / "samples" / "nsys" / f"mfu_2gpu_{w}.sqlite.gz")
        for w in ("before", "after")]  # fmt: skip
NSYS_COMMANDS = {
    "nsys-info": ["info", *NSYS, "--json"],
    "nsys-check": ["check", *NSYS, "--json"],
    "nsys-export": ["export", *NSYS, "-o", "{out}/job.json"],
    "nsys-interference": ["interference", *NSYS, "--json"],
}


def _run(
    argv: list[str], out: Path, extra: list[str], capfd: pytest.CaptureFixture[str]
) -> tuple[int, bytes, str, dict[str, bytes]]:
    out.mkdir()
    code = main([a.replace("{out}", str(out)) for a in argv] + extra)
    printed = capfd.readouterr()
    stdout = printed.out.replace(str(out), "OUT")  # (commands print where they wrote)
    if argv[0] == "simulate":  # its wall-clock seconds differ from run to run
        doc = json.loads(stdout)
        doc.pop("seconds")
        stdout = json.dumps(doc)
    files = {p.name: p.read_bytes().replace(bytes(out), b"OUT") for p in sorted(out.iterdir())}
    return code, stdout.encode(), printed.err.replace(str(out), "OUT"), files


@pytest.mark.slow
def test_every_command_prints_the_same_on_a_dask_cluster(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from echo_view import spool
    from echo_view.workers import dask_client

    # Every result of the cluster's workers, however small, comes back through shared memory
    # (where the machine has it), its args text mapped rather than copied, so that the
    # comparisons below cover that path too.
    loaded: list[str] = []
    load = spool.Spooled.load

    def counted(self: spool.Spooled) -> object:
        loaded.append(self.path)
        return load(self)

    folders: list[str] = []
    make_folder = spool.spool_folder

    @contextmanager
    def recorded() -> Iterator[spool.SpoolTo | None]:
        with make_folder() as to:
            if to is not None:
                folders.append(to.folder)
            yield to

    monkeypatch.setattr(spool, "MIN_BYTES", 0)
    monkeypatch.setattr(spool, "TEXT_MIN_BYTES", 1)  # every rank's args text mapped, too
    monkeypatch.setattr(spool.Spooled, "load", counted)
    monkeypatch.setattr("echo_view.loading.spool_folder", recorded)
    with dask_client(workers=2) as client:
        address = client.scheduler.address
        for name, argv in {**COMMANDS, **NSYS_COMMANDS}.items():
            serial = _run(argv, tmp_path / f"{name}-serial", ["--workers", "1"], capfd)
            remote = _run(argv, tmp_path / f"{name}-dask", ["--scheduler", address], capfd)
            assert serial[0] == remote[0] == 0, (name, serial[2], remote[2])
            assert serial[1:] == remote[1:], name
            assert serial[3] or argv[0] not in ("export", "simulate", "calibrate"), name
        # A bad rank file: the same one-line error, and nothing from the workers on stderr.
        bad = tmp_path / "bad"
        bad.mkdir()
        for f in sorted(DLRM.iterdir())[:3]:
            (bad / f.name).write_bytes(f.read_bytes())
        text = gzip.decompress(sorted(DLRM.iterdir())[3].read_bytes())
        at = text.index(b'"ts": ') + 6
        (bad / "rank3.json").write_bytes(text[:at] + b'"soon"' + text[text.index(b",", at) :])
        for argv in (["info", str(bad)], ["interference", str(bad)]):
            serial = _run(argv, tmp_path / f"bad-{argv[0]}-serial", ["--workers", "1"], capfd)
            remote = _run(argv, tmp_path / f"bad-{argv[0]}-dask", ["--scheduler", address], capfd)
            assert serial[0] == remote[0] == 2
            assert serial[2] == remote[2] and serial[2].count("\n") == 1
            assert "rank3.json: traceEvents[" in serial[2]
        # check reports the damaged file (an error finding, exit 1) the same wherever it is
        # read; a file over the inflation limit stops it with the same one line (exit 2).
        for name, argv, code in (
            ("bad-check", ["check", str(bad), "--json"], 1),
            ("limit-check", ["--max-inflated-bytes", "4096", "check", str(DLRM)], 2),
        ):
            serial = _run(argv, tmp_path / f"{name}-serial", ["--workers", "1"], capfd)
            remote = _run(argv, tmp_path / f"{name}-dask", ["--scheduler", address], capfd)
            assert serial[0] == remote[0] == code, (name, serial[2])
            assert serial[1:] == remote[1:], name
            if code == 1:
                assert b'"path":"' + str(bad / "rank3.json").encode() in serial[1]
                assert b'"EV2' in serial[1] and not serial[2]
            else:
                assert serial[2].count("\n") == 1 and "--max-inflated-bytes" in serial[2]
                assert "worker0_step_12" in serial[2]  # the first file, named
        # The rank files were read (and checked) by the cluster's workers.
        prefixes = client.run_on_scheduler(
            lambda dask_scheduler: sorted(dask_scheduler.task_prefixes)
        )
        assert {"read_rank_file", "check_file"} <= set(prefixes)  # (no leading underscore)
        # 64 ranks: info, summarised rank by rank where each is read, prints what summarising
        # the whole job prints; check (each file's rules run where it is read) and
        # interference (each rank measured there) print the same on the cluster as serially
        # (and serially what the whole input gives: tests/cli/test_check.py,
        # test_interference.py).
        many = many_ranks(tmp_path / "many", 64)
        whole = json_text(summarize(read_job([many], parallel=SERIAL)).to_json()).encode()
        printed = {}
        for argv in (
            ["info", str(many), "--json"],
            ["info", str(many)],
            ["check", str(many), "--json"],
            ["check", str(many)],
            ["interference", str(many), "--json"],
        ):
            name = argv[0] + "".join(argv[2:])  # info, info--json, ...
            serial = _run(argv, tmp_path / f"many{name}-serial", ["--workers", "1"], capfd)
            remote = _run(argv, tmp_path / f"many{name}-dask", ["--scheduler", address], capfd)
            assert serial[0] == remote[0] == 0, (serial[2], remote[2])
            assert serial[1:] == remote[1:], argv
            printed[name] = serial[1]
        assert b"/many\nranks 0-63 (64 of world size 64)" in printed["info"]
        assert printed["check--json"].count(b'"usable":true') == 64
        assert b'"samples":' in printed["interference--json"]
        json_run = _run(["info", str(many), "--json"], tmp_path / "many-again", [], capfd)
        assert json_run[1] == whole
    if spool.SHM.is_dir() and sys.platform.startswith("linux"):
        assert len(loaded) > 64  # every file of every command above
        assert folders and not any(Path(f).exists() for f in folders)  # none left behind
    # --workers N starts its own local cluster of N processes.
    local = _run(COMMANDS["info"], tmp_path / "info-local", ["--workers", "2"], capfd)
    serial = _run(COMMANDS["info"], tmp_path / "info-serial-2", ["--workers", "1"], capfd)
    assert local[:2] == serial[:2]


def test_workers_and_scheduler_are_checked() -> None:
    assert parallel_of(argparse.Namespace(workers=None, scheduler=None)) == Parallel()
    assert parallel_of(argparse.Namespace(workers=3, scheduler=None)) == Parallel(workers=3)
    with pytest.raises(UsageError, match="exclude each other"):
        parallel_of(argparse.Namespace(workers=2, scheduler="tcp://127.0.0.1:8786"))
    with pytest.raises(UsageError, match="--workers must be between 1 and "):
        parallel_of(argparse.Namespace(workers=0, scheduler=None))


@pytest.mark.parametrize("argv", list(COMMANDS.values()), ids=list(COMMANDS))
def test_every_job_reading_command_takes_both_options(argv: list[str]) -> None:
    from echo_view.cli import build_parser

    command = argv[:2] if argv[0] == "calibrate" else argv[:1]
    help_text = build_parser(command).format_help()
    sub = build_parser(command)._subparsers._group_actions[0].choices[command[0]]  # type: ignore[union-attr]
    if len(command) == 2:
        sub = sub._subparsers._group_actions[0].choices[command[1]]  # type: ignore[union-attr]
    options = {o for a in sub._actions for o in a.option_strings}
    assert {"--workers", "--scheduler"} <= options, (command, help_text[:80])
