"""The package's floors, as docs/architecture.rst states them: the Airflow side talks to the durable engine
only through its faces (``durable/__init__.py``; ``durable/read.py`` for the read side; ``durable/errors.py``
for the errors), the engine imports nothing of the Airflow side, no two modules import each other (directly
or round a loop), and private Airflow or pydantic-ai names are reached from one module per side only
(``_compat.py`` on the Airflow side, ``durable/_pydantic_ai.py`` in the engine)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "airflow_pydantic_ai"
ENGINE = PACKAGE / "durable"
AIRFLOW_SIDE = [path for path in sorted(PACKAGE.rglob("*.py")) if ENGINE not in path.parents]
FACES = (
    "airflow_pydantic_ai.durable",
    "airflow_pydantic_ai.durable.read",
    "airflow_pydantic_ai.durable.errors",
    "airflow_pydantic_ai.durable.side_effects",
)
FACE_LIMIT = 20


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``import`` and ``from ... import`` in ``path``, nested ones included."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def _runtime_imports(path: Path) -> set[str]:
    """The package's modules ``path`` imports when it runs: at module level and inside functions alike;
    imports under ``if TYPE_CHECKING:`` never run and are left out."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("airflow_pydantic_ai"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                targets.add(submodule if submodule in MODULES else node.module)
        elif isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names if alias.name in MODULES}
    return targets - {_module_name(path)}


def test_the_airflow_side_imports_only_the_engine_faces() -> None:
    deep = [
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in AIRFLOW_SIDE
        for module, _ in _imports(path)
        if module.startswith("airflow_pydantic_ai.durable.") and module not in FACES
    ]
    assert deep == [], "add the name to a face of the durable package (durable/__init__.py or read.py)"


def test_the_airflow_side_imports_only_face_names() -> None:
    published = {face: set(importlib.import_module(face).__all__) for face in FACES}
    unlisted = [
        f"{path.relative_to(PACKAGE)}: {module}.{name}"
        for path in AIRFLOW_SIDE
        for module, names in _imports(path)
        if module in published
        for name in names
        if name not in published[module]
    ]
    assert unlisted == [], "import the name from the face that lists it in __all__"


def test_the_engine_face_stays_small() -> None:
    face = importlib.import_module("airflow_pydantic_ai.durable").__all__
    assert len(face) <= FACE_LIMIT, f"the engine's face has {len(face)} names: {sorted(face)}"


def test_the_engine_imports_nothing_of_the_airflow_side() -> None:
    outside = [
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in sorted(ENGINE.rglob("*.py"))
        for module, names in _imports(path)
        if module == "airflow_pydantic_ai" or module.startswith("airflow_pydantic_ai.")
        if not module.startswith("airflow_pydantic_ai.durable")
    ]
    assert outside == [], "the durable engine must not import the Airflow side; pass the value in instead"


def test_no_import_cycle() -> None:
    graph = {module: _runtime_imports(path) for module, path in MODULES.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == [], "modules that import each other: move the shared part into a module both import"


def test_private_airflow_and_pydantic_ai_names_are_fenced() -> None:
    private = []
    fences = {PACKAGE / "_compat.py", ENGINE / "_pydantic_ai.py"}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in fences:
            continue
        for module, names in _imports(path):
            if not module.startswith(("airflow.", "pydantic_ai.")) or module.startswith("airflow_pydantic_ai"):
                continue
            hidden = [part for part in module.split(".") if part.startswith("_")]
            hidden += [name for name in names if name.startswith("_")]
            if hidden:
                private.append(f"{path.relative_to(PACKAGE)}: {module} {names}")
    assert private == [], "reach private names through _compat.py (Airflow side) or durable/_pydantic_ai.py (engine)"
