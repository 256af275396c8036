"""nccl-tests log parser: the real Echo logs (A100, 1-128 ranks), newer nccl-tests output, and
located errors on malformed input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from echo_view.errors import InputError
from echo_view.model import CollectiveKind
from importers.nccl_tests import is_nccl_tests_log, parse_nccl_tests
from tests.conftest import SAMPLES

ECHO = SAMPLES / "echo_nccl_tests"


def _log(name: str) -> Path:
    return ECHO / name


@pytest.mark.parametrize(
    ("name", "ranks", "hosts", "gpus_per_thread", "rows"),
    [
        ("nccl_1.log", 1, 1, 1, 28),
        ("nccl_2.log", 2, 1, 2, 28),
        ("nccl_4.log", 4, 1, 4, 28),
        ("nccl_8.log", 8, 1, 8, 28),
        ("nccl_16.log", 16, 2, 1, 25),
        ("nccl_32.log", 32, 4, 1, 23),
        ("nccl_64.log", 64, 8, 1, 23),
        ("nccl_128.log", 128, 16, 1, 23),
    ],
)
def test_echo_logs(name: str, ranks: int, hosts: int, gpus_per_thread: int, rows: int) -> None:
    log = parse_nccl_tests(_log(name))
    assert log.nranks == ranks
    assert log.nodes == hosts
    assert log.gpus_per_thread == gpus_per_thread
    assert len(log.rows) == rows
    assert log.device_names == ("A100-SXM4-40GB",)
    # Every host holds the same number of ranks: the 128-rank log's "[1,0]<stdout>:" tag that
    # interleaved into a host name must not create a 17th host.
    assert set(log.ranks_per_host) == {ranks // hosts}
    # The op is all-reduce (sum, float): inferred from the redop column and busbw/algbw.
    assert log.collective == CollectiveKind.ALL_REDUCE
    assert all(r.redop == "sum" and r.dtype == "float" for r in log.rows)
    sizes = [r.nbytes for r in log.rows]
    assert sizes == sorted(sizes)
    assert all(r.time_ns > 0 and r.in_place_time_ns is not None for r in log.rows)


def test_values_are_exact() -> None:
    log = parse_nccl_tests(_log("nccl_8.log"))
    last = log.rows[-1]
    assert (last.nbytes, last.count) == (1073741824, 268435456)
    assert last.time_ns == 8_139_200 and last.in_place_time_ns == 8_139_600
    assert (last.algbw_gbs, last.busbw_gbs) == (131.92, 230.86)
    assert log.avg_busbw_gbs == pytest.approx(59.3571)
    assert log.params["nGpus"] == "8" and log.params["warmup iters"] == "5"
    big = parse_nccl_tests(_log("nccl_16.log"))
    assert big.rows[-1].nbytes == 17179869184 and big.rows[-1].time_ns == 251_757_000
    # busbw = algbw * 2(n-1)/n, as printed (the basis of the inference).
    r = big.rows[-1]
    assert r.busbw_gbs == pytest.approx(r.algbw_gbs * 2 * 15 / 16, rel=1e-3)


# Output of a recent nccl-tests (version line, test name, Group and root columns, #wrong),
# with an NCCL INFO line in the middle as real runs have.
NEW_FORMAT = (Path(__file__).parent / "nccl_tests_data" / "all_gather_2ranks.log").read_text()


def test_newer_nccl_tests_output() -> None:
    log = parse_nccl_tests("run.log", NEW_FORMAT)
    assert log.collective == CollectiveKind.ALL_GATHER
    assert log.collective_source == "test line"
    assert log.nccl_version_code == 22203 and log.nccl_tests_version == "2.17.6"
    assert log.nranks == 2 and log.nodes == 2
    assert log.device_names == ("NVIDIA H100 80GB HBM3",)
    assert [r.nbytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[0].root == -1 and log.rows[0].redop == "none"
    assert log.rows[2].time_ns == 21_000 and log.rows[2].in_place_time_ns == 20_900


def test_collective_from_file_name_and_override() -> None:
    body = NEW_FORMAT.replace("# Collective test starting: all_gather_perf\n", "")
    assert parse_nccl_tests("x/reduce_scatter_perf.log", body).collective == (
        CollectiveKind.REDUCE_SCATTER
    )
    with pytest.raises(InputError, match="which collective"):
        parse_nccl_tests("x/run.log", body)
    log = parse_nccl_tests("x/run.log", body, collective=CollectiveKind.ALL_TO_ALL)
    assert log.collective == CollectiveKind.ALL_TO_ALL and log.collective_source == "given"


def test_malformed_row_names_file_and_line() -> None:
    bad = NEW_FORMAT.replace("21.00    0.20", "21.00    oops")
    with pytest.raises(InputError) as info:
        parse_nccl_tests("bad.log", bad)
    assert info.value.path == "bad.log"
    assert info.value.where == "line 15"
    assert "algbw" in info.value.message
    truncated = NEW_FORMAT.replace("0.10    N/A    20.90    0.20    0.10    N/A", "0.10")
    with pytest.raises(InputError, match="columns") as info:
        parse_nccl_tests("short.log", truncated)
    assert info.value.where == "line 15"
    # A 5,000-digit size (past Python's int() limit) is quoted cut to 80 characters.
    huge = NEW_FORMAT.replace("        4096           512", "9" * 5000 + "           512", 1)
    with pytest.raises(InputError, match=r"size '9+\.\.\.' is not an integer") as info:
        parse_nccl_tests("huge.log", huge)
    assert len(info.value.message) < 120


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # Both were left out of the fit without a word (a row with time 0, and a negative
        # size read as chatter).
        ("2048  256  float  none  -1  0.00  0.10  0.05  0  20.10  0.10  0.05  0", "time '0.00'"),
        ("2048  256  float  none  -1  1e-300  0.10  0.05  0  20.1  0.1  0.05  0", "under a nano"),
        ("-5  256  float  none  -1  20.40  0.10  0.05  0  20.10  0.10  0.05  0", "size -5 is"),
    ],
)
def test_rows_no_collective_ran_are_refused_at_their_line(row: str, message: str) -> None:
    good = "2048           256     float    none      -1    20.40    0.10    0.05      0    20.10"
    assert good in NEW_FORMAT
    line = next(n for n, text in enumerate(NEW_FORMAT.splitlines(), 1) if good in text)
    bad = "\n".join(row if good in t else t for t in NEW_FORMAT.splitlines())
    with pytest.raises(InputError, match=message) as info:
        parse_nccl_tests("bad.log", bad)
    assert info.value.where == f"line {line}"


@pytest.mark.parametrize("value", ["abc", "1.5", "0", "-3", "\uff18"])
def test_a_gpu_count_that_is_no_count_is_refused(value: str) -> None:
    # int("abc") ended in a ValueError traceback; 0 and -3 were read and fitted (the harness
    # floor never modelled).
    header = next(line for line in NEW_FORMAT.splitlines() if "nGpus" in line)
    bad = NEW_FORMAT.replace(header, header.replace("nGpus 1", f"nGpus {value}"))
    assert bad != NEW_FORMAT
    with pytest.raises(InputError, match="is not a GPU count from 1 to 1024") as info:
        parse_nccl_tests("bad.log", bad)
    assert info.value.where is not None and info.value.where.startswith("line ")


def test_a_line_after_the_table_is_chatter_even_when_it_starts_with_a_number() -> None:
    # "3 more processes have sent help message" after "# Avg bus bandwidth" was refused as a
    # result row that cannot be read.
    avg = next(line for line in NEW_FORMAT.splitlines() if "Avg bus bandwidth" in line)
    chatty = NEW_FORMAT.replace(avg, avg + "\n3 more processes have sent help message")
    assert chatty != NEW_FORMAT
    assert parse_nccl_tests("chatty.log", chatty).rows == parse_nccl_tests("a.log", NEW_FORMAT).rows


def test_missing_parts_are_errors() -> None:
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        parse_nccl_tests("empty.log", "# nThread 1 nGpus 1\n")
    no_ranks = "\n".join(line for line in NEW_FORMAT.splitlines() if "Rank" not in line)
    with pytest.raises(InputError, match="Rank"):
        parse_nccl_tests("noranks.log", no_ranks)
    with pytest.raises(InputError, match="second nccl-tests run"):
        parse_nccl_tests("two.log", NEW_FORMAT + NEW_FORMAT)
    with pytest.raises(InputError, match="cannot read"):
        parse_nccl_tests(Path("/nonexistent/nccl.log"))


def test_sniff(tmp_path: Path) -> None:
    good = tmp_path / "a.log"
    good.write_text(NEW_FORMAT)
    other = tmp_path / "b.log"
    other.write_text("hello\n")
    assert is_nccl_tests_log(good)
    assert not is_nccl_tests_log(other)
    assert not is_nccl_tests_log(tmp_path / "missing.log")


def test_over_long_lines_are_skipped_without_holding_them(tmp_path: Path) -> None:
    """A line of ``MAX_LINE_CHARS`` or more (no row is near it) is skipped in pieces, so a log
    with a huge line, or no newline at all, never holds more than that at once."""
    from importers import nccl_tests

    text = _log("nccl_8.log").read_text()
    head, sep, rest = text.partition("#       size")
    junk = "x" * (3 * nccl_tests.MAX_LINE_CHARS + 5)
    odd = tmp_path / "nccl_8.log"
    odd.write_text(head + junk + "\n" + sep + rest)
    got, want = parse_nccl_tests(odd).rows, parse_nccl_tests(_log("nccl_8.log")).rows
    # The same rows, each one line further down (the junk line counts once).
    assert [replace(r, line=r.line - 1) for r in got] == list(want)
    with odd.open(encoding="utf-8") as fh:
        lengths = [len(x) for x in nccl_tests._bounded_lines(fh)]
    assert max(lengths) < 200
    assert len(lengths) == len(text.splitlines()) + 1  # the junk line counts as one
    one_line = tmp_path / "one.log"
    one_line.write_text("  1048576 " * 100_000)  # a "row" start, with no newline
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        parse_nccl_tests(one_line)


def test_a_table_past_max_rows_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importers import nccl_tests

    monkeypatch.setattr(nccl_tests, "MAX_ROWS", 10)
    lines = _log("nccl_8.log").read_text().splitlines()
    eleventh = [i for i, x in enumerate(lines, 1) if x.strip() and not x.startswith("#")][10]
    with pytest.raises(InputError, match="more than 10 result rows") as err:
        parse_nccl_tests(_log("nccl_8.log"))
    assert err.value.where == f"line {eleventh}"


def test_long_header_lines_read_in_one_pass() -> None:
    # A run of spaces in a device name and a long version token were quadratic in their
    # length: 35 s and 40 s for one 64,000-character line.
    spaces = " " * 60_000
    lines = NEW_FORMAT.splitlines()
    ranks = [i for i, line in enumerate(lines) if line.startswith("#  Rank")]
    lines[ranks[0]] += spaces  # trailing: stripped
    lines[ranks[1]] += spaces + "x"
    lines.insert(0, "# nccl-tests version " + "a" * 60_000)  # no nccl-library=: not the line
    log = parse_nccl_tests("run.log", "\n".join(lines) + "\n")
    assert log.nccl_version_code == 22203 and log.nccl_tests_version == "2.17.6"
    assert sorted(log.device_names) == sorted(
        {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3" + spaces + "x"}
    )
