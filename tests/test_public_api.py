"""The public surface: what each package exports, and who may import what.

The export lists are written out here on purpose: adding or removing a public name is a
change to this file too, so an API change never happens by accident. Packages keep
their helpers in private modules (``_name.py``); only tests reach into those.
"""

from __future__ import annotations

import ast
import importlib

import pytest

from builders import REPO

PUBLIC = {
    "phasegraph": [
        "ActionContext",
        "ActionResult",
        "Engine",
        "ErrorCode",
        "Event",
        "EventBus",
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
        "__version__",
        "load_graph",
        "load_machine",
        "open_store",
        "replace",
        "tune_collector",
    ],
    "phasegraph.actions": [
        "Action",
        "ActionContext",
        "ActionResult",
        "BUILDERS",
        "CallNext",
        "DEFAULT_COMMAND_TIMEOUT",
        "ERROR_LOG_EVENT",
        "ERROR_TRIGGER",
        "EventSink",
        "HumanGate",
        "TIMEOUT_TRIGGER",
        "ToolCall",
        "build_action",
        "build_gate",
        "build_shell_action",
        "classify_error",
        "describe_error",
        "render_payload",
    ],
    "phasegraph.actions.llm": [
        "ADVANCE_TRIGGER",
        "BASE_URL_ENV",
        "DEFAULT_CONVERSATION",
        "DELTA_EVENT",
        "KEY_ENV",
        "LlmConfig",
        "MODEL_ENV",
        "OBSERVED_TRIGGER",
        "OUTCOMES",
        "ProviderError",
        "SUMMARY_PREFIX",
        "ScriptedModelServer",
        "build_llm_action",
        "build_tools_action",
        "estimate_tokens",
    ],
    "phasegraph.analysis": [
        "Code",
        "FORMATS",
        "Finding",
        "Format",
        "Report",
        "Severity",
        "Target",
        "analyze_graph",
        "analyze_machine",
        "check",
        "diagram",
        "draft_diagram",
        "github_annotation",
        "graph_diagram",
        "machine_diagram",
        "machine_family",
        "resolve",
        "step_bound",
    ],
    "phasegraph.cli": [
        "build_parser",
        "main",
        "tune_collector",
    ],
    "phasegraph.codec": [
        "FORMAT_VERSION",
        "MAX_DEPTH",
        "RecordBody",
        "SnapshotCache",
        "StoredSnapshot",
        "check_encodable",
        "decode_record",
        "decode_snapshot",
        "decode_value",
        "encode_record",
        "encode_snapshot",
        "encode_value",
        "history_json",
        "history_page_json",
        "json_int",
        "read_record",
        "read_records",
        "read_snapshot",
        "to_json",
    ],
    "phasegraph.concerns": [],
    "phasegraph.core": [
        "CompiledMachine",
        "Frontier",
        "MachineSet",
        "Position",
        "StepResult",
        "WorkflowGraph",
        "WriteConflict",
        "compile_graph",
        "compile_machine",
        "compile_machines",
        "declared_conflicts",
        "find_cycle",
        "shared_keys",
        "write_conflict",
    ],
    "phasegraph.run": [
        "CheckpointPolicy",
        "Checkpoints",
        "Clock",
        "Created",
        "Divergence",
        "Hold",
        "IdFactory",
        "LeaseKeeper",
        "Loaded",
        "PreparedGraph",
        "REDUCERS",
        "RUN_ID_PATTERN",
        "ReplayReport",
        "Run",
        "RunEnvironment",
        "RunOptions",
        "SystemClock",
        "TimeOrderedIds",
        "check_reply",
        "check_run_id",
        "create_run",
        "decode_history",
        "decode_stored",
        "differing_fields",
        "first_commit",
        "fork_state",
        "gate_answers",
        "history_json",
        "initial_state",
        "load",
        "prepare",
        "rebuild",
        "replay_history",
        "report_view",
        "run_meta",
    ],
    "phasegraph.server": [
        "PUBLIC_PATHS",
        "STATUS_FOR",
        "ServerSettings",
        "create_app",
        "problem",
    ],
    "phasegraph.spec": [
        "YamlLimits",
        "builtin_graphs",
        "builtin_machines",
        "graph_source",
        "input_validator",
        "is_name",
        "load_graph",
        "load_graph_text",
        "load_machine",
        "load_machine_family",
        "machine_source",
        "read_raw",
    ],
    "phasegraph.store": [
        "ACCEPTED_URL_FORMS",
        "Commit",
        "DEFAULT_STORE_URL",
        "FINISHED_STATUSES",
        "ForwardingStore",
        "HOLDER_SEPARATOR",
        "Lease",
        "LeaseLine",
        "RunMeta",
        "Store",
        "StoredRun",
        "check_commit",
        "check_page",
        "check_ttl",
        "holder_gone",
        "journal_head_error",
        "lease_held_error",
        "lease_lost_error",
        "open_store",
        "owner_label",
        "owner_with_holder",
        "redact_url",
        "run_not_found_error",
        "sequence_conflict_error",
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
    "phasegraph.worker": [
        "Driven",
        "LocalMailbox",
        "Mailbox",
        "Outcome",
        "QueueEntry",
        "Reply",
        "RunDriver",
        "WorkQueue",
        "Worker",
        "WorkerOptions",
        "WorkerStats",
        "cancel_by_worker",
        "has_work_queue",
        "post_reply",
        "reply_applied",
        "work_queue_of",
    ],
    "phasegraph.tools": [
        "ADVANCE_TOOL",
        "ALL_TOOLS",
        "BUILTIN_TOOLS",
        "PHASE_VIOLATION",
        "PRESETS",
        "PhaseRule",
        "ToolFactory",
        "ToolPolicy",
        "build_tools",
        "command_violation",
        "parse_policy",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_exports_are_deliberate(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PUBLIC[package]
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name!r}, which it lacks"


def _private_imports() -> list[str]:
    """Imports of another package's private module, anywhere in the package."""
    found = []
    engine = REPO / "engine"
    for path in sorted(engine.rglob("*.py")):
        parts = path.relative_to(engine).parts
        own = parts[0] if len(parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = node.module.split(".")
            elif isinstance(node, ast.Import):
                names = node.names[0].name.split(".")
            else:
                continue
            if names[0] != "phasegraph" or len(names) < 3:
                continue
            if any(n.startswith("_") for n in names[2:]) and names[1] != own:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {'.'.join(names)}")
    return found


def test_no_package_reaches_into_another_packages_helpers() -> None:
    assert _private_imports() == []
