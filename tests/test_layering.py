"""The one-way dependency rule of docs/architecture.md, enforced on every import: absolute and
relative imports, ``from PACKAGE import SUBMODULE``, and ``importlib`` / ``__import__`` calls,
in every module of ``echo_view``, ``importers`` and ``exporters`` (``echo_view/__init__.py``
included); a module that belongs to no layer fails too. :data:`ALLOWED` is the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
# The limit on open files and the parent-death signal (echo_view.oslimits) are the operating
# system's: it needs nothing.
ALLOWED["echo_view.oslimits"] = set()
# A traced script's process dies with the command that started it (oslimits.die_with_parent).
ALLOWED["echo_view.tracing"].add("echo_view.oslimits")
# Temporary files a killed command left (echo_view.leftovers): the file system only; outputs,
# the shared-memory spool and the Nsight reader's temporary folders use it.
ALLOWED["echo_view.leftovers"] = set()
ALLOWED["echo_view.formats"].add("echo_view.leftovers")
ALLOWED["importers"].add("echo_view.leftovers")
# The Dask cluster (echo_view.workers) sits on errors; the layers that fan work out may open one.
ALLOWED["echo_view.workers"] = {"echo_view.errors", "echo_view.text", "echo_view.oslimits"}
for _layer_name in ("echo_view.sim", "echo_view.tui", "echo_view.loading", "echo_view.api"):
    ALLOWED[_layer_name].add("echo_view.workers")
# Results a worker hands to the command through shared memory (echo_view.spool) need only the
# model's mapped text (echo_view.model.mapped).
ALLOWED["echo_view.spool"] = {"echo_view.model", "echo_view.oslimits", "echo_view.leftovers"}
ALLOWED["echo_view.loading"].add("echo_view.spool")
# The command line and ``python -m echo_view`` compose everything: they may import anything.
ROOTS = {"echo_view.cli", "echo_view.__main__"}
# ``import echo_view`` itself only loads the Python API, lazily.
ALLOWED["echo_view"] = {"echo_view.api"}
OWN = ("echo_view", "importers", "exporters")


def _layer(module: str) -> str | None:
    if module == "echo_view":
        return module
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if layer != "echo_view" and (module == layer or module.startswith(layer + ".")):
            return layer
    return None


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _dynamic_target(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module(...)`` / ``__import__(...)`` call names, or the
    constant start of an f-string naming it (``f"echo_view.cli.{name}"`` -> ``echo_view.cli``)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.rstrip(".") or None
    return None


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every project module ``path`` imports, with its line: absolute and relative imports,
    ``from PACKAGE import SUBMODULE`` as the submodule, and importlib / ``__import__`` calls."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node.lineno, sub if _is_module(sub, root) else base))
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)):
            out.append((node.lineno, target))
    return [(n, m) for n, m in out if m.split(".")[0] in OWN]


def layering_violations(root: Path) -> list[str]:
    """``file:line layer imports module`` for every import across the rule under ``root``."""
    violations = []
    files = [p for top in OWN for p in sorted((root / top).glob("**/*.py"))]
    for path in files:
        mod = _module_name(path, root)
        if any(mod == r or mod.startswith(r + ".") for r in ROOTS):
            continue
        own = _layer(mod)
        if own is None:
            violations.append(f"{path.relative_to(root)}: {mod} belongs to no layer")
            continue
        for lineno, imported in _imports(path, root):
            target = _layer(imported)
            if target == own or (target is not None and target in ALLOWED[own]):
                continue
            violations.append(f"{path.relative_to(root)}:{lineno} {own} imports {imported}")
    return violations


def test_every_import_follows_the_layering() -> None:
    assert (ROOT / "echo_view" / "__init__.py").is_file()
    violations = layering_violations(ROOT)
    assert not violations, "layering broken:\n" + "\n".join(violations)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("kind", "files", "expected"),
    [
        (
            "absolute",
            {"echo_view/model/bad.py": "from importers.kineto import KinetoImporter\n"},
            "echo_view/model/bad.py:1 echo_view.model imports importers.kineto",
        ),
        (
            "relative",
            {"echo_view/model/bad.py": "from ..sim import engine\n"},
            "echo_view/model/bad.py:1 echo_view.model imports echo_view.sim.engine",
        ),
        (
            "importlib",
            {
                "echo_view/model/bad.py": "import importlib\n"
                "importlib.import_module('echo_view.sim')\n"
            },
            "echo_view/model/bad.py:2 echo_view.model imports echo_view.sim",
        ),
        (
            "f-string importlib",
            {
                "importers/bad.py": "from importlib import import_module\n"
                "import_module(f'echo_view.cli.{x}')\n"
            },
            "importers/bad.py:2 importers imports echo_view.cli",
        ),
        (
            "package __init__",
            {"echo_view/__init__.py": "from echo_view.sim import engine\n"},
            "echo_view/__init__.py:1 echo_view imports echo_view.sim.engine",
        ),
        (
            "submodule via from-package",
            {"exporters/bad.py": "from echo_view import sim\n"},
            "exporters/bad.py:1 exporters imports echo_view.sim",
        ),
        (
            "unlayered module",
            {"echo_view/newthing.py": "x = 1\n"},
            "echo_view/newthing.py: echo_view.newthing belongs to no layer",
        ),
    ],
)
def test_an_injected_violation_of_each_kind_fails(
    tmp_path: Path, kind: str, files: dict[str, str], expected: str
) -> None:
    """A tree with one violation of ``kind`` (besides the modules it names) is caught."""
    base = {
        "echo_view/__init__.py": "",
        "echo_view/model/__init__.py": "",
        "echo_view/sim/__init__.py": "",
        "echo_view/sim/engine.py": "",
        "echo_view/cli/__init__.py": "import importlib\nimportlib.import_module('echo_view.sim')\n",
        "importers/__init__.py": "",
        "importers/kineto/__init__.py": "from echo_view.model import x\n",
        "exporters/__init__.py": "",
    }
    root = _tree(tmp_path, base)
    assert layering_violations(root) == [], "the clean tree must pass"
    _tree(root, files)
    assert layering_violations(root) == [expected], kind


# -- the simulator reads no files ----------------------------------------------------------------
#: Modules that read files or name them; the simulator takes parsed objects (``TomlDoc``, models)
#: from the reading layer (``echo_view.loading``, ``echo_view.cli``, ``echo_view.api``).
READING_MODULES = {
    "pathlib", "tomllib", "gzip", "bz2", "lzma", "zipfile", "tarfile", "sqlite3", "shutil",
    "glob", "io", "importlib.resources",
}  # fmt: skip
#: Calls that read a file: ``open(...)``, ``path.read_text()``, the project's TOML readers.
READING_CALLS = {
    "open", "read_text", "read_bytes", "read_toml", "read_toml_text", "read_toml_doc",
    "loadtxt", "genfromtxt", "fromfile", "files",
}  # fmt: skip
#: ``X.load(...)`` on these reads a file (``json.load``, ``np.load``, ``pickle.load``).
READING_LOADERS = {"json", "np", "numpy", "pickle", "tomllib", "msgspec"}
#: The one exception: the simulator's own calibrated constants, shipped inside the package.
PACKAGE_DATA = {"echo_view/sim/comm/defaults.py": {"importlib.resources", "files", "read_text"}}


def file_reading_in_sim(root: Path) -> list[str]:
    """``file:line what`` for every file-reading import or call under ``echo_view/sim``."""
    out = []
    for path in sorted((root / "echo_view" / "sim").glob("**/*.py")):
        rel = path.relative_to(root).as_posix()
        allowed = PACKAGE_DATA.get(rel, set())
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            found: list[str] = []
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                )
                found = [
                    m for m in modules if m in READING_MODULES or m.split(".")[0] in READING_MODULES
                ]
                if isinstance(node, ast.ImportFrom):
                    found += [a.name for a in node.names if a.name in READING_CALLS]
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                loader = (
                    isinstance(func, ast.Attribute)
                    and func.attr == "load"
                    and isinstance(func.value, ast.Name)
                    and func.value.id in READING_LOADERS
                )
                if name in READING_CALLS or loader:
                    found = [f"{name}()"]
            out += [
                f"{rel}:{node.lineno} reads files ({what})"
                for what in found
                if what.removesuffix("()") not in allowed
            ]
    return out


def test_the_simulator_reads_no_files() -> None:
    found = file_reading_in_sim(ROOT)
    assert not found, "file reading in echo_view/sim (move it to loading or cli):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("import tomllib\n", "tomllib"),
        ("from pathlib import Path\n", "pathlib"),
        ("with open('x.toml') as f:\n    pass\n", "open()"),
        ("def f(p):\n    return p.read_text()\n", "read_text()"),
        ("import json\n\ndef f(fh):\n    return json.load(fh)\n", "load()"),
        ("from echo_view.model.toml_file import read_toml\n", "read_toml"),
        ("from importlib.resources import files\n", "importlib.resources"),
    ],
)
def test_an_injected_file_read_in_sim_fails(tmp_path: Path, text: str, expected: str) -> None:
    """Each kind of file reading, put into a scratch simulator module, is caught; the package
    data exception covers only its own module."""
    _tree(tmp_path, {"echo_view/sim/ok.py": "import json\nx = json.dumps({})\n"})
    assert file_reading_in_sim(tmp_path) == [], "the clean tree must pass"
    _tree(tmp_path, {"echo_view/sim/bad.py": text})
    found = file_reading_in_sim(tmp_path)
    assert found and all(f.startswith("echo_view/sim/bad.py:") for f in found), found
    assert any(f"({expected})" in f for f in found), found
