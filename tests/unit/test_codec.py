"""The tool-result codec on its own: exact round trips, and what a stored entry can never make us do."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.types import ImportString

from airflow_pydantic_ai.durable.encoding.allowed_types import AllowedTypes
from airflow_pydantic_ai.durable.encoding.codec import UnsupportedValue, decode_value, encode_value

HERE = AllowedTypes(modules=frozenset({__name__}))
"""What a tool defined in this module may return: the classes defined here."""


def _exact(value: Any) -> Any:
    """A comparable picture of ``value`` with the type of every node in it."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_exact(item) for item in value])
    if isinstance(value, dict):
        return ("dict", [(_exact(key), _exact(item)) for key, item in value.items()])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(_exact(item)) for item in value))
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, repr(value))


hashables = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.uuids(),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())),
    st.dates(),
    st.timedeltas(),
    st.decimals(allow_nan=False),
)
values = st.recursive(
    st.one_of(hashables, st.floats(), st.binary(max_size=8).map(bytearray)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), children, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.sets(hashables, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_every_supported_value_round_trips_type_for_type(value):
    try:
        encoded = encode_value(value)
    except UnsupportedValue as refused:
        # Only datetimes in zones we cannot name are refused (hypothesis also makes custom tzinfos).
        assert "time zone" in str(refused), refused
        return
    stored = json.loads(json.dumps(encoded, allow_nan=False))  # what the entry really holds: strict JSON
    assert _exact(decode_value(stored)) == _exact(value)


class Page(BaseModel):
    lines: list[str]
    meta: dict[str, int]


@dataclass
class Pair:
    left: int
    right: int


def test_plain_json_inside_a_typed_value_is_stored_untagged():
    page = Page(lines=[f"line {n}" for n in range(1000)], meta={"n": 1000})
    encoded = encode_value(page, HERE)
    assert encoded["fields"]["lines"] == {"type": "json", "value": page.lines}
    plain = len(json.dumps(page.model_dump()))
    assert len(json.dumps(encoded)) < 1.1 * plain + 300


def test_a_stored_class_is_never_imported(tmp_path, monkeypatch):
    """An entry naming a module this process has not imported is refused, and the module stays unimported."""
    (tmp_path / "never_imported_by_a_cache.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n"
        "from dataclasses import dataclass\n@dataclass\nclass X:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    node = {"type": "dataclass", "class": "never_imported_by_a_cache:X", "fields": {}}
    with pytest.raises(UnsupportedValue, match="not imported"):
        decode_value(node)
    assert "never_imported_by_a_cache" not in sys.modules
    assert not (tmp_path / "never_imported_by_a_cache.ran").exists()


def _import_file(path: Any, name: str) -> Any:
    """Import ``path`` under ``name`` and register it in ``sys.modules``, as a DAG-file parse does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_class_whose_file_was_imported_twice_comes_back_as_the_class_that_was_stored(tmp_path, monkeypatch):
    """``airflow dags test`` imports the DAG file again under the same name while the task runs the first
    import's tools: their values come back as the first import's classes, and only while the module still
    holds the twin seen when storing (a later reload is looked up in ``sys.modules``, never the stale class)."""
    name = f"dag_file_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{name}.py"
    source.write_text(
        "import dataclasses\nfrom pydantic import BaseModel\n\nclass Invoice(BaseModel):\n    total: float\n\n"
        "@dataclasses.dataclass\nclass Customer:\n    name: str\n    invoices: list[Invoice]\n"
    )
    monkeypatch.delitem(sys.modules, name, raising=False)
    running = _import_file(source, name)  # the import whose tools the task runs
    _import_file(source, name)  # the second parse: sys.modules now holds its twins
    value = running.Customer(name="Ada", invoices=[running.Invoice(total=12.5)])

    beside = AllowedTypes(modules=frozenset({name}))  # a tool defined in the DAG file
    encoded = encode_value(value, beside)  # raised "does not come back identical" before
    rebuilt = decode_value(json.loads(json.dumps(encoded)), beside)
    assert type(rebuilt) is running.Customer and type(rebuilt.invoices[0]) is running.Invoice
    assert rebuilt == value

    reloaded = _import_file(source, name)  # the module moved on: the stored class is stale now
    assert type(decode_value(encoded, beside)) is reloaded.Customer


@pytest.mark.parametrize(
    "node",
    [
        {"type": "dataclass", "class": "subprocess:Popen", "fields": {}},
        {"type": "pydantic", "class": "builtins:dict", "fields": {}, "set": []},
        {"type": "enum", "class": "os:environ", "name": "PATH"},
        {"type": "dataclass", "class": f"{__name__}:Pair", "fields": {"left": {"type": "json", "value": 1}}},
        {"type": "list", "items": [5]},
        {"type": "bytes", "value": "not base64!"},
        {"type": "martian"},
        [1, 2],
    ],
    ids=[
        "not-a-dataclass",
        "not-a-model",
        "not-an-enum",
        "fields-changed",
        "bare-item",
        "bad-base64",
        "unknown",
        "list",
    ],
)
def test_a_stored_node_that_does_not_fit_is_refused(node):
    import subprocess  # noqa: F401 - imported, so only the class check can refuse it

    with pytest.raises(UnsupportedValue) as refused:
        decode_value(node, HERE)
    assert "not imported" not in str(refused.value), "refused for another reason than the one under test"


def test_a_dataclass_holding_the_wrong_number_type_comes_back_as_stored():
    pair = Pair(left=1, right=True)  # type: ignore[arg-type]  # dataclasses do not validate
    assert _exact(decode_value(encode_value(pair, HERE), HERE).right) == ("bool", "True")


def test_values_that_compare_equal_but_differ_in_type_are_not_confused():
    value = {"a": [1, 1.0, True, decimal.Decimal(1)], "b": (dt.date(2026, 1, 1), uuid.UUID(int=1))}
    assert _exact(decode_value(encode_value(value))) == _exact(value)


@pytest.fixture
def tripwire_module(tmp_path, monkeypatch):
    """The name of an importable module that leaves a file behind if anything imports it."""
    name = f"tripwire_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    assert name not in sys.modules, "a stored value imported a module"
    assert not (tmp_path / f"{name}.ran").exists(), "a stored value ran a module's code"


@pytest.mark.parametrize(
    "allowed",
    [HERE, AllowedTypes.of(ImportString), AllowedTypes(modules=frozenset({"pydantic.types"}))],
    ids=["undeclared", "declared", "its-module"],
)
def test_a_stored_import_string_is_never_validated(tripwire_module, allowed):
    """Issue 35 (5): pydantic's ``ImportString`` imports what it validates; no declaration lets an entry name it."""
    node = {"type": "adapted", "class": "pydantic.types:ImportString", "value": tripwire_module}
    with pytest.raises(UnsupportedValue, match="runs code"):
        decode_value(node, allowed)


def test_a_class_imported_into_an_allowed_module_is_not_taken_for_its_own(tripwire_module):
    """A name the tool's module imports (``ImportString`` here) is not a class the module defines."""
    node = {"type": "adapted", "class": f"{__name__}:ImportString", "value": tripwire_module}
    with pytest.raises(UnsupportedValue, match="not a class defined there"):
        decode_value(node, HERE)


@pytest.mark.parametrize(
    "node",
    [
        {
            "type": "dataclass",
            "class": "tests.helpers.durable:RecordingLog",
            "fields": {"lines": {"type": "json", "value": []}},
        },
        {"type": "pydantic", "class": "pydantic.main:BaseModel", "fields": {}, "set": []},
        {"type": "enum", "class": "signal:Signals", "name": "SIGKILL"},
        {"type": "adapted", "class": "fractions:Fraction", "value": "1/3"},
    ],
    ids=["dataclass", "model", "enum", "adapted"],
)
def test_a_class_only_the_entry_names_is_refused(node):
    """Issue 35 (5): a class the tool neither declares nor defines beside itself is never built from an entry."""
    import fractions  # noqa: F401 - imported, so only the allowance can refuse them
    import signal  # noqa: F401

    import tests.helpers.durable  # noqa: F401

    with pytest.raises(UnsupportedValue, match="neither in the tool's declared return type"):
        decode_value(node, HERE)


@dataclass
class Receipt:
    total: decimal.Decimal
    pair: Pair


def test_declared_classes_and_those_reachable_from_them_are_rebuilt():
    """A tool declared ``-> list[Receipt]`` may return a ``Receipt`` and the ``Pair`` inside it, wherever defined."""
    allowed = AllowedTypes.of(list[Receipt])
    assert {Receipt, Pair} <= allowed.declared
    value = [Receipt(total=decimal.Decimal("1.50"), pair=Pair(left=1, right=2))]
    assert decode_value(json.loads(json.dumps(encode_value(value, allowed))), allowed) == value


def test_a_value_a_replay_would_refuse_is_not_stored():
    with pytest.raises(UnsupportedValue, match="neither in the tool's declared return type"):
        encode_value(Pair(left=1, right=2))
