"""The suggestion a message about a mistaken name ends with: its one home.

It loads nothing but on a mistake (``difflib``), so the checks that name a mistake outside
the loader (tool rules, middleware settings, built-in names) import it without loading the
schema's models.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["did_you_mean"]


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    import difflib  # here: only a mistake needs it, and a run's start-up does not pay for it

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
