"""The extras ``pyproject.toml`` offers users, read once for the tests that check they install."""

from __future__ import annotations

import tomllib
from pathlib import Path

__all__ = ["MAIN_PROVIDERS", "REPO_ROOT", "installable_extras"]

REPO_ROOT = Path(__file__).resolve().parents[2]
# Extras for the project's own work, never installed by a user on their own.
_DEVELOPMENT_EXTRAS = frozenset({"test", "docs"})
# The providers issue 28 asked an extra for: each must resolve under every constraints file.
MAIN_PROVIDERS = ("openai", "anthropic", "google", "bedrock", "mistral", "groq")


def installable_extras() -> list[str]:
    """The extras a user installs, in ``pyproject.toml`` order."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return [name for name in extras if name not in _DEVELOPMENT_EXTRAS]
