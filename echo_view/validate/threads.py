"""Which thread an event lands on in Perfetto: raw (pid, tid) pairs interned once, resolved
with Perfetto's rules (uint32 coercion, a missing tid or tid 0 means the pid)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

UNSET = msgspec.UNSET
I32 = npt.NDArray[np.int32]


class Interner(dict[Hashable, int]):
    """Dense ids for hashable values; :attr:`keys_` lists them in id order."""

    def __init__(self, preset: Iterable[tuple[Hashable, int]] = ()) -> None:
        super().__init__(preset)
        self.keys_: list[Hashable] = []

    def __missing__(self, key: Hashable) -> int:
        value = len(self.keys_)
        self.keys_.append(key)
        self[key] = value
        return value


def _uint32(value: Any) -> tuple[Hashable, bool]:
    """Perfetto's pid/tid coercion: (key, valid). Strings keep their text; numbers outside
    uint32 (negative, too big, fractional) become 0, as in Perfetto's JSON importer."""
    t = type(value)
    if t is str:
        return ("str", value), True
    if t is int:
        return (value, True) if 0 <= value <= 0xFFFFFFFF else (0, False)
    if t is float and value.is_integer() and 0 <= value <= 0xFFFFFFFF:
        return int(value), True
    return 0, False


def resolve_thread(pid: Any, tid: Any) -> tuple[Hashable, Hashable]:
    """The (pid, tid) Perfetto files an event under: uint32 coercion, a missing tid or
    ``tid == 0`` with ``pid != 0`` becomes the pid."""
    rp, _ = _uint32(pid)
    if tid is UNSET:
        return rp, rp
    rt, _ = _uint32(tid)
    if rt == 0 and rp != 0:
        rt = rp
    return rp, rt


def id_in_range(value: Any) -> bool:
    """Whether a pid/tid survives Perfetto's uint32 coercion (strings and absent ones do)."""
    return value is UNSET or _uint32(value)[1]


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One distinct raw (pid, tid) pair and the Perfetto thread it lands on."""

    pid: Any
    tid: Any
    thread: int  # resolved thread id
    first_index: int  # global index of the first event with this pair


class Threads:
    """Maps raw (pid, tid) pairs to Perfetto's resolved threads, once per distinct pair."""

    def __init__(self) -> None:
        self.raw = Interner()
        self.resolved = Interner()
        self.infos: list[ThreadInfo] = []
        self._map = np.zeros(0, dtype=np.int32)

    def ids(self, pids: list[Any], tids: list[Any], first: int) -> tuple[I32, I32]:
        """(raw pair ids, resolved thread ids) for one chunk."""
        raw = self.raw
        before = len(raw.keys_)
        kinds = set(map(type, pids))
        kinds.update(map(type, tids))
        if kinds <= _PLAIN:
            raw_ids = [raw[k] for k in zip(pids, tids, strict=True)]
        else:  # true == 1 == 1.0 as dict keys: a `true` pid was read as pid 1 (and not refused)
            raw_ids = [raw[_hashable_pair(p, t)] for p, t in zip(pids, tids, strict=True)]
        arr = np.array(raw_ids, dtype=np.int32)
        if len(raw.keys_) > before:
            self._add(arr, before, first)
        return arr, self._map[arr] if len(arr) else arr

    def _add(self, arr: I32, before: int, first: int) -> None:
        new_ids = range(before, len(self.raw.keys_))
        firsts: dict[int, int] = {}
        hits = np.flatnonzero(arr >= before)
        for row in hits.tolist():
            firsts.setdefault(int(arr[row]), row + first)
        extra = np.zeros(len(new_ids), dtype=np.int32)
        for j, rid in enumerate(new_ids):
            pid, tid = map(_untag, _pair(self.raw.keys_[rid]))
            thread = self.resolved[resolve_thread(pid, tid)]
            extra[j] = thread
            self.infos.append(ThreadInfo(pid, tid, thread, firsts[rid]))
        self._map = np.concatenate([self._map, extra])

    def label(self, thread: int) -> tuple[Any, Any]:
        """(pid, tid) of a resolved thread, as Perfetto sees them."""
        key = self.resolved.keys_[thread]
        pid, tid = _pair(key)
        return _display(pid), _display(tid)


def _pair(key: Hashable) -> tuple[Any, Any]:
    assert isinstance(key, tuple)  # interned keys are (pid, tid) pairs
    return key[0], key[1]


def _display(key: Hashable) -> Any:
    if isinstance(key, tuple) and len(key) == 2 and key[0] == "str":
        return key[1]
    return key


#: The pid/tid types whose values key a dict apart (no ``True == 1 == 1.0``).
_PLAIN = {int, str, type(UNSET)}
#: Tags that keep a boolean or float pid/tid apart from an equal int in :attr:`Threads.raw`.
_TAGS = {bool: "bool", float: "float"}


@dataclass(frozen=True, slots=True)
class Unhashable:
    """A list or object pid/tid, keyed by its JSON text (which is also how it is shown)."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _hashable_pair(pid: Any, tid: Any) -> tuple[Hashable, Hashable]:
    def h(v: Any) -> Hashable:
        tag = _TAGS.get(type(v))
        if tag is not None:
            return (tag, v)
        try:
            hash(v)
        except TypeError:
            return Unhashable(msgspec.json.encode(v, enc_hook=str).decode())
        return v  # type: ignore[no-any-return]

    return h(pid), h(tid)


def _untag(key: Any) -> Any:
    """The pid/tid a :func:`_hashable_pair` key stands for (an unhashable one stays an
    :class:`Unhashable`)."""
    if isinstance(key, tuple) and len(key) == 2 and key[0] in ("bool", "float"):
        return key[1]
    return key
