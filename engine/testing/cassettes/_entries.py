"""A run's history as cassette entries: the one reading used to record a run and to check one.

Each action outcome, tool call and reply of the history becomes an :class:`Entry`, keyed by
node, hook and turn (the N-th time that hook of that node ran). A recorded run and the run
a test drives are both read here, so the two lists compare entry by entry.

A model call's request is described by what :func:`describe_request` keeps: a digest of
its messages (each as role, content, tool calls and the call it answers), a short digest
per message, and the rendered system message and prompt as sent, so a report can say
what changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from phasegraph.core._secrets import SecretMasker
from phasegraph.model import LedgerEntry, NodeStatus, RunState, StepRecord, apply_records
from phasegraph.run import PreparedGraph
from phasegraph.testing.cassettes._format import Entry
from phasegraph.views import jsonable

__all__ = ["describe_request", "entries_of"]

_OUTCOMES: Final = frozenset({"transition", "fail"})
_FED: Final = {"http": "http", "shell": "shell", "llm": "llm"}
"""Binding kinds whose answers come from the cassette, and their entry kinds."""
_CONVERSATION: Final = "conversation"


def _canonical(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as compared: the same whether read from run data or a request body."""
    shown: dict[str, Any] = {"role": message.get("role"), "content": message.get("content") or ""}
    calls = message.get("tool_calls") or []
    if calls:
        shown["tool_calls"] = [
            {
                "id": call.get("id"),
                "name": (call.get("function") or {}).get("name"),
                "arguments": (call.get("function") or {}).get("arguments"),
            }
            for call in calls
        ]
    if message.get("tool_call_id"):
        shown["tool_call_id"] = message["tool_call_id"]
    return shown


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def describe_request(
    messages: Sequence[Mapping[str, Any]], output: Mapping[str, Any]
) -> dict[str, Any]:
    """What a cassette keeps of a model request.

    Args:
        messages: The request's messages, the system message first when there is one.
        output: The step's output (its ``system`` and ``prompt`` as sent, when given).
    """
    canonical = [_canonical(m) for m in messages]
    described: dict[str, Any] = {
        "digest": "sha256:" + _digest(canonical),
        "messages": [f"{m['role']} {_digest(m)[:12]}" for m in canonical],
    }
    for part in ("system", "prompt"):
        if isinstance(output.get(part), str):
            described[part] = output[part]
    return described


class _Reader:
    """Turns records into entries, counting each node's hook runs."""

    def __init__(self, prepared: PreparedGraph) -> None:
        self._prepared = prepared
        self._nodes = {node.id: node for node in prepared.definition.nodes}
        self._turns: dict[tuple[str, str], int] = {}

    def hook(self, node_id: str, path: Sequence[str]) -> str | None:
        node = self._nodes.get(node_id)
        if node is None or not path:
            return None
        return self._prepared.machines.hook(node.machine, tuple(path))

    def kind(self, node_id: str, hook: str) -> str:
        node = self._nodes.get(node_id)
        binding = None if node is None else node.bind.get(hook)
        return "action" if binding is None else _FED.get(binding.kind, "action")

    def conversation(self, node_id: str, hook: str) -> str:
        binding = self._nodes[node_id].bind.get(hook)
        key = None if binding is None else binding.config.get("conversation")
        return str(key or _CONVERSATION)

    def turn(self, node_id: str, hook: str, *, done: bool) -> int:
        """The hook's current turn; ``done`` counts a finished run of it."""
        count = self._turns.get((node_id, hook), 0) + 1
        if done:
            self._turns[(node_id, hook)] = count
        return count

    def entry(self, before: RunState, after: RunState, record: StepRecord) -> Entry | None:
        node_id = record.node
        if node_id is None:
            return None
        if record.kind == "reply":
            return self._reply(record, node_id)
        ledger = record.ledger
        if ledger is not None and ledger.tool and ledger.result is not None:
            return self._tool(record, node_id, ledger)
        if record.kind not in _OUTCOMES:
            return None
        hook = self.hook(node_id, record.source)
        running = before.nodes.get(node_id)
        if hook is None or running is None or running.status is not NodeStatus.RUNNING:
            return None
        return self._outcome(before, after, record, node_id, hook)

    def _reply(self, record: StepRecord, node_id: str) -> Entry | None:
        hook = self.hook(node_id, record.source) or ""
        answer: dict[str, Any] = {"trigger": record.trigger}
        for part in ("payload", "data"):
            if record.result.get(part):
                answer[part] = jsonable(record.result[part])
        return Entry(
            at=record.seq,
            node=node_id,
            hook=hook,
            kind="reply",
            turn=self.turn(node_id, f"reply:{hook}", done=True),
            answer=answer,
            outcome=_outcome(record, None),
        )

    def _tool(self, record: StepRecord, node_id: str, ledger: LedgerEntry) -> Entry:
        hook = self.hook(node_id, record.source) or ""
        return Entry(
            at=record.seq,
            node=node_id,
            hook=hook,
            kind="tool",
            turn=self.turn(node_id, hook, done=False),
            call=ledger.index,
            request={"tool": ledger.tool, "arguments": jsonable(ledger.arguments)},
            answer={"result": jsonable(ledger.result)},
        )

    def _outcome(
        self, before: RunState, after: RunState, record: StepRecord, node_id: str, hook: str
    ) -> Entry:
        kind = self.kind(node_id, hook)
        failed = after.nodes[node_id].error if record.kind == "fail" else None
        request: dict[str, Any] = {}
        answer: dict[str, Any] = {}
        output = record.result.get("output") or {}
        if kind == "llm" and failed is None and "finish_reason" not in output:
            # The call failed and the state took it as an error trigger: fail it again.
            answer = {"error": record.errors[0].message if record.errors else "the call failed"}
        elif kind == "llm" and failed is None:
            key = self.conversation(node_id, hook)
            said = list(after.data.get(key) or ())
            system = [{"role": "system", "content": output["system"]}] if "system" in output else []
            if said:
                request = describe_request([*system, *said[:-1]], output)
                answer = {"message": jsonable(said[-1]), "usage": jsonable(output.get("usage", {}))}
        elif kind in ("http", "shell"):
            request = {k: jsonable(output[k]) for k in ("method", "url", "argv") if k in output}
            answer = {} if failed is not None else _fed_result(before, record)
        if failed is not None and kind != "action":
            answer = {"error": failed}
        return Entry(
            at=record.seq,
            node=node_id,
            hook=hook,
            kind=kind,
            turn=self.turn(node_id, hook, done=True),
            request=request,
            answer=answer,
            outcome=_outcome(record, failed),
        )


def _outcome(record: StepRecord, failed: str | None) -> dict[str, Any]:
    if failed is not None:
        return {"failed": failed}
    return {"trigger": record.trigger, "state": "/".join(record.dest)}


def _fed_result(before: RunState, record: StepRecord) -> dict[str, Any]:
    """The action result as the action returned it (to feed it again).

    Data is recorded after reducers; a list the step extended is recorded as the items it
    added, and the raw update of a reduced key is kept in the record's result.
    """
    data = dict(record.data)
    for key, items in record.appended.items():
        data[key] = [*before.data.get(key, ()), *items]
    data.update(record.result.get("data") or {})
    result: dict[str, Any] = {"trigger": record.trigger or str(record.result.get("trigger", ""))}
    for name, value in (
        ("data", data),
        *((p, record.result.get(p)) for p in ("payload", "output")),
    ):
        if value:
            result[name] = jsonable(value)
    return result


def entries_of(
    prepared: PreparedGraph,
    first: RunState,
    records: Iterable[StepRecord],
    masker: SecretMasker | None = None,
) -> list[Entry]:
    """The cassette entries of a run, in the order they happened.

    Args:
        prepared: The graph the run followed (its hooks and bindings name the entries).
        first: The run's seq-0 state.
        records: Its step records after seq 0, in order.
        masker: Masks secrets in what the entries keep (digests are of the unmasked
            requests, so a request holding a secret still matches).
    """
    reader = _Reader(prepared)
    state = first
    entries: list[Entry] = []
    for record in records:
        after = apply_records(state, (record,))
        entry = reader.entry(state, after, record)
        state = after
        if entry is not None:
            entries.append(entry if masker is None else _masked(entry, masker))
    return entries


def _masked(entry: Entry, masker: SecretMasker) -> Entry:
    return dataclasses.replace(
        entry,
        request=masker.value(entry.request),
        answer=masker.value(entry.answer),
        outcome=masker.value(entry.outcome),
    )
