"""The package's floors, as docs/architecture.rst states them: the Airflow side talks to the durable package
only through its face (``durable/__init__.py``, and ``durable/errors.py`` for the errors), and reaches private
Airflow or pydantic-ai modules and names from _compat.py only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "airflow_pydantic_ai"
AIRFLOW_SIDE = [path for path in sorted(PACKAGE.rglob("*.py")) if "durable" not in path.relative_to(PACKAGE).parts]


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``import`` and ``from ... import`` in ``path``, nested ones included."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def test_the_airflow_side_imports_only_the_durable_face() -> None:
    deep = [
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in AIRFLOW_SIDE
        for module, _ in _imports(path)
        if module.startswith("airflow_pydantic_ai.durable.") and module != "airflow_pydantic_ai.durable.errors"
    ]
    assert deep == [], "add the name to the face table in durable/__init__.py and import it from there"


def test_private_airflow_and_pydantic_ai_names_are_fenced_in_compat() -> None:
    private = []
    for path in AIRFLOW_SIDE:
        if path.name == "_compat.py":
            continue
        for module, names in _imports(path):
            if not module.startswith(("airflow.", "pydantic_ai.")) or module.startswith("airflow_pydantic_ai"):
                continue
            hidden = [part for part in module.split(".") if part.startswith("_")]
            hidden += [name for name in names if name.startswith("_")]
            if hidden:
                private.append(f"{path.relative_to(PACKAGE)}: {module} {names}")
    assert private == [], "reach private names through _compat.py, with the releases they were checked on"
