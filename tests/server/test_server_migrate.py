"""``POST /runs/{id}/migrate`` over a real socket: checked, refused with located misfits, made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_server import ALLOWED, serving, settings_for, wait_for

from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

APPROVAL = (Path(__file__).parents[1] / "fixtures" / "definitions" / "approval.yaml").read_text()


async def test_a_waiting_run_is_checked_refused_then_moved_over_http(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, allow_python_modules=ALLOWED | {"phasegraph.graphs.hello"})
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        created = await client.post("/runs", json={"graph_yaml": APPROVAL, "input": {}})
        assert created.status == 201, await created.text()
        run_id = (await created.json())["run_id"]
        waiting = await wait_for(client, run_id, lambda view: view["status"] == "waiting")

        async def migrate(graph_yaml: str, **more: Any) -> dict[str, Any]:
            response = await client.post(
                f"/runs/{run_id}/migrate", json={"graph_yaml": graph_yaml, **more}
            )
            assert response.status == 200, await response.text()
            body: dict[str, Any] = await response.json()
            return body

        # The waiting node is gone from the new version: refused, located in the request.
        gone = APPROVAL.replace("id: review", "id: approve")
        refused = await migrate(gone)
        assert (refused["fits"], refused["applied"]) == (False, False)
        (problem,) = refused["problems"]
        assert "node 'review'" in problem["message"]
        assert problem["location"].startswith("graph_yaml:")
        assert str(tmp_path) not in str(refused)  # no server path in the answer

        changed = APPROVAL.replace('text: "{greeting}"', 'text: "over HTTP: {greeting}"')
        checked = await migrate(changed, dry_run=True)
        assert (checked["fits"], checked["applied"], checked["problems"]) == (True, False, [])
        assert (await wait_for(client, run_id, lambda view: True))["seq"] == waiting["seq"]

        moved = await migrate(changed)
        assert (moved["fits"], moved["applied"]) == (True, True)
        assert moved["to"] != moved["from"] == waiting["graph_digest"]
        view = await wait_for(client, run_id, lambda view: view["seq"] == moved["seq"])
        assert view["graph_digest"] == moved["to"]
        history = await (await client.get(f"/runs/{run_id}/history")).json()
        step = history["records"][-1]
        assert (step["kind"], step["actor"]["name"]) == ("migrate", "local")

        (gate,) = view["interrupts"]
        answered = await client.post(
            f"/runs/{run_id}/reply", json={"interrupt_id": gate["id"], "trigger": "ok"}
        )
        assert answered.status == 200, await answered.text()
        done = await wait_for(client, run_id, lambda view: view["status"] == "completed")
        assert done["graph_digest"] == moved["to"]


async def test_a_migrate_request_of_the_wrong_shape_is_one_clear_400(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        for body, field in (
            ({"graph": "hello", "dry_run": "yes"}, "body.dry_run"),
            ({"graph": "hello", "renames": {"nodes": {"a": 1}}}, "body.renames.nodes"),
            ({"dry_run": True}, "give exactly one of `graph`"),
        ):
            response = await client.post("/runs/r/migrate", json=body)
            assert response.status == 400, await response.text()
            assert field in await response.text()
