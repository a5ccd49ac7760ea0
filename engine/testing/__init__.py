"""The public test kit (needs the ``test`` extra).

The store contract suite, a Redis server and a Redis Cluster for tests, hypothesis
property tests for your own machines and graphs, and a scripted OpenAI-compatible model
server (:class:`ScriptedModelServer`) to run agent graphs against, offline.

Owns ``hypothesis``. May import :mod:`phasegraph.api`, :mod:`phasegraph.analysis` and
everything below them.
"""

from __future__ import annotations

from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.testing._cluster import REDIS_CLUSTER_URL_ENV, redis_cluster
from phasegraph.testing._contract import (
    REDIS_URL_ENV,
    JournalDamage,
    StoreContract,
    isolated_redis_store,
    isolated_redis_url,
    make_commit,
    redis_server,
)
from phasegraph.testing._crash import CrashReport, Difference, crash_equivalence
from phasegraph.testing._machines import (
    PROPERTIES,
    Outcome,
    PropertyFailed,
    PropertyStats,
    PropertyTest,
    Script,
    graph_outcomes,
    graph_properties,
    machine_properties,
    outcomes,
    scripted_actions,
)
from phasegraph.testing._stateful import MachineStateMachine, machine_state_machine
from phasegraph.testing._verify import PropertyResult, graph_test, machine_test, verify

__all__ = [
    "PROPERTIES",
    "REDIS_CLUSTER_URL_ENV",
    "REDIS_URL_ENV",
    "CrashReport",
    "Difference",
    "JournalDamage",
    "MachineStateMachine",
    "Outcome",
    "PropertyFailed",
    "PropertyResult",
    "PropertyStats",
    "PropertyTest",
    "Script",
    "ScriptedModelServer",
    "StoreContract",
    "crash_equivalence",
    "graph_outcomes",
    "graph_properties",
    "graph_test",
    "isolated_redis_store",
    "isolated_redis_url",
    "machine_properties",
    "machine_state_machine",
    "machine_test",
    "make_commit",
    "outcomes",
    "redis_cluster",
    "redis_server",
    "scripted_actions",
    "verify",
]
