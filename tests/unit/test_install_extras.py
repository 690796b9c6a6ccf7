"""The extras a user installs are the ones ``make constraints`` compiles, the main providers among them."""

from __future__ import annotations

import re

from tests.helpers.extras import MAIN_PROVIDERS, REPO_ROOT, installable_extras


def test_the_main_providers_have_extras() -> None:
    assert set(MAIN_PROVIDERS) <= set(installable_extras())


def test_make_constraints_compiles_every_installable_extra() -> None:
    # An extra missing from INSTALL_EXTRAS gets no pins in constraints/*.txt, so nothing keeps it installable.
    match = re.search(r"^INSTALL_EXTRAS := (.+)$", (REPO_ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert match, "the Makefile defines INSTALL_EXTRAS"
    assert sorted(match.group(1).split()) == sorted(installable_extras())
