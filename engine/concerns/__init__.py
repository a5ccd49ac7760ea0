"""Concern actions: small python actions to bind to the hooks of the built-in machines.

Each module serves one machine of ``states/`` (or one cross-cutting concern); bind its
actions by name in a graph, for example::

    bind:
      recover: {python: "phasegraph.concerns.fallback:recover"}
      emergency: {python: "phasegraph.concerns.fallback:emergency"}
      reflect: {python: "phasegraph.concerns.quality:reflect"}

- :mod:`phasegraph.concerns.fallback`: ``recover`` and ``emergency`` for ``fallback_chain``,
  and the rule table that turns a failure into a structured error.
- :mod:`phasegraph.concerns.quality`: ``reflect`` for ``quality_loop``.
- :mod:`phasegraph.concerns.validation`: rules that check an agent's output.
- :mod:`phasegraph.concerns.errorlog`: :func:`~phasegraph.concerns.errorlog.log_error`,
  how any action adds a record to the run's error log.
- :mod:`phasegraph.concerns.solo`, :mod:`phasegraph.concerns.spec`,
  :mod:`phasegraph.concerns.team`: SOLO phases, spec review and the team-DAG lifecycle
  (``run_command`` runs a plan phase's command).
- :mod:`phasegraph.concerns.plans`: a plan given in the input, or read from a model's
  answer, for the ``model_plan`` machine.

Concern actions are deterministic and do no hidden I/O: what they learn goes into the
trigger payload (the next action's ``ctx.payload``), the run's data and the error log.
"""

from __future__ import annotations

__all__: list[str] = []
