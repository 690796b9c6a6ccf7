"""Counts in words, one rule for every floor: the task log, ``cache show`` and the view say "1 step", "2 steps".

(The summary line is the one exception: its wording is fixed for dashboards, see ``steps/stats.py``.)
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, nouns: str = "") -> str:
    """``1 step``, ``2 steps`` (``nouns``: the plural when it is not ``noun`` + "s")."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"
