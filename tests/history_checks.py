"""What a history's JSON must hold: the documented ``StepRecord`` of each record, in order.

Shared by the tests of ``Engine.history_json``, ``phasegraph history --json`` and the
codec's history renderer. A record's JSON is checked against the schema in
``specs/openapi.yaml`` and against the record it renders, field by field as a reader sees
it (times parsed back, tuples as lists, enums as their values), not against another
renderer's text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jsonschema
import yaml

from builders import REPO
from phasegraph.model import StepRecord

SPEC: dict[str, Any] = yaml.safe_load((REPO / "specs" / "openapi.yaml").read_text(encoding="utf-8"))
_RECORD = jsonschema.Draft202012Validator(
    {"$ref": "#/components/schemas/StepRecord", "components": SPEC["components"]}
)


def is_iso_utc(text: Any) -> bool:
    """Whether ``text`` is an ISO 8601 timestamp in UTC, written with ``+00:00``."""
    return (
        isinstance(text, str)
        and text.endswith("+00:00")
        and datetime.fromisoformat(text).utcoffset() is not None
    )


def assert_holds(text: bytes | str, records: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Assert the history JSON ``text`` holds ``records``, one item each; return the items."""
    items = json.loads(text)
    assert isinstance(items, list)
    assert [item["seq"] for item in items] == [record.seq for record in records]
    for item, record in zip(items, records, strict=True):
        _RECORD.validate(item)
        assert is_iso_utc(item["time"]), item["time"]
        assert datetime.fromisoformat(item["time"]) == record.time
        assert (item["kind"], item["node"], item["trigger"]) == (
            record.kind,
            record.node,
            record.trigger,
        )
        assert (item["source"], item["dest"]) == (list(record.source), list(record.dest))
        assert item["status"] == record.status.value
        assert set(item["data"]) == set(record.data)
        assert set(item["appended"]) == set(record.appended)
        assert set(item["result"]) == set(record.result)
        assert {key: node["status"] for key, node in item["nodes"].items()} == {
            key: node.status.value for key, node in record.nodes.items()
        }
        assert [error["message"] for error in item["errors"]] == [e.message for e in record.errors]
        assert len(item["events"]) == len(record.events)
        if record.interrupts is None:
            assert item["interrupts"] is None
        else:
            assert set(item["interrupts"]) == set(record.interrupts)
    return items
