"""One version: ``pyproject.toml``'s, repeated by the package, the provider metadata and the changelog."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import airflow_pydantic_ai
from airflow_pydantic_ai.get_provider_info import get_provider_info

REPO_ROOT = Path(__file__).resolve().parents[2]


def _pyproject_version() -> str:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_package_version_is_the_pyproject_version() -> None:
    # __version__ comes from the installed metadata; a mismatch means .venv predates a version bump.
    assert airflow_pydantic_ai.__version__ == _pyproject_version()


def test_provider_metadata_lists_the_pyproject_version_first() -> None:
    version = _pyproject_version()
    assert get_provider_info()["versions"][0] == version
    assert yaml.safe_load((REPO_ROOT / "provider.yaml").read_text())["versions"][0] == version


def test_provider_metadata_versions_are_newest_first_without_repeats() -> None:
    versions = get_provider_info()["versions"]
    as_tuples = [tuple(int(part) for part in v.split(".")) for v in versions]
    assert as_tuples == sorted(set(as_tuples), reverse=True)


def test_changelog_opens_with_the_pyproject_version() -> None:
    headings = re.findall(r"^(\d+\.\d+\.\d+)\n-+$", (REPO_ROOT / "CHANGELOG.rst").read_text(), flags=re.MULTILINE)
    assert headings[0] == _pyproject_version()
