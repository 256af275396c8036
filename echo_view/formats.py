"""Importer / Exporter protocols, their registry, and the rules every file obeys: outputs are
written atomically and never onto an input, inputs must be regular files, and gzip inputs may
not inflate without bound.

Formats live outside the core (``importers/``, ``exporters/``); the CLI registers the built-in
ones and any third-party plug-ins found under the ``echo_view.importers`` /
``echo_view.exporters`` entry-point groups.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gzip
import hashlib
import json
import math
import os
import re
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from echo_view.errors import (
    InputError,
    LimitError,
    OutputError,
    Terminated,
    UsageError,
    stop_requested,
)
from echo_view.leftovers import sweep, tagged

if TYPE_CHECKING:  # only annotations name it; importing the model (numpy) would slow startup
    from echo_view.model.job import Job

#: ``progress(message, fraction)``; fraction in [0, 1] or -1 when unknown.
Progress = Callable[[str, float], None]


def no_progress(message: str, fraction: float) -> None:
    """A :data:`Progress` that reports nothing."""


@runtime_checkable
class Importer(Protocol):
    """Reads files of one format into a :class:`Job`."""

    name: str

    def sniff(self, path: Path) -> bool:
        """True when ``path`` (a file or directory) looks like this format. Must be cheap."""
        ...

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        """Read ``paths`` (the files of one job) into a :class:`Job`.

        Raises :class:`~echo_view.errors.InputError` naming the file and place on bad input.
        """
        ...


@runtime_checkable
class Exporter(Protocol):
    """Writes a :class:`Job` in one format."""

    name: str
    suffixes: tuple[str, ...]

    def write(self, job: Job, path: Path, progress: Progress = no_progress) -> None:
        """Write ``job`` to ``path`` atomically (see :func:`atomic_output`)."""
        ...


class Registry:
    """The importers and exporters the CLI can use."""

    def __init__(self) -> None:
        self.importers: list[Importer] = []
        self.exporters: list[Exporter] = []

    def add_importer(self, importer: Importer) -> None:
        self.importers.append(importer)

    def add_exporter(self, exporter: Exporter) -> None:
        self.exporters.append(exporter)

    def load_plugins(self) -> None:
        """Add third-party formats declared as entry points."""
        from importlib.metadata import entry_points  # ~3 MB; only plug-in discovery needs it

        for ep in entry_points(group="echo_view.importers"):
            self.add_importer(ep.load()())
        for ep in entry_points(group="echo_view.exporters"):
            self.add_exporter(ep.load()())

    def importer_for(self, path: Path) -> Importer:
        """The first importer that recognises ``path``."""
        reach_input(path)
        try:
            imp = next((i for i in self.importers if i.sniff(path)), None)
        except OSError as exc:  # a sniffer met an unreadable file or directory under ``path``
            raise unreachable(exc, path) from None
        if imp is None:
            raise not_a_trace(path, self.formats())
        return imp

    def formats(self) -> list[str]:
        """The importers' formats in words (their ``description``, else their name)."""
        return [str(getattr(i, "description", i.name)) for i in self.importers]

    def exporter_for(self, path: Path) -> Exporter:
        """The exporter whose suffix ends ``path``'s name (longest suffix wins)."""
        name = path.name.lower()
        best: tuple[int, Exporter] | None = None
        for exp in self.exporters:
            for suffix in exp.suffixes:
                if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
                    best = (len(suffix), exp)
        if best is None:
            known = ", ".join(s for e in self.exporters for s in e.suffixes)
            raise UsageError(
                f"-o: cannot tell the output format from {path.name!r}",
                hint=f"use one of: {known}",
            )
        return best[1]


#: Leading bytes of common files that are not traces, and what they are.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x1f\x8b", "a gzip file"),
    (b"BZh", "a bzip2 file"),
    (b"\xfd7zXZ\x00", "an xz file"),
    (b"\x28\xb5\x2f\xfd", "a zstd file"),
)


#: The ``format`` of a traced graph (``echo-view trace``'s output), and what it is called.
GRAPH_FORMAT = "echo-view.traced-graph"
TRACED_GRAPH = "a traced graph (echo-view trace's output)"
_TOML_TABLE = re.compile(rb"\[\[?[A-Za-z_][\w.\-]*\]\]?[ \t]*(?:#[^\n]*)?\r?\n")
#: Comment lines and blank lines before a TOML file's first table (a config's header).
_TOML_COMMENTS = re.compile(rb"(?:[ \t]*(?:#[^\n]*)?\r?\n)*")


def describe_content(head: bytes) -> str:
    """What a file whose first bytes are ``head`` appears to be, in words ("a PNG image",
    "an empty file", "JSON text", "text", "binary data")."""
    if not head:
        return "an empty file"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text:
        return "a file holding only whitespace"
    if _names_graph(head):
        return TRACED_GRAPH
    comments = _TOML_COMMENTS.match(text)
    after = text[comments.end() if comments else 0 :]
    if _TOML_TABLE.match(after):  # "[model]": a TOML table, which no JSON text starts with
        return "a TOML file"
    if text[:1] in (b"{", b"["):
        return "JSON text"
    try:
        # The head may end inside a multi-byte character: ignore a cut at the very end.
        head[:4096].decode("utf-8")[:-1]
    except UnicodeDecodeError:
        return "binary data"
    return "text"


def describe_file(path: Path) -> str:
    """:func:`describe_content` of ``path``'s first bytes ("a directory" for a directory); for
    a gzip file, of what it holds (a traced graph is one), or how it is damaged."""
    if path.is_dir():
        return "a directory"
    try:
        with open(path, "rb") as fh:
            what = describe_content(fh.read(4096))
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if what != "a gzip file":
        return what
    try:
        with gzip.open(path, "rb") as g:
            inner = g.read(4096)
    except (OSError, EOFError, zlib.error) as exc:  # (BadGzipFile is an OSError)
        return f"a damaged gzip file ({exc})"
    inside = describe_content(inner)
    return inside if inside == TRACED_GRAPH else f"a gzip file holding {inside}"


def _names_graph(head: bytes) -> bool:
    return GRAPH_FORMAT.encode() in head[:256]


def is_graph_file(path: Path) -> bool:
    """Cheap sniff: does the file (or the gzip data it holds) start like traced-graph JSON?"""
    try:
        with path.open("rb") as f:
            head = f.read(256)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(256)
    except (OSError, EOFError, zlib.error):
        return False
    return _names_graph(head)


def not_a_trace(path: Path, formats: Sequence[str]) -> InputError:
    """The one error for an input no reader accepts: what it appears to be (a directory
    without trace files, an empty file, a PNG image...) and the ``formats`` expected."""
    what = describe_file(path)
    message = (
        "no trace files in this directory" if what == "a directory" else f"not a trace: {what}"
    )
    hint = f"expected {', '.join(formats)}, or a directory of them"
    if what in (TRACED_GRAPH, "a TOML file"):
        hint += " (workload configs and traced graphs are for simulate, plan and trace)"
    return InputError(message, path=path, hint=hint)


_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _special(mode: int) -> str | None:
    """What a file that is neither regular nor a directory is, in words."""
    return next((name for test, name in _SPECIAL if test(mode)), None)


_UNREACHABLE = {
    errno.ENOENT: ("no such file or directory", "check the path"),
    errno.ENOTDIR: ("a part of the path is a file, not a directory", "check the path"),
    errno.ENAMETOOLONG: ("the name is too long for the file system", "check the path"),
    errno.ELOOP: ("too many levels of symbolic links", "check the path for a link loop"),
    errno.EACCES: ("permission denied", "check the permissions of it and the folders above it"),
    errno.EPERM: ("permission denied", "check the permissions of it and the folders above it"),
}


def unreachable(exc: OSError, path: Path) -> InputError:
    """An :class:`OSError` met reaching or reading the input ``path`` as a one-line error that
    names the file it was about (``path``, or a file found under it)."""
    other = (f"cannot read ({exc.strerror})", "check the path")
    what, hint = _UNREACHABLE.get(exc.errno or 0, other)
    return InputError(what, path=exc.filename or path, hint=hint)


def reach_input(path: Path, *, missing_ok: bool = False) -> os.stat_result | None:
    """``os.stat(path)`` (links followed), every failure as a one-line :class:`InputError`:
    a missing path (``None`` where ``missing_ok``), a too long name, a link loop, a file used as
    a directory, no permission to pass a directory on the way; a directory must be listable."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise unreachable(exc, path) from None
    except OSError as exc:
        raise unreachable(exc, path) from None
    except ValueError:  # a NUL in the name: no file can have it
        if missing_ok:
            return None
        raise InputError("no such file or directory", path=path, hint="check the path") from None
    if stat.S_ISDIR(st.st_mode) and not os.access(path, os.R_OK | os.X_OK):
        raise unreachable(OSError(errno.EACCES, os.strerror(errno.EACCES)), path)
    return st


def check_input(path: Path, *, directory_ok: bool = True, wants: str = "a file") -> None:
    """Refuse an input that is not a regular file (or a directory, where ``directory_ok``)
    before anything opens it: a FIFO would block the open, a device never ends. Symbolic links
    are followed. A path that cannot be reached, or a directory that cannot be listed, is
    refused (:func:`reach_input`); a missing path is left to the reader, which names it.
    ``wants`` says what to give instead of a directory."""
    st = reach_input(path, missing_ok=True)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        if not directory_ok:
            raise InputError("is a directory, not a file", path=path, hint=f"give {wants}")
        return
    kind = _special(st.st_mode)
    if kind is not None:
        raise InputError(
            f"is {kind}, not a regular file",
            path=path,
            hint="echo-view reads regular files only; save the data to a file first",
        )


def _found_in(inp: Path, key: tuple[int, int]) -> Path | None:
    """``inp``, or the file under the directory ``inp``, whose device and inode are ``key``."""
    try:
        st = os.stat(inp)
    except (OSError, ValueError):
        return None
    if (st.st_dev, st.st_ino) == key:
        return inp
    if not stat.S_ISDIR(st.st_mode):
        return None
    for root, _dirs, names in os.walk(inp):  # symlinked directories are not entered
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(root, name))
                if (st.st_dev, st.st_ino) == key:
                    return Path(root, name)
    return None


def _input_folder_holding(folder: Path, inputs: Iterable[Path]) -> Path | None:
    """The input directory that ``folder`` is, or lies under (compared by device and inode, so
    any spelling or link counts), else ``None``."""
    dirs = {}
    for inp in inputs:
        with contextlib.suppress(OSError, ValueError):
            st = os.stat(inp)
            if stat.S_ISDIR(st.st_mode):
                dirs[(st.st_dev, st.st_ino)] = Path(inp)
    if not dirs:
        return None
    here = Path(os.path.realpath(folder))
    for part in (here, *here.parents):
        with contextlib.suppress(OSError):
            st = os.stat(part)
            hit = dirs.get((st.st_dev, st.st_ino))
            if hit is not None:
                return hit
    return None


def output_target(path: Path) -> Path:
    """The file an output named ``path`` is written to: where a symbolic link leads, so that the
    link is kept (renaming a temporary file over the link would replace the link itself)."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)


def _is_file(path: Path, st: os.stat_result) -> bool:
    """True when ``path`` names the file ``st`` describes."""
    try:
        return os.path.samestat(os.stat(path), st)
    except OSError:
        return False


def check_output(path: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse, before any work, an output that cannot be written or would replace an input.

    The output's directory must exist; an existing output must be a regular file and must not
    be any of ``inputs`` nor a file under an input directory, and a new one must not go under
    an input directory: files are compared by device and inode, so another spelling, a
    symbolic link or a hard link to an input is caught too. A symbolic link is judged by the
    file it leads to (:func:`output_target`).
    """
    path = Path(path)
    target = output_target(path)
    _check_output_directory(path, target.parent)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        inside = _input_folder_holding(target.parent, inputs)
        if inside is not None:
            # A new file there changes the input: a job folder would read it as one more rank.
            raise UsageError(
                f"the output would go into the input folder {str(inside)!r}",
                path=path,
                hint="write it elsewhere; echo-view never changes its inputs",
            ) from None
        return
    except OSError as exc:
        raise write_error(exc, path) from None
    except ValueError as exc:  # a NUL in the name
        raise OutputError(f"cannot use as output ({exc})", path=path) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("the output is a directory", path=path, hint="give a file name")
    kind = _special(st.st_mode)
    if kind is not None:
        raise UsageError(
            f"the output is {kind}", path=path, hint="echo-view writes regular files only"
        )
    if target != path and not _is_file(target, st):
        # A link the kernel resolves otherwise than its text (/proc/self/fd/N to a deleted
        # file): writing to the name it spells would not write that file.
        raise OutputError(
            "the symbolic link leads to a file that has no name to write to",
            path=path,
            hint="give the file itself",
        )
    key = (st.st_dev, st.st_ino)
    for inp in inputs:
        hit = _found_in(Path(inp), key)
        if hit is not None:
            raise UsageError(
                f"the output is also an input ({hit})",
                path=path,
                hint="choose another output name; echo-view never writes onto its inputs",
            )
    if not os.access(target, os.W_OK):
        # The output is replaced by a rename, which a write-protected file does not stop.
        raise OutputError(
            "the output exists and is write-protected",
            path=path,
            hint="make it writable (chmod u+w) or write elsewhere",
        )


def _check_output_directory(path: Path, folder: Path) -> None:
    """Refuse an output whose directory is missing, is not a directory, or cannot be written
    in: before any work, not once the output is ready (a lookup that failed otherwise, a name
    too long or a folder without search permission, was a traceback)."""
    try:
        st = os.stat(folder)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as exc:
        raise write_error(exc, path) from None
    except ValueError as exc:
        raise OutputError(f"cannot use as output ({exc})", path=path) from None
    if st is None:
        raise UsageError(
            f"output directory {str(folder)!r} does not exist",
            path=path,
            hint="create it first or write elsewhere",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(
            f"{str(folder)!r} is not a directory", path=path, hint="give a path in a directory"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        code = errno.EACCES
        with contextlib.suppress(OSError):
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                code = errno.EROFS  # (its own hint: the file system is read-only)
        raise write_error(OSError(code, os.strerror(code)), path)


@functools.cache
def _umask() -> int:
    """The process umask, read once: from /proc where Linux offers it, else by setting and
    restoring it (racy only against threads creating files at that instant)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="ascii") as fh,
    ):
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_mode() -> int:
    """The permission bits of a new output file: ``0o666`` less the umask, as ``open`` gives."""
    return 0o666 & ~_umask()


_WRITE_HINTS = {
    errno.ENOSPC: "the disk is full; free space or write elsewhere",
    errno.EDQUOT: "the disk quota is exhausted; free space or write elsewhere",
    errno.EROFS: "the file system is read-only; write elsewhere",
    errno.EACCES: "no permission to write there; write elsewhere",
    errno.EPERM: "no permission to write there; write elsewhere",
}


def write_error(exc: OSError, path: Path) -> OutputError:
    """An :class:`OSError` met while writing ``path`` as a one-line error."""
    return OutputError(
        f"cannot write the output ({exc.strerror or exc})",
        path=path,
        hint=_WRITE_HINTS.get(exc.errno or 0, "write elsewhere"),
    )


#: The longest file name most file systems take (NAME_MAX), in bytes.
_NAME_MAX = 255


def _temp_prefix(name: str) -> str:
    """The start of a temporary name beside output ``name``: ``.NAME.``, or a digest of the
    name where ``.NAME.<pid>-XXXXXXXX.tmp`` would pass :data:`_NAME_MAX` (a legal output name
    of 236-255 bytes was refused once written)."""
    prefix = f".{name}."
    if len(os.fsencode(tagged(prefix))) + len("XXXXXXXX.tmp") <= _NAME_MAX:
        return prefix
    return f".{hashlib.sha256(os.fsencode(name)).hexdigest()[:24]}."


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` (over the file
    a symbolic link ``path`` leads to, keeping the link: :func:`output_target`).

    On any exception (and on SIGTERM, which the CLI turns into one) the temporary file is
    removed, so a failed run never leaves a half-written output behind; write errors become
    :class:`OutputError`. The file gets the mode a plain ``open`` would (an existing file's
    own, else ``0o666`` less the umask), not the 0600 of a temporary file. A SIGKILL cannot be
    handled: it may leave the hidden ``.NAME.<pid>-*.tmp`` file, which the next write of that
    output removes (:mod:`echo_view.leftovers`).
    """
    path = Path(path)
    check_output(path)
    target = output_target(path)
    prefix = _temp_prefix(target.name)
    sweep(target.parent, prefix, ".tmp")  # what a killed write to this output left
    try:
        fd, tmp = tempfile.mkstemp(prefix=tagged(prefix), suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise write_error(exc, path) from None
    tmp_path = Path(tmp)
    try:
        mode = output_mode()
        with contextlib.suppress(OSError):
            # Replacing a file keeps its mode, as writing it in place would: a private (0600)
            # output became world-readable.
            mode = stat.S_IMODE(os.stat(target).st_mode)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        yield tmp_path
        if stop_requested():  # SIGTERM came, its exception swallowed on the way: no output
            raise Terminated
        os.replace(tmp_path, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            raise write_error(exc, path) from None
        raise


def json_text(doc: Any) -> str:
    """``doc`` as strict JSON (RFC 8259), indented, one trailing newline: a float that is not
    finite (an undefined ratio, an unbounded prediction) becomes ``null``, never ``NaN`` or
    ``Infinity``, which JSON parsers reject."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# -- gzip inputs -------------------------------------------------------------------------------

#: A gzip input may inflate to at most this many times the compressed bytes read so far. The
#: most compressible real inputs measured inflate 57x (a shipped traced graph; 44x for a
#: Kineto trace, docs/architecture.md), kept 4x below the limit; deflate cannot exceed about
#: 1032x, which whitespace and zero bombs approach.
MAX_INFLATION_RATIO = 300
#: Below this many inflated bytes the ratio is not enforced (small files may compress well).
INFLATION_FLOOR = 16 << 20
_max_inflated_bytes: int | None = None


def set_max_inflated_bytes(limit: int | None) -> None:
    """Replace the ratio rule by a fixed cap on each gzip input's inflated bytes (``None``:
    back to the ratio rule); the CLI's ``--max-inflated-bytes``."""
    global _max_inflated_bytes
    _max_inflated_bytes = limit


def max_inflated_bytes() -> int | None:
    """The cap :func:`set_max_inflated_bytes` set (``None``: the ratio rule), to carry to
    worker processes that read inputs."""
    return _max_inflated_bytes


def check_inflation(path: Path, inflated: int, compressed: int) -> None:
    """Raise :class:`LimitError` when ``compressed`` bytes of ``path`` have inflated to more
    than the limit allows; called as inflation goes, so a bomb stops within a few blocks."""
    cap = _max_inflated_bytes
    if cap is None:
        if inflated <= max(INFLATION_FLOOR, MAX_INFLATION_RATIO * compressed):
            return
        raise LimitError(
            f"gzip data inflates more than {MAX_INFLATION_RATIO}x: {inflated:,} bytes from "
            f"the first {compressed:,} compressed bytes (a gzip bomb or damaged file)",
            path=path,
            hint="if the file is genuine, allow it with --max-inflated-bytes SIZE, e.g. 50G",
        )
    if inflated > cap:
        raise LimitError(
            f"gzip data inflates past --max-inflated-bytes {cap:,}: {inflated:,} bytes from "
            f"the first {compressed:,} compressed bytes",
            path=path,
            hint="raise --max-inflated-bytes if the file is genuine",
        )
