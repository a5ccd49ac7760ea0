"""What the Postgres store adds to the contract: its schema, its pool, its queue, retention."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest

from builders import cli_argv, free_port
from phasegraph.errors import StoreError, StoreUnavailableError
from phasegraph.store import open_store
from phasegraph.store._postgres_schema import SCHEMA_VERSION
from phasegraph.store.postgres import PostgresStore
from phasegraph.testing import make_commit
from postgres_kit import isolated_postgres_url, sql


@pytest.fixture
def url(postgres_url: str) -> Iterator[str]:
    with isolated_postgres_url(postgres_url, application_name="pgspecific") as one:
        yield one


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    async with open_store(url) as opened:
        assert isinstance(opened, PostgresStore)
        yield opened


async def test_first_users_at_once_make_the_schema_once(url: str) -> None:
    stores = [open_store(url) for _ in range(5)]
    try:
        found = await asyncio.gather(*(s.migrate() for s in stores))  # type: ignore[attr-defined]
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
    # Under the advisory lock one created it; the others found it made.
    assert sorted(found) == [(0, SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 4


async def test_a_schema_of_a_newer_phasegraph_is_refused(url: str, store: PostgresStore) -> None:
    await store.migrate()
    sql(url, "UPDATE schema_version SET version = %s", SCHEMA_VERSION + 1)
    async with open_store(url) as newer:
        with pytest.raises(StoreError, match=rf"layout version {SCHEMA_VERSION + 1}.*newer"):
            await newer.list_runs()


async def test_no_statement_is_prepared_on_the_server(url: str) -> None:
    # A transaction-mode pooler hands each transaction another session: a statement
    # prepared in one would be missing in the next. One pooled connection serves all.
    async with open_store(url + "&pool=1") as store:
        assert isinstance(store, PostgresStore)
        lease = await store.acquire("r", "w1", 30)
        for seq in range(12):
            await store.commit(lease, make_commit("r", seq))
            await store.read("r")
        prepared = await store._db.one(b"SELECT count(*) FROM pg_prepared_statements")
    assert prepared == (0,)


async def test_pooled_connections_the_server_closed_are_replaced_before_use(
    url: str, store: PostgresStore
) -> None:
    lease = await store.acquire("r", "w1", 30)
    await store.commit(lease, make_commit("r", 0))
    ended = sql(
        url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'pgspecific' AND pid <> pg_backend_pid()",
    )
    assert ended[0][0] >= 1  # type: ignore[operator]
    await asyncio.sleep(0.1)  # the termination reaches the idle connection's socket
    await store.commit(lease, make_commit("r", 1))  # no error: another connection served
    assert (await store.read("r")).meta.seq == 1


async def test_an_unreachable_server_is_one_line_that_hides_the_password() -> None:
    url = f"postgresql://me:hunter2@127.0.0.1:{free_port()}/db"
    async with open_store(url) as store:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.list_runs()
    message = str(caught.value)
    assert "\n" not in message
    assert "hunter2" not in message
    assert message.startswith("cannot reach Postgres at postgresql://me:***@127.0.0.1:")


def test_the_command_line_says_so_in_one_line_and_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"postgresql://me:hunter2@127.0.0.1:{free_port()}/db"
    for argv in (["status"], ["run", "hello"], ["store", "migrate"]):
        done = subprocess.run(
            cli_argv(*argv, "--store", url),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.count("\n") == 1, (argv, done.stderr)
        assert "hunter2" not in done.stderr + done.stdout
        assert "cannot reach Postgres at postgresql://me:***@" in done.stderr


def test_a_worker_says_so_in_one_line_and_waits_for_the_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A worker outlives its store's outages, one at its start included (a database
    # restarting as the workers start): it says so once, masked, and waits.
    url = f"postgresql://me:hunter2@127.0.0.1:{free_port()}/db"
    worker = subprocess.Popen(
        cli_argv("worker", "--store", url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert worker.stderr is not None
        line = worker.stderr.readline()
        assert "cannot reach Postgres at postgresql://me:***@" in line, line
        assert "the worker retries until the store answers" in line
        assert worker.poll() is None  # waiting, not gone
    finally:
        worker.terminate()
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "hunter2" not in line + out + err
    assert "Traceback" not in err


def test_store_migrate_creates_then_finds_the_schema(url: str) -> None:
    def migrate() -> dict[str, object]:
        done = subprocess.run(
            cli_argv("store", "migrate", url, "--json"),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    first, again = migrate(), migrate()
    assert (first["found"], first["version"], first["migrated"]) == (0, SCHEMA_VERSION, True)
    assert (again["found"], again["migrated"]) == (SCHEMA_VERSION, False)
    assert sql(url, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


async def test_retention_hides_a_finished_run_at_once_and_the_next_finish_deletes_it(
    url: str,
) -> None:
    async with open_store(url + "&ttl=0.05") as store:
        old = await store.acquire("old", "w1", 30)
        await store.commit(old, make_commit("old", 0))
        await store.commit(old, make_commit("old", 1, status="completed"))
        waiting = await store.acquire("waiting", "w1", 30)
        await store.commit(waiting, make_commit("waiting", 0, status="waiting"))
        await asyncio.sleep(0.2)
        assert [m.run_id for m in await store.list_runs()] == ["waiting"]  # never expires
        with pytest.raises(Exception, match="no run 'old'"):
            await store.read("old")
        assert sql(url, "SELECT count(*) FROM records WHERE run_id = 'old'") == [(2,)]
        new = await store.acquire("new", "w1", 30)
        await store.commit(new, make_commit("new", 0, status="failed"))
    assert sql(url, "SELECT count(*) FROM records WHERE run_id = 'old'") == [(0,)]
    assert sql(url, "SELECT count(*) FROM runs WHERE run_id = 'old'") == [(0,)]


async def test_the_queue_hands_a_row_to_one_worker_and_back_after_its_heartbeat_stops(
    store: PostgresStore,
) -> None:
    queue = store.work_queue()
    try:
        await queue.enqueue("r1")
        assert await queue.queued("r1")
        first, second = await asyncio.gather(queue.take(0, "a", 5, 10), queue.take(0, "b", 5, 10))
        assert sorted(len(x) for x in (first, second)) == [0, 1]  # SKIP LOCKED: one taker
        (row,) = first or second
        owner = "a" if first else "b"
        await queue.touch(owner, [row])
        assert await queue.reclaim(0, "c", 60_000, 5) == []  # its heartbeat is fresh
        await asyncio.sleep(0.05)
        (stale,) = await queue.stale(0, "c", 10, 5)
        (claimed,) = await queue.claim("c", 10, [stale])
        assert (claimed.run_id, claimed.deliveries) == ("r1", 2)
        assert await queue.pending("c") == 1
        await queue.ack(claimed)
        assert not await queue.queued("r1")
    finally:
        await queue.aclose()


async def test_a_notification_wakes_a_waiting_taker_before_its_poll(store: PostgresStore) -> None:
    queue, other = store.work_queue(), store.work_queue()
    try:
        assert await queue.take(0, "w", 1, 10) == []  # listening from now on
        waiting = asyncio.create_task(queue.take(0, "w", 1, 60_000))
        await asyncio.sleep(0.2)
        await other.enqueue("r1")
        (row,) = await asyncio.wait_for(waiting, 30)  # well before the minute's poll
        assert row.run_id == "r1"
    finally:
        await queue.aclose()
        await other.aclose()


async def test_due_runs_move_into_the_queue_and_mail_waits_in_order(store: PostgresStore) -> None:
    queue = store.work_queue()
    try:
        await queue.schedule("late", 2**50)
        await queue.schedule("due", 1000)
        moved, following = await queue.move_due(0)
        assert moved == 1
        assert following is not None
        assert following > 0
        assert await queue.queued("due")
        assert not await queue.queued("late")
        assert await queue.deadline("late") == 2**50
        for n in range(3):
            await queue.post_reply("r", {"n": n})
        await queue.replies_done("r", 1)
        assert await queue.replies("r") == [{"n": 1}, {"n": 2}]
        await queue.request_cancel("r", "enough", actor={"name": "ada", "groups": []})
        assert await queue.cancel_requested("r") == {
            "reason": "enough",
            "actor": {"name": "ada", "groups": []},
        }
        await queue.cancel_done("r")
        assert await queue.cancel_requested("r") is None
    finally:
        await queue.aclose()
