"""The one-way dependency rule of docs/architecture.md, enforced on every import statement.

``cli -> tui -> sim | analysis | validate | tracing -> formats -> model -> errors | units``;
``importers`` and ``exporters`` see only ``model``, ``formats``, ``errors`` and ``units``;
``loading`` (inputs into model objects) sits on the formats and the tracer; ``api`` (the Python
API) is a front end like ``cli`` and sees everything below the front ends.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each layer may import from the project (besides itself).
ALLOWED: dict[str, set[str]] = {
    "echo_view.errors": set(),
    "echo_view.units": set(),
    "echo_view.model": {"echo_view.errors", "echo_view.units"},
    "echo_view.formats": {"echo_view.model", "echo_view.errors", "echo_view.units"},
    "echo_view.analysis": {"echo_view.model", "echo_view.errors", "echo_view.units"},
    "echo_view.validate": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.analysis",
    },
    "echo_view.sim": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.analysis",
    },
    "echo_view.tracing": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.sim",
    },
    "echo_view.tui": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.analysis",
        "echo_view.sim",
        "echo_view.validate",
        "echo_view.formats",
    },
    "echo_view.loading": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.formats",
        "echo_view.tracing",
        "importers",
        "exporters",
    },
    "echo_view.api": {
        "echo_view.model",
        "echo_view.errors",
        "echo_view.units",
        "echo_view.formats",
        "echo_view.analysis",
        "echo_view.sim",
        "echo_view.validate",
        "echo_view.loading",
        "exporters",
    },
    "importers": {"echo_view.model", "echo_view.formats", "echo_view.errors", "echo_view.units"},
    "exporters": {"echo_view.model", "echo_view.formats", "echo_view.errors", "echo_view.units"},
}
# Terminal-safe text (echo_view.text) sits with errors and units: every layer may use it.
for _deps in ALLOWED.values():
    _deps.add("echo_view.text")
ALLOWED["echo_view.text"] = set()
# The Dask cluster (echo_view.workers) sits on errors; the layers that fan work out may open one.
ALLOWED["echo_view.workers"] = {"echo_view.errors", "echo_view.text"}
for _layer_name in ("echo_view.sim", "echo_view.tui", "echo_view.loading", "echo_view.api"):
    ALLOWED[_layer_name].add("echo_view.workers")
# The composition root may import anything.
ROOTS = {"echo_view.cli", "echo_view.__main__", "echo_view"}


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_every_import_follows_the_layering() -> None:
    violations = []
    files = [
        *ROOT.glob("echo_view/**/*.py"),
        *ROOT.glob("importers/**/*.py"),
        *ROOT.glob("exporters/**/*.py"),
    ]
    assert files
    for path in files:
        mod = _module_name(path)
        if any(mod == r or mod.startswith(r + ".") for r in ROOTS if r != "echo_view") or (
            mod == "echo_view"
        ):
            continue
        own = _layer(mod)
        assert own is not None, f"{mod} belongs to no layer: add it to ALLOWED"
        for lineno, imported in _imports(path):
            target = _layer(imported)
            if imported.split(".")[0] not in {"echo_view", "importers", "exporters"}:
                continue
            if target == own:
                continue
            if target is None or target not in ALLOWED[own]:
                violations.append(f"{path.relative_to(ROOT)}:{lineno} {own} imports {imported}")
    assert not violations, "layering broken:\n" + "\n".join(violations)


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from importers.kineto import KinetoImporter\n")
    assert _imports(bad) == [(1, "importers.kineto")]
    assert _layer("importers.kineto") not in ALLOWED["echo_view.model"]
