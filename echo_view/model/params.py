"""One pattern for sets of model parameters: frozen dataclasses whose fields carry their unit,
bounds, TOML place and help.

A field declared with :func:`param` is a parameter; :class:`ParamSet` gives every such set the
same behaviour: ``--set``-style overrides checked against the bounds (:meth:`~ParamSet.
with_overrides`), flat names for fitting (``base_us.LL``; :meth:`~ParamSet.flat`,
:meth:`~ParamSet.with_flat`), TOML tables read and written by section (:meth:`~ParamSet.
from_tables`, :meth:`~ParamSet.to_tables`) and a reference table for the docs
(:meth:`~ParamSet.reference`). Bounds keep every derived time a finite int64 of nanoseconds.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Self

from echo_view.errors import ConfigError, known_keys_hint, warn_deprecated
from echo_view.units import parse_number


@dataclass(frozen=True)
class Param:
    """How one parameter is read and written (see :func:`param`)."""

    help: str
    unit: str
    lo: float
    hi: float
    section: str = ""
    key: str = ""
    integer: bool = False
    switch: bool = False

    def rule(self) -> str:
        """The accepted values, in words."""
        if self.switch:
            return "0 or 1"
        unit = f" {self.unit}" if self.unit and self.unit != "fraction" else ""
        return f"a number from {self.lo:g} to {self.hi:g}{unit}"


#: Words of a setting that is on or off (``--set interference=off``), lower case.
SWITCH_WORDS = {"on": True, "true": True, "1": True, "default": True}
SWITCH_WORDS |= {"off": False, "false": False, "0": False, "none": False}


def switch_value(text: str) -> bool | None:
    """``True`` / ``False`` for a switch word (:data:`SWITCH_WORDS`, any case, spaces
    around), ``None`` for anything else (a file name, say)."""
    return SWITCH_WORDS.get(text.strip().lower())


def param(
    default: Any,
    *,
    help: str,
    unit: str,
    lo: float,
    hi: float,
    section: str = "",
    key: str = "",
    integer: bool = False,
    switch: bool = False,
) -> Any:
    """A dataclass field that is a parameter: ``default`` and how to read it. A tuple default
    holds one value per element of the set's :attr:`ParamSet.ELEMENTS` (per NCCL protocol)."""
    spec = Param(help, unit, lo, hi, section, key, integer, switch)
    return field(default=default, metadata={"param": spec})


class ParamSet:
    """Behaviour shared by parameter dataclasses (mix into a frozen dataclass)."""

    #: What one parameter is called in messages (``compute parameter``).
    NOUN: ClassVar[str] = "parameter"
    #: Names of the elements of tuple-valued parameters (``LL``, ``LL128``, ``SIMPLE``).
    ELEMENTS: ClassVar[tuple[str, ...]] = ()
    #: What an element is called in messages (``protocol``).
    ELEMENT_NOUN: ClassVar[str] = "element"
    #: Old TOML places still read, with a deprecation warning: ``"section.old" -> "new"``.
    RENAMED: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def specs(cls) -> dict[str, Param]:
        """Every parameter field and its :class:`Param`, in declaration order."""
        return {
            f.name: f.metadata["param"]
            for f in fields(cls)  # type: ignore[arg-type]
            if "param" in f.metadata
        }

    @classmethod
    def check(
        cls, name: str, value: Any, *, path: str | None = None, where: str | None = None
    ) -> float:
        """``value`` as a number within parameter ``name``'s bounds (``name`` may be flat:
        ``base_us.LL``), else a :class:`ConfigError` saying what is accepted."""
        spec = cls.specs()[name.partition(".")[0]]
        place = where or name
        if isinstance(value, bool):
            raise ConfigError(
                f"{cls.NOUN} {name!r} needs a number, got {value!r}", path=path, where=place
            )
        try:
            # A string (a --set value) must be a plain ASCII number: float() also read
            # "１２" and "1_000".
            number = parse_number(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{cls.NOUN} {name!r} needs a number, got {value!r}", path=path, where=place
            ) from None
        ok = math.isfinite(number) and spec.lo <= number <= spec.hi
        if spec.integer and ok and not number.is_integer():
            # int() cut 1.5 GPUs per node to 1 without a word.
            raise ConfigError(
                f"{cls.NOUN} {name!r} must be a whole number, got {value!r}", path=path, where=place
            )
        if spec.switch:
            ok = number in (0.0, 1.0)
        if not ok:
            raise ConfigError(
                f"{cls.NOUN} {name!r} must be {spec.rule()}, got {value!r}", path=path, where=place
            )
        return float(int(number)) if spec.integer else number

    def flat(self) -> dict[str, float]:
        """Every parameter by a flat name (``net_eff``, ``base_us.LL``)."""
        out: dict[str, float] = {}
        for name in self.specs():
            value = getattr(self, name)
            if isinstance(value, tuple):
                out.update(
                    {f"{name}.{e}": float(v) for e, v in zip(self.ELEMENTS, value, strict=True)}
                )
            else:
                out[name] = float(value)
        return out

    def with_flat(self, values: Mapping[str, float], source: str | None = None) -> Self:
        """A copy with parameters replaced by flat name, unchecked (fits move within their own
        bounds); an unknown name is a ``KeyError``. ``source`` replaces a ``source`` field."""
        specs = self.specs()
        changes: dict[str, Any] = {}
        for flat_name, value in values.items():
            name, _, element = flat_name.partition(".")
            if name not in specs:
                raise KeyError(flat_name)
            current = changes.get(name, getattr(self, name))
            if isinstance(current, tuple):
                if element not in self.ELEMENTS:
                    raise KeyError(flat_name)
                items = list(current)
                items[self.ELEMENTS.index(element)] = float(value)
                changes[name] = tuple(items)
            elif element:
                raise KeyError(flat_name)
            else:
                changes[name] = int(value) if specs[name].integer else float(value)
        if source is not None:
            changes["source"] = source
        return replace(self, **changes)  # type: ignore[type-var]

    def with_overrides(
        self, overrides: Mapping[str, Any], *, path: str | None = None, where: str = ""
    ) -> Self:
        """A copy with parameters replaced by flat name, each checked against its bounds; an
        unknown name is a :class:`ConfigError` naming the nearest known one. An error's place
        is ``where`` followed by the name (e.g. ``--set compute.``)."""
        known = self.flat()
        values: dict[str, float] = {}
        for name, value in overrides.items():
            if name not in known:
                raise ConfigError(
                    f"unknown {self.NOUN} {name!r}",
                    path=path,
                    where=f"{where}{name}" if where else None,
                    hint=known_keys_hint(name, known),
                )
            values[name] = self.check(name, value, path=path, where=f"{where}{name}")
        return self.with_flat(values)

    def to_tables(self) -> dict[str, Any]:
        """The parameters as TOML tables by section (tuple values as element tables)."""
        out: dict[str, Any] = {}
        for name, spec in self.specs().items():
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = dict(zip(self.ELEMENTS, value, strict=True))
            table = out.setdefault(spec.section, {}) if spec.section else out
            table[spec.key or name] = value
        return out

    @classmethod
    def from_tables(
        cls,
        data: Mapping[str, Any],
        *,
        path: str | None = None,
        base: Self | None = None,
        others: Collection[str] | None = None,
    ) -> Self:
        """Parameters read from TOML tables as :meth:`to_tables` writes them; missing ones keep
        ``base`` (default: the defaults). With ``others`` (the caller's own tables) any other
        top-level table is an error; without it, other tables and keys are the caller's."""
        start: Self = base if base is not None else cls()
        places = {(s.section, s.key or n): n for n, s in cls.specs().items()}
        if others is not None:
            known = sorted({s for s, _ in places if s} | set(others))
            for table_name in data:
                if table_name not in known:
                    raise ConfigError(
                        f"unknown table [{table_name}]",
                        path=path,
                        hint=known_keys_hint(table_name, known, "known tables"),
                    )
        values: dict[str, float] = {}
        for section in sorted({s for s, _ in places}):
            table = data.get(section, {}) if section else data
            if not isinstance(table, Mapping):
                raise ConfigError(f"[{section}] must be a table", path=path)
            for key, value in table.items():
                where = f"{section}.{key}" if section else key
                new = cls.RENAMED.get(where)
                if new is not None:
                    warn_deprecated(where, f"{section}.{new}" if section else new)
                    key, where = new, f"{section}.{new}" if section else new
                name = places.get((section, key))
                if name is None:
                    if not section:
                        continue  # top-level keys that are not parameters: the caller's
                    keys = [k for s, k in places if s == section]
                    raise ConfigError(
                        "unknown key", path=path, where=where, hint=known_keys_hint(key, keys)
                    )
                if isinstance(getattr(start, name), tuple):
                    values.update(cls._elements(name, value, path, where))
                else:
                    values[name] = cls.check(name, value, path=path, where=where)
        return start.with_flat(values)

    @classmethod
    def _elements(cls, name: str, value: Any, path: str | None, where: str) -> dict[str, float]:
        if not isinstance(value, Mapping):
            inner = ", ".join(f"{e} = ..." for e in cls.ELEMENTS)
            raise ConfigError(f"expected an inline table {{ {inner} }}", path=path, where=where)
        out: dict[str, float] = {}
        for element, v in value.items():
            if element not in cls.ELEMENTS:
                raise ConfigError(
                    f"unknown {cls.ELEMENT_NOUN} {element!r}",
                    path=path,
                    where=where,
                    hint=f"{cls.ELEMENT_NOUN}s: {', '.join(cls.ELEMENTS)}",
                )
            flat_name = f"{name}.{element}"
            out[flat_name] = cls.check(flat_name, v, path=path, where=f"{where}.{element}")
        return out

    @classmethod
    def reference(cls) -> list[tuple[str, str, str, str]]:
        """``(TOML place, default, accepted values, help)`` per parameter, for the docs."""
        out = []
        for f in fields(cls):  # type: ignore[arg-type]
            spec = f.metadata.get("param")
            if spec is None:
                continue
            place = f"{spec.section}.{spec.key or f.name}" if spec.section else f.name
            out.append((place, repr(f.default), spec.rule(), spec.help))
        return out
