"""Every extra a user installs (``pip install "airflow-pydantic-ai[google]"``) resolves under every constraints file.

A user installs the provider with one of the project's constraints files (``constraints.txt``, the pinned latest
set, or one ``constraints/airflow-A-pydantic-ai-P.txt`` per supported combination). An extra that does not
resolve there (``pydantic-ai-slim[google]`` under ``tenacity==9.2.1``, issue 28) is a provider nobody can
install. uv resolves, it installs nothing: one ``uv pip compile`` per file with every extra at once (about two
seconds each), and one per extra only when that fails, to name the extras that do not resolve.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.extras import REPO_ROOT, installable_extras

UV = REPO_ROOT / ".tools" / "bin" / "uv"
CONSTRAINTS_FILES = [REPO_ROOT / "constraints.txt", *sorted((REPO_ROOT / "constraints").glob("*.txt"))]


def _compile(extras: list[str], constraints: Path, *, offline: bool) -> subprocess.CompletedProcess[str]:
    python_version = ".".join(str(part) for part in sys.version_info[:3])
    command = [
        str(UV),
        "pip",
        "compile",
        str(REPO_ROOT / "pyproject.toml"),
        *(arg for extra in extras for arg in ("--extra", extra)),
        "-c",
        str(constraints),
        # The interpreter the suite runs on (constraints.txt pins packages that need Python >= 3.11.5).
        "--python-version",
        python_version,
        "--python-platform",
        "x86_64-unknown-linux-gnu",
        # The 3.4 files pin a pre-release Airflow.
        "--prerelease=if-necessary-or-explicit",
        "--quiet",
        "--no-header",
        "-o",
        "/dev/null",
    ]
    if offline:
        command.append("--offline")
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)


def resolve(extras: list[str], constraints: Path) -> subprocess.CompletedProcess[str]:
    """uv's resolution of the project with ``extras`` under ``constraints``: from uv's cache when it can, else PyPI.

    Every version is pinned, so the cache answers as well as the index does; a miss (a fresh machine, a new pin)
    or a failure is asked again online, and only that answer counts.
    """
    cached = _compile(extras, constraints, offline=True)
    return cached if cached.returncode == 0 else _compile(extras, constraints, offline=False)


@pytest.mark.skipif(not UV.exists(), reason="uv is installed into .tools/ by `make install`")
@pytest.mark.parametrize("constraints", CONSTRAINTS_FILES, ids=lambda path: path.name)
def test_every_extra_resolves_under_the_constraints_file(constraints: Path) -> None:
    extras = installable_extras()
    together = resolve(extras, constraints)
    if together.returncode == 0:
        return
    failing = {extra: result.stderr for extra in extras if (result := resolve([extra], constraints)).returncode}
    named = ", ".join(failing) or "none alone (only together)"
    details = "\n\n".join(f"[{extra}]\n{stderr}" for extra, stderr in failing.items()) or together.stderr
    pytest.fail(
        f"extras that do not resolve under {constraints.relative_to(REPO_ROOT)}: {named}. Adjust the pins "
        f"(`make constraints` compiles every extra, see INSTALL_EXTRAS in the Makefile).\n{details}"
    )
