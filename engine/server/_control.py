"""HTTP routes that act on runs: reply, message, resume, cancel, fork, replay, migrate."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from phasegraph.actions import ActionResult
from phasegraph.model import frozen_map
from phasegraph.run import Renames
from phasegraph.run._replay import report_view
from phasegraph.server._principal import principal_of
from phasegraph.server._routes import graph_of
from phasegraph.server._support import (
    ENGINE,
    EXECUTOR,
    MAX_SEQ,
    check_fields,
    fail,
    json_body,
    ok,
    optional_mapping,
    optional_string,
    run_json,
)
from phasegraph.server._upload import UPLOAD_FIELD
from phasegraph.views import migration_view

__all__ = ["routes"]

_TRIGGER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
_REPLY_FIELDS: Final = frozenset({"interrupt_id", "trigger", "payload", "data", "step"})
_MESSAGE_FIELDS: Final = frozenset({"text", "payload", "id"})
_MESSAGE_ID: Final = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII, no space
_FORK_FIELDS: Final = frozenset({"at_seq", "data"})
_MIGRATE_FIELDS: Final = frozenset({"graph", UPLOAD_FIELD, "dry_run", "renames"})
_MAX_REASON: Final = 1000


async def reply(request: web.Request) -> web.Response:
    """Answer a pending interrupt; the run goes on in the background."""
    run_id = request.match_info["run_id"]
    body = await json_body(request)
    check_fields(body, _REPLY_FIELDS)
    interrupt_id = optional_string(body, "interrupt_id")
    trigger = optional_string(body, "trigger", _TRIGGER)
    if interrupt_id is None or trigger is None:
        fail("body", "`interrupt_id` and `trigger` are required")
    step = body.get("step")
    if step is not None and (type(step) is not int or step < 0):
        fail("body.step", "must be the seq that opened the gate (the interrupt's `seq`, >= 0)")
    result = ActionResult(
        trigger=trigger,
        payload=frozen_map(optional_mapping(body, "payload")),
        data=frozen_map(optional_mapping(body, "data")),
    )
    # Without `step`, the gate as it is open now; a reply applies once either way. Who
    # answers is held to the gate's reviewers unless trusted (Principal.trusted says who).
    who = principal_of(request)
    state = await request.app[EXECUTOR].reply(
        run_id, interrupt_id, result, actor=who.actor, step=step, trusted=who.trusted
    )
    return ok(await run_json(request.app, state))


async def message(request: web.Request) -> web.Response:
    """Send a run a message: kept in its inbox (202) and taken in order, or refused (409).

    ``text`` (read as ``{"text": ...}``) or ``payload`` is the message, ``id`` its id (a
    message sent again under one id is taken once). What it does while the run is busy is
    the graph's ``busy:`` policy: ``reject`` refuses it with 409, naming the step the run
    is on.
    """
    run_id = request.match_info["run_id"]
    body = await json_body(request)
    check_fields(body, _MESSAGE_FIELDS)
    text = body.get("text")
    if text is not None and not isinstance(text, str):
        fail("body.text", f"expected a string, not {type(text).__name__}")
    if (text is None) == ("payload" not in body):
        fail("body", "give the message as `text` or as `payload`, one of them")
    payload = {"text": text} if text is not None else optional_mapping(body, "payload")
    message_id = optional_string(body, "id", _MESSAGE_ID)
    sent = await request.app[EXECUTOR].send(run_id, payload, message_id=message_id)
    view = {
        "id": sent.id,
        "position": sent.position,
        "duplicate": sent.duplicate,
        "run": await run_json(request.app, sent.state),
    }
    return ok(view, status=202)


async def resume(request: web.Request) -> web.Response:
    """Drive an unfinished run from its last committed step (in the background)."""
    state = await request.app[EXECUTOR].resume(request.match_info["run_id"])
    return ok(await run_json(request.app, state, driving=True), status=202)


async def cancel(request: web.Request) -> web.Response:
    """Cancel a run: stop it at its last committed step and mark it cancelled."""
    body = await json_body(request, required=False)
    check_fields(body, frozenset({"reason"}))
    reason = optional_string(body, "reason") or "cancelled over HTTP"
    if len(reason) > _MAX_REASON:
        fail("body.reason", f"at most {_MAX_REASON} characters")
    actor = principal_of(request).actor
    state = await request.app[EXECUTOR].cancel(request.match_info["run_id"], reason, actor=actor)
    return ok(await run_json(request.app, state))


async def fork(request: web.Request) -> web.Response:
    """Start a new run from a run's state at ``at_seq`` (default: head), data patched."""
    run_id = request.match_info["run_id"]
    body = await json_body(request, required=False)
    check_fields(body, _FORK_FIELDS)
    at_seq = body.get("at_seq")
    if isinstance(at_seq, float) and at_seq.is_integer():
        at_seq = int(at_seq)  # JSON has one number type: 3.0 is the integer 3
    if at_seq is not None and (type(at_seq) is not int or not 0 <= at_seq < MAX_SEQ):
        fail("body.at_seq", "expected a step number (an integer >= 0)")
    patch = optional_mapping(body, "data")
    actor = principal_of(request).actor
    state = await request.app[EXECUTOR].fork(run_id, at_seq, patch, actor=actor)
    view = {**await run_json(request.app, state), "forked_from": run_id}
    return ok(view, status=201, headers={"Location": f"/runs/{state.run_id}"})


async def replay(request: web.Request) -> web.Response:
    """Re-drive the run's recorded history through its machines; report any divergence."""
    report = await request.app[ENGINE].replay(request.match_info["run_id"])
    return ok(report_view(report))


async def migrate(request: web.Request) -> web.Response:
    """Check that a run fits another graph (built-in or uploaded) and, unless a dry run, move it.

    200 either way: ``fits`` says whether everything the run holds has a place in the new
    graph (``problems`` name each misfit, located in ``graph_yaml``), ``applied`` whether
    the ``migrate`` step was committed.
    """
    run_id = request.match_info["run_id"]
    body = await json_body(request)
    check_fields(body, _MIGRATE_FIELDS)
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        fail("body.dry_run", "expected true or false")
    renames = _renames(optional_mapping(body, "renames"))
    prepared = await graph_of(request, body, start=False)
    migration = await request.app[ENGINE].migrate(
        run_id, prepared, renames=renames, dry_run=dry_run, actor=principal_of(request).actor
    )
    view = migration_view(migration)
    if UPLOAD_FIELD in body and prepared.definition.location is not None:
        # Located in the request field, as an upload's load problems are: never a server path.
        kept = prepared.definition.location.path
        for problem in view["problems"]:
            problem["location"] = problem["location"].replace(kept, UPLOAD_FIELD, 1)
    return ok(view)


def _renames(given: Mapping[str, Any]) -> Renames | None:
    """The ``renames`` of a migrate request: ``nodes`` and ``states``, each old → new."""
    if not given:
        return None
    parts: dict[str, dict[str, str]] = {}
    for key in ("nodes", "states"):
        value = given.get(key) or {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            fail(f"body.renames.{key}", "expected a map of names to names (old: new)")
        parts[key] = dict(value)
    if set(given) - {"nodes", "states"}:
        fail("body.renames", "only `nodes` and `states` may be renamed")
    return Renames(nodes=parts["nodes"], states=parts["states"])


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [
        web.post("/runs/{run_id}/reply", reply),
        web.post("/runs/{run_id}/messages", message),
        web.post("/runs/{run_id}/resume", resume),
        web.post("/runs/{run_id}/cancel", cancel),
        web.post("/runs/{run_id}/fork", fork),
        web.post("/runs/{run_id}/replay", replay),
        web.post("/runs/{run_id}/migrate", migrate),
    ]
