"""Nothing outside ``importers/`` parses an event's args text (docs/architecture.md, "Typed
event facts"): the core reads the typed side tables the importers fill; the args blob is for
display and export only.

Every module of ``echo_view`` and ``exporters`` is parsed; reaching the args text is a use of
``args_blob``, ``args_offsets`` or ``raw_args`` (as an attribute or a ``getattr`` name) or a call
``x.args(row)``. Only :data:`ALLOWED` modules may do it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Modules that may read the args text, and why.
ALLOWED: dict[str, str] = {
    "echo_view/model/trace.py": "the event table that holds the text",
    "echo_view/model/builder.py": "builds the text",
    "echo_view/tui/details.py": "shows an event's args",
    "echo_view/api/hta.py": "exports the args as HolisticTraceAnalysis columns",
    "exporters/": "exports the args",
}
#: Where the rule applies (importers/ reads the text by design).
SCANNED = ("echo_view", "exporters")
_TEXT_ATTRS = frozenset({"args_blob", "args_offsets", "raw_args"})


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _TEXT_ATTRS:
            out.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and node.value in _TEXT_ATTRS:
            out.append((node.lineno, f"'{node.value}'"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "args"
            and node.args
        ):
            out.append((node.lineno, ".args(...)"))
    return out


def args_text_readers(root: Path) -> list[str]:
    """``file:line what`` for every read of the args text outside :data:`ALLOWED`."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).glob("**/*.py")):
            rel = path.relative_to(root).as_posix()
            if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            found += [f"{rel}:{line} {what}" for line, what in _reads(tree)]
    return found


def test_only_importers_display_and_export_read_the_args_text() -> None:
    found = args_text_readers(ROOT)
    assert not found, "args text read outside importers/ (use the typed tables):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def f(ev, r):\n    return ev.args(r)\n", "echo_view/sim/bad.py:2 .args(...)"),
        ("def f(ev, r):\n    return ev.raw_args(r)\n", "echo_view/sim/bad.py:2 .raw_args"),
        ("def f(t):\n    return t.events.args_blob\n", "echo_view/sim/bad.py:2 .args_blob"),
        (
            "def f(ev):\n    return getattr(ev, 'args_offsets')\n",
            "echo_view/sim/bad.py:2 'args_offsets'",
        ),
    ],
)
def test_an_injected_read_fails(tmp_path: Path, text: str, expected: str) -> None:
    """A scratch tree: the allowed reader and an importer pass; one core module reading the
    text is caught."""
    files = {
        "echo_view/tui/details.py": "def f(ev, r):\n    return ev.args(r)\n",
        "importers/kineto/x.py": "def f(ev):\n    return ev.args_blob\n",
        "echo_view/sim/ok.py": "def f(parser):\n    return parser.parse_args()\n",
    }
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    assert args_text_readers(tmp_path) == [], "the clean tree must pass"
    (tmp_path / "echo_view/sim/bad.py").write_text(text)
    assert args_text_readers(tmp_path) == [expected]
