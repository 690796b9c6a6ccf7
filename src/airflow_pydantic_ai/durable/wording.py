"""Words for people, one rule for every floor: the task log, ``cache show`` and the view say "1 step", "2 steps",
and name a call "tool lookup (call c1)".

(The summary line is the one exception: its wording is fixed for dashboards, see ``reporting/stats.py``.)
"""

from __future__ import annotations

__all__ = ["call_label", "plural"]


def plural(count: int, noun: str, nouns: str = "") -> str:
    """``1 step``, ``2 steps`` (``nouns``: the plural when it is not ``noun`` + "s")."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


def call_label(words: str, name: str, call_id: str | None) -> str:
    """``tool lookup (call c1)``; ``tool lookup`` when the model gave the call no id."""
    return f"{words} {name} (call {call_id})" if call_id else f"{words} {name}"
