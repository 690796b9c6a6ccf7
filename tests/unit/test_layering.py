"""The package's floors, as docs/architecture.rst states them: the Airflow side talks to the durable engine
only through its faces (``durable/__init__.py``; ``durable/read.py`` for the read side; ``durable/errors.py``
for the errors), the engine imports nothing of the Airflow side, no two modules import each other (directly
or round a loop), and private Airflow or pydantic-ai names are reached from one module per side only
(``_compat.py`` on the Airflow side, ``durable/_pydantic_ai.py`` in the engine).

And the limits (issue 37): every face of the engine at most 20 names, no module over 450 lines, no class over 40
members, no engine internals (``entries``, ``store``, ``writer``, ``keys``, ``stats``, ``unverified``) read on an
engine object outside the engine, and the ``[pydantic_ai]`` options read in one module (``tries/settings.py``)."""

from __future__ import annotations

import ast
import importlib
import re
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
LINE_LIMIT = 450
MEMBER_LIMIT = 40


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


def test_every_engine_face_stays_small() -> None:
    big = {face: len(importlib.import_module(face).__all__) for face in FACES}
    over = {face: count for face, count in big.items() if count > FACE_LIMIT}
    assert over == {}, (
        f"a face of the engine exports more than {FACE_LIMIT} names: {over}; move the names the Airflow side does not "
        "need off the face (keep an old public name importable through a lazy map such as _DOCUMENTED_BEFORE)"
    )


def test_no_module_is_too_long() -> None:
    lines = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    long = sorted(f"{path}: {count} lines" for path in lines if (count := lines[path]) > LINE_LIMIT)
    assert long == [], (
        f"modules over {LINE_LIMIT} lines: {long}; split the module by concern (a module per concern, call sites "
        "updated, docs/architecture.rst's rows with them)"
    )


def _members(node: ast.ClassDef) -> set[str]:
    """The names a class body defines: fields (annotated or assigned), methods, properties, nested classes."""
    names: set[str] = set()
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
        elif isinstance(statement, ast.Assign):
            names |= {target.id for target in statement.targets if isinstance(target, ast.Name)}
    return names


def test_no_class_has_too_many_members() -> None:
    big = [
        f"{path.relative_to(PACKAGE)}:{node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and len(_members(node)) > MEMBER_LIMIT
    ]
    assert big == [], (
        f"classes with more than {MEMBER_LIMIT} members (fields, methods, properties): {big}; give a concern of the "
        "class a class of its own (a value it holds, or a helper module it calls)"
    )


ENGINE_INTERNALS = frozenset({"entries", "store", "writer", "keys", "stats", "unverified"})
ENGINE_TYPE = re.compile(r"\b(DurableRun|Attempt|AgentRun)\b")
ENGINE_NAMES = frozenset({"run", "attempt", "agent_run", "durable_run"})


def _engine_names(tree: ast.AST) -> set[str]:
    """The names a module binds to an engine object, by a heuristic (the AST knows no types): the names the
    package's code uses for one (``run``, ``attempt``, ``agent_run``, ``durable_run``; also as ``self.run`` and
    ``self._run``), and any parameter or variable annotated with ``DurableRun``, ``Attempt`` or ``AgentRun``."""
    names = set(ENGINE_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            target, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, annotation = node.target.id, node.annotation
        else:
            continue
        if ENGINE_TYPE.search(ast.unparse(annotation)):
            names.add(target)
    return names


def _engine_object(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.lstrip("_") in names
    )


def _internal_reads(source: str) -> list[str]:
    """``line: expression`` of each read of an engine internal on an engine object in ``source``."""
    tree = ast.parse(source)
    names = _engine_names(tree)
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ENGINE_INTERNALS and _engine_object(node.value, names)
    ]


def test_the_internals_heuristic_finds_reads_on_engine_objects_only() -> None:
    source = """
def one(run, access, attempt: "Attempt", current: DurableRun | None, summary: CacheSummary):
    run.entries
    self._run.store
    attempt.writer
    current.stats
    access.store
    summary.entries
    run.location
"""
    assert _internal_reads(source) == ["3: run.entries", "4: self._run.store", "5: attempt.writer", "6: current.stats"]


def test_the_airflow_side_reads_no_engine_internals() -> None:
    reads = [
        f"{path.relative_to(PACKAGE)}:{read}" for path in AIRFLOW_SIDE for read in _internal_reads(path.read_text())
    ]
    assert reads == [], (
        f"the Airflow side reads the engine's insides: {reads}; ask the attempt instead (add a method or a value "
        "to the engine's face that answers the question, and call that)"
    )


SETTINGS = PACKAGE / "tries" / "settings.py"


def test_pydantic_ai_options_are_read_in_one_module() -> None:
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == SETTINGS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            section = node.args[0]
            named = isinstance(section, ast.Constant) and section.value == "pydantic_ai"
            named |= isinstance(section, ast.Name) and section.id == "CONFIG_SECTION"
            if node.func.attr.startswith("get") and "conf" in ast.unparse(node.func.value) and named:
                reads.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert reads == [], (
        f"[pydantic_ai] options read outside tries/settings.py: {reads}; add a reader to tries/settings.py "
        "(and the option to provider.yaml, get_provider_info.py, docs/configuration.rst) and call it"
    )
