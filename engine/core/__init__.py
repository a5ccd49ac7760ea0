"""Compiled machines and workflow graphs: the pure structures every step consults.

Owns ``transitions`` (:mod:`._machine`) and ``networkx`` (:mod:`._graph`). May import
:mod:`phasegraph.model` and :mod:`phasegraph.errors` only.
"""

from __future__ import annotations

__all__: list[str] = []
