"""The name every ``--json`` output carries as its first key, ``"schema"``.

One convention for all of them: ``echo-view.<output>/<version>``, where ``<output>`` is the
command (``info``, ``check``, ``diff``, ``simulate``, ``comm``, ``interference``...; ``calibrate
X`` is ``calibrate-X``) and ``<version>`` an integer raised only when a key is renamed or
removed (keys are otherwise only ever added). docs/cli.md lists them.
"""

from __future__ import annotations

import re

#: What a schema name looks like.
SCHEMA_PATTERN = re.compile(r"echo-view\.[a-z]+(?:-[a-z]+)*/[1-9][0-9]*")


def json_schema(output: str, version: int = 1) -> str:
    """``echo-view.<output>/<version>``."""
    name = f"echo-view.{output}/{version}"
    if not SCHEMA_PATTERN.fullmatch(name):
        raise ValueError(f"not a schema name: {name!r}")
    return name
