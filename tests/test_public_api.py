"""The public API: exactly what users may import, and the page that documents it.

The export lists are written out here on purpose: adding or removing a public name is a
change to this file too, so an API change never happens by accident. A module is public
when no part of its name starts with ``_``; its public names are its ``__all__``, and
the docs site's Python reference documents them (rendered from the docstrings by
``docs/hooks/refpages/python_page.py`` when the site is built). Names that only serve other
subpackages are not exported: those subpackages import them from the private module that
defines them, and import-linter's contracts (``pyproject.toml``) bound who imports whom.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys

import pytest

from builders import REPO

sys.path.insert(0, str(REPO / "docs" / "hooks"))
from refpages import python_page

PUBLIC = {
    "phasegraph": [
        "ActionContext",
        "ActionResult",
        "Engine",
        "ErrorCode",
        "Event",
        "EventBus",
        "EventId",
        "IllegalTriggerError",
        "NodeOutcome",
        "NodeStatus",
        "PhasegraphError",
        "RunNotFoundError",
        "RunOptions",
        "RunState",
        "RunStatus",
        "SpecError",
        "StepRecord",
        "Store",
        "StoreError",
        "StreamSettings",
        "__version__",
        "load_graph",
        "load_machine",
        "open_store",
        "replace",
    ],
    "phasegraph.actions": [
        "Action",
        "ActionContext",
        "ActionResult",
        "CallNext",
        "EventSink",
        "ProviderError",
        "ToolCall",
        "declare_effect",
        "effect_of",
    ],
    "phasegraph.actions.llm": [],
    "phasegraph.analysis": [
        "Code",
        "FORMATS",
        "Finding",
        "Format",
        "Report",
        "Severity",
        "check",
        "check_all",
        "diagram",
    ],
    "phasegraph.api": [
        "Engine",
        "GraphSource",
        "StreamSettings",
    ],
    "phasegraph.cli": [
        "main",
        "tune_collector",
    ],
    "phasegraph.codec": [
        "FORMAT_VERSION",
        "decode_record",
        "decode_snapshot",
        "encode_record",
        "encode_snapshot",
    ],
    "phasegraph.concerns": [],
    "phasegraph.concerns.errorlog": [
        "log_error",
        "spent",
    ],
    "phasegraph.concerns.fallback": [
        "emergency",
        "recover",
    ],
    "phasegraph.concerns.plans": [
        "given_plan",
        "read_plan",
    ],
    "phasegraph.concerns.quality": [
        "reflect",
    ],
    "phasegraph.concerns.solo": [
        "phase_action",
    ],
    "phasegraph.concerns.spec": [
        "check_spec",
    ],
    "phasegraph.concerns.team": [
        "checkpoint",
        "rollback",
        "run_command",
        "validate",
    ],
    "phasegraph.concerns.validation": [
        "validate_output",
    ],
    "phasegraph.core": [],
    "phasegraph.errors": [
        "ActionError",
        "ActionTimeoutError",
        "BudgetExhaustedError",
        "CodecError",
        "DataConflictError",
        "DefinitionUnavailableError",
        "ErrorCode",
        "GateAnsweredError",
        "IllegalTriggerError",
        "InputError",
        "JournalHeadError",
        "LeaseHeldError",
        "LeaseLostError",
        "LoopDetectedError",
        "NotAReviewerError",
        "PhasegraphError",
        "Problem",
        "RequestError",
        "RunBusyError",
        "RunError",
        "RunNotFoundError",
        "RunStateError",
        "SequenceConflictError",
        "SourceLocation",
        "SpecError",
        "SpendRefusedError",
        "StaleReplyError",
        "StoreError",
        "StoreUnavailableError",
        "UnsupportedFormatError",
    ],
    "phasegraph.events": [
        "Event",
        "EventBus",
        "EventId",
        "Listener",
    ],
    "phasegraph.model": [
        "ActionDef",
        "Actor",
        "BudgetDef",
        "BusyDef",
        "BusyPolicy",
        "ChunkedMap",
        "Effect",
        "ErrorRecord",
        "GraphDef",
        "Interrupt",
        "LedgerEntry",
        "MachineDef",
        "MiddlewareDef",
        "NodeDef",
        "NodeOutcome",
        "NodeState",
        "NodeStatus",
        "OnUnknown",
        "Plan",
        "PlanItem",
        "Price",
        "RunState",
        "RunStatus",
        "SpendLimit",
        "StateDef",
        "StepRecord",
        "TransitionDef",
        "Value",
        "replace",
    ],
    "phasegraph.run": [
        "Clock",
        "Divergence",
        "IdFactory",
        "Middleware",
        "Migration",
        "PreparedGraph",
        "RUN_ID_PATTERN",
        "Renames",
        "ReplayReport",
        "Run",
        "RunOptions",
        "SystemClock",
        "TimeOrderedIds",
        "chain",
        "prepare",
    ],
    "phasegraph.server": [
        "ServerSettings",
        "create_app",
    ],
    "phasegraph.spec": [
        "YamlLimits",
        "load_graph",
        "load_graph_text",
        "load_machine",
    ],
    "phasegraph.store": [
        "ACCEPTED_URL_FORMS",
        "Commit",
        "DEFAULT_STORE_URL",
        "ForwardingStore",
        "Lease",
        "LeaseLine",
        "Message",
        "RunMeta",
        "Store",
        "StoredRun",
        "check_commit",
        "check_page",
        "check_ttl",
        "journal_head_error",
        "lease_held_error",
        "lease_lost_error",
        "open_store",
        "run_not_found_error",
        "sequence_conflict_error",
    ],
    "phasegraph.store.base": [
        "Commit",
        "ForwardingStore",
        "Lease",
        "LeaseLine",
        "Message",
        "RunMeta",
        "Store",
        "StoredRun",
    ],
    "phasegraph.store.memory": [
        "MemoryStore",
    ],
    "phasegraph.store.postgres": [
        "PostgresStore",
    ],
    "phasegraph.store.redis": [
        "RedisStore",
    ],
    "phasegraph.store.sqlite": [
        "SqliteStore",
    ],
    "phasegraph.testing": [
        "CrashReport",
        "Difference",
        "JournalDamage",
        "MachineStateMachine",
        "Outcome",
        "PROPERTIES",
        "PropertyFailed",
        "PropertyResult",
        "PropertyStats",
        "PropertyTest",
        "REDIS_CLUSTER_URL_ENV",
        "REDIS_URL_ENV",
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
    ],
    "phasegraph.testing.cassettes": [
        "CASSETTE_SUFFIX",
        "CASSETTE_VERSION",
        "Cassette",
        "CassetteReport",
        "Change",
        "Divergence",
        "Entry",
        "KINDS",
        "assert_cassette",
        "cassette_files",
        "check_cassette",
        "graph_of",
        "play_cassette",
        "read_cassette",
        "record_run",
        "relative_source",
        "secrets_of",
        "update_cassette",
        "write_cassette",
    ],
    "phasegraph.testing.cassettes.plugin": [
        "CassetteFile",
        "CassetteItem",
        "pytest_collect_file",
    ],
    "phasegraph.tools": [],
    "phasegraph.views": [],
    "phasegraph.worker": [
        "QueueEntry",
        "WorkQueue",
        "Worker",
        "WorkerOptions",
        "WorkerStats",
        "drive_locally",
        "has_work_queue",
        "work_queue_of",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exports_are_deliberate(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == PUBLIC[module]
    for name in imported.__all__:
        assert hasattr(imported, name), f"{module}.__all__ names {name!r}, which it lacks"


def test_every_public_module_is_pinned() -> None:
    assert python_page.public_modules() == sorted(PUBLIC)


def test_the_api_page_documents_every_name_and_nothing_else() -> None:
    page = python_page.page()
    listed: dict[str, list[str]] = {m: [] for m in re.findall(r"^## `([\w.]+)`$", page, re.M)}
    for module, name in re.findall(r"^### `([\w.]+)\.(\w+)`$", page, re.M):
        listed[module].append(name)
    assert listed == PUBLIC
    assert "(undocumented)" not in page
    # Each name's section holds its whole docstring, not only its first line.
    engine = page.split("### `phasegraph.api.Engine`", 1)[1].split("\n### ", 1)[0]
    assert python_page.docstring("phasegraph.api", "Engine").splitlines()[-1].strip() in engine


def _user_imports() -> list[tuple[str, str, str]]:
    """``(where, module, name)`` for each phasegraph import in what users read and copy."""
    sources = [(path, path.read_text(encoding="utf-8")) for path in REPO.glob("graphs/*.py")]
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        sources += [
            (page, block) for block in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
        ]
    found = []
    for path, text in sources:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("phasegraph"):
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                found += [(where, node.module or "", alias.name) for alias in node.names]
    return sorted(found)


def _is_public(module: str, name: str) -> bool:
    if module == "phasegraph.graphs" or module.startswith("phasegraph.graphs."):
        return True  # the example graphs' own helpers, shipped beside them
    return name in PUBLIC.get(module, ()) or f"{module}.{name}" in PUBLIC


def test_users_are_shown_only_public_names() -> None:
    # The README's and the docs' examples and the example graphs' actions are what users
    # copy: every name they import must be public.
    imports = _user_imports()
    assert imports  # the scan does see them
    private = [
        f"{where}: from {module} import {name}"
        for where, module, name in imports
        if not _is_public(module, name)
    ]
    assert private == []
