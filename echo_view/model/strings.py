"""Interned strings: every name and category is stored once and referred to by an int32 id."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class StringTable:
    """An append-only table of unique strings.

    Ids are dense, start at 0 and never change, so int32 columns can refer to them. A table is
    filled while a trace is built and then only read.
    """

    __slots__ = ("_ids", "_strings")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._strings: list[str] = []
        self._ids: dict[str, int] = {}
        for s in strings:
            self.intern(s)

    def intern(self, s: str) -> int:
        """Return the id of ``s``, adding it if new."""
        i = self._ids.get(s)
        if i is None:
            i = len(self._strings)
            self._strings.append(s)
            self._ids[s] = i
        return i

    def id_of(self, s: str) -> int | None:
        """The id of ``s`` or ``None`` when it was never interned."""
        return self._ids.get(s)

    def __getitem__(self, i: int) -> str:
        return self._strings[i]

    def __len__(self) -> int:
        return len(self._strings)

    def __contains__(self, s: object) -> bool:
        return s in self._ids

    @property
    def strings(self) -> Sequence[str]:
        """All strings in id order (read-only view)."""
        return tuple(self._strings)
