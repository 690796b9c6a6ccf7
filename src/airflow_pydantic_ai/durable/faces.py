"""How the engine's faces (``__init__.py``, ``read.py``, ``side_effects.py``) hand out their names: each name is
imported from its home module the first time it is asked for, so importing a face stays light (``read.py``
never pulls in pydantic-ai; ``cache list`` starts fast), and kept in the face's namespace afterwards."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["load_name"]


def load_name(face: dict[str, Any], name: str, homes: Mapping[str, str]) -> Any:
    """``name`` for the face whose ``globals()`` is ``face``: imported from ``airflow_pydantic_ai.durable.<home>``
    (``homes[name]``) and kept in ``face``; ``AttributeError`` for a name the face does not have."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {face['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"airflow_pydantic_ai.durable.{home}"), name)
    face[name] = value
    return value
