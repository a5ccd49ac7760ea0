"""What answers without a credential: the public routes, and nothing else.

Every route of the scope table is called over a real socket with no credential: the
public ones (health, readiness, the viewer's page and files) answer, every other one is
401; so is a path no route serves, and a viewer address spelled another way answers as
the viewer does.
"""

from __future__ import annotations

import re
from pathlib import Path

from security_kit import OPERATOR, serving, settings

from phasegraph import Engine
from phasegraph.server._access import PUBLIC, ROUTE_SCOPES
from phasegraph.store.memory import MemoryStore


async def test_only_the_public_routes_answer_without_a_credential(tmp_path: Path) -> None:
    server = settings(tmp_path, token=OPERATOR)
    async with MemoryStore() as store, serving(Engine(store), server) as client:
        for (method, template), need in ROUTE_SCOPES.items():
            path = re.sub(r"\{name\}", "app.js", template)
            path = re.sub(r"\{[a-z_]+\}", "some-run", path)
            answer = await client.request(method, path, json={})
            if need == PUBLIC:
                assert answer.status == 200, (method, path, answer.status)
            else:
                assert answer.status == 401, (method, path, answer.status)
        for path, status in [("/ui/", 200), ("/ui", 200), ("/nope", 401), ("/runs/", 401)]:
            assert (await client.get(path)).status == status, path
        page = await (await client.get("/ui")).read()
        assert await (await client.get("/ui/")).read() == page
