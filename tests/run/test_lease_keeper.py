"""The lease keeper: renewals that need no event loop, fencing by token, and true messages.

Time is the keeper's own clock, moved by the test (:class:`ManualClock`), so no test waits
for a renewal that a busy machine may delay: a lease that must lapse is given a ttl the
store lets expire and a keeper clock that never reaches its renewal; a renewal that must
happen is asked for by moving the clock and waiting for the keeper's round.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from builders import engine, graph, prepared
from phasegraph import Engine
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import LeaseLostError, StoreUnavailableError
from phasegraph.model import RunStatus
from phasegraph.run import RunOptions
from phasegraph.run._lease import LeaseKeeper
from phasegraph.store import ForwardingStore, Lease, LeaseLine, Store, open_store
from phasegraph.testing import isolated_redis_store

_WAIT = 60.0  # seconds a test waits for the keeper's thread before failing


class ManualClock:
    """The keeper's monotonic clock, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keep(eng: Engine, clock: ManualClock) -> LeaseKeeper:
    eng.leases = LeaseKeeper(eng.store, eng.options, clock=clock)
    return eng.leases


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Store]:
    if request.param == "redis":
        redis_url = request.getfixturevalue("redis_url")
        async with isolated_redis_store(redis_url) as redis_store:
            yield redis_store
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as opened:
        yield opened


def _one_node(action: Callable[[ActionContext], object]):
    return prepared(graph([("a", [])]), {("a", "run"): action})


class _Recorded(LeaseLine):
    def __init__(self, inner: LeaseLine, outcomes: list[Lease | LeaseLostError]) -> None:
        self.inner, self.outcomes = inner, outcomes

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        renewed = self.inner.renew(leases)
        self.outcomes += renewed
        return renewed

    def close(self) -> None:
        self.inner.close()


class _RecordedRenewals(ForwardingStore):
    """The store, with every renewal the keeper makes on its line recorded."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.outcomes: list[Lease | LeaseLostError] = []

    def lease_line(self) -> LeaseLine:
        return _Recorded(self.inner.lease_line(), self.outcomes)


async def test_renewals_go_on_while_the_event_loop_is_blocked(store: Store) -> None:
    """An action that blocks the event loop for longer than a lease keeps the lease.

    Inside the blocking action the keeper's clock is moved past the lease's length twice,
    and each time the keeper's thread renews it in the store with the loop still
    blocked; the action runs once and the run completes.
    """
    recorded = _RecordedRenewals(store)
    clock = ManualClock()
    eng = engine(recorded, lease_ttl=30.0)
    keeper = _keep(eng, clock)
    calls: list[int] = []

    async def blocking(ctx: ActionContext) -> ActionResult:
        calls.append(ctx.attempt)
        for _ in range(2):
            rounds = keeper.rounds
            clock.now += 31.0  # past the renewal, and past the lease's own length
            keeper.poke()
            # A renewal handed to the event loop could not run now: this would time out.
            assert keeper.wait_rounds(rounds + 1, _WAIT), "no renewal while the loop was blocked"
        return ActionResult(trigger="ok")

    state = await eng.run(_one_node(blocking), run_id="blocked")
    assert state.status is RunStatus.COMPLETED
    assert len(calls) == 1  # the action ran once
    renewed = [outcome for outcome in recorded.outcomes if isinstance(outcome, Lease)]
    assert len(renewed) == len(recorded.outcomes) >= 2  # each renewal went through
    assert {lease.token for lease in renewed} == {calls[0]}
    assert renewed[-1].expires_at >= renewed[0].expires_at


async def test_a_lapsed_lease_nobody_took_commits_and_the_run_completes(store: Store) -> None:
    """With no renewal at all (the keeper's clock never moves) the lease lapses in the store
    during an action; nobody took the run, so its commits go on and it completes."""
    clock = ManualClock()
    eng = engine(store, lease_ttl=0.05)
    _keep(eng, clock)
    steps: list[int] = []

    async def looping(ctx: ActionContext) -> ActionResult:
        steps.append(ctx.steps)
        await asyncio.sleep(0.15)  # three lease lengths, unrenewed
        return ActionResult(trigger="again" if ctx.steps < 3 else "stop")

    plan = prepared(graph([("a", [])], machine="loop"), {("a", "work"): looping})
    state = await eng.run(plan, run_id="lapsed")
    assert state.status is RunStatus.COMPLETED
    assert steps == [0, 1, 2, 3]  # each action once: nothing was thrown away


async def test_a_rival_that_takes_the_run_fences_the_first_holder(store: Store) -> None:
    """A second holder that really takes a lapsed run fences the first: its step is not
    committed and the error names the new holder and says the run goes on there."""
    clock = ManualClock()
    eng = engine(store, lease_ttl=0.05)
    _keep(eng, clock)
    taken = asyncio.Event()

    async def slow(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(0.15)  # the lease lapses, unrenewed
        await store.acquire("fenced", "rival-process", 30)
        taken.set()
        return ActionResult(trigger="ok")

    with pytest.raises(LeaseLostError) as lost:
        await eng.run(_one_node(slow), run_id="fenced")
    assert taken.is_set()
    message = str(lost.value)
    assert message.startswith("run 'fenced' stopped at step 1, its last committed step: ")
    assert "'rival-process' took the run over" in message
    assert message.endswith("so its actions here were stopped; it goes on there")
    assert lost.value.holder == "rival-process"
    assert (await eng.get("fenced")).seq == 1  # the action's step was never committed


async def test_a_rival_found_at_renewal_cuts_the_actions_off_and_names_the_stall(
    store: Store,
) -> None:
    """The keeper finds at a renewal that another holder took the run while this process
    went more than a lease without renewing: the running action is cancelled at once, and
    the error says this process stalled, for how long, and who has the run now."""
    clock = ManualClock()
    eng = engine(store, lease_ttl=0.05)
    keeper = _keep(eng, clock)
    cancelled = asyncio.Event()

    async def endless(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(0.15)  # the lease lapses, unrenewed
        await store.acquire("stalled", "rival-process", 30)
        clock.now += 7.5  # this process "stalled" 7.5 s; now the keeper renews
        keeper.poke()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ActionResult(trigger="ok")

    with pytest.raises(LeaseLostError) as lost:
        await asyncio.wait_for(eng.run(_one_node(endless), run_id="stalled"), _WAIT)
    assert cancelled.is_set()
    message = str(lost.value)
    assert "this process went 7.5 s without renewing its lease of 0.05 s (it stalled)" in message
    assert "'rival-process' took the run over" in message


class _SilentLine(LeaseLine):
    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        raise StoreUnavailableError("cannot reach the store (test)")


class _SilentRenewals(ForwardingStore):
    """Commits go through; renewals meet a store that does not answer."""

    def lease_line(self) -> LeaseLine:
        return _SilentLine()


async def test_a_store_silent_for_a_whole_lease_stops_the_run_resumably() -> None:
    """Renewals the store never answers are retried until a lease has passed since the
    last one went through; then the run's actions are stopped, and the error says so."""
    async with open_store("memory://") as inner:
        clock = ManualClock()
        eng = engine(_SilentRenewals(inner), lease_ttl=30.0)
        keeper = _keep(eng, clock)
        started = asyncio.Event()

        async def endless(ctx: ActionContext) -> ActionResult:
            started.set()
            await asyncio.Event().wait()
            return ActionResult(trigger="ok")

        driving = asyncio.create_task(eng.run(_one_node(endless), run_id="silent"))
        await asyncio.wait_for(started.wait(), _WAIT)
        while not driving.done():  # each move makes a renewal due, and it fails
            rounds = keeper.rounds
            clock.now += 5.0
            keeper.poke()
            await asyncio.to_thread(keeper.wait_rounds, rounds + 1, _WAIT)
            await asyncio.sleep(0)  # let a cut-off reach the run
        with pytest.raises(LeaseLostError) as lost:
            await driving
        message = str(lost.value)
        assert clock.now >= 1030.0  # not before a whole lease of silence
        assert (
            "the store took no renewal of its lease for 30 s (cannot reach the store (test))"
            in (message)
        )
        assert message.endswith("continue it with 'phasegraph resume silent'")
        # Nobody took it: a resume elsewhere continues it.
        assert (await Engine(inner).get("silent")).status is RunStatus.RUNNING


async def test_status_reads_the_holder_without_taking_the_lease(store: Store) -> None:
    """``holder`` answers who drives a run; asking never takes the lease (the run's own
    commits still go through after the question)."""
    eng = engine(store)
    asked: list[str | None] = []

    async def asking(ctx: ActionContext) -> ActionResult:
        asked.append(await store.holder("held"))
        return ActionResult(trigger="ok")

    state = await eng.run(_one_node(asking), run_id="held")
    assert state.status is RunStatus.COMPLETED
    assert asked == [eng.options.owner_name()]
    assert await store.holder("held") is None  # released at the end of the run


async def test_a_keeper_admits_no_more_runs_than_it_keeps_renewed() -> None:
    """``saturated`` (and ``room``) follow how long a renewal round takes."""

    class _SlowLine(LeaseLine):
        def __init__(self, clock: ManualClock) -> None:
            self.clock = clock

        def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
            self.clock.now += 2.0  # a round of 2 s: more than a sixth of a 6 s lease
            return list(leases)

    async with open_store("memory://") as inner:
        clock = ManualClock()

        class _SlowRenewals(ForwardingStore):
            def lease_line(self) -> LeaseLine:
                return _SlowLine(clock)

        keeper = LeaseKeeper(_SlowRenewals(inner), RunOptions(lease_ttl=6.0), clock=clock)
        assert not keeper.saturated
        hold = await keeper.acquire("a")
        clock.now += 2.0
        keeper.poke()
        assert await asyncio.to_thread(keeper.wait_rounds, 1, _WAIT)
        assert keeper.saturated
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(keeper.room(), 0.2)
        await hold.release()
        await asyncio.wait_for(keeper.room(), _WAIT)  # nothing held: room at once


async def test_a_store_without_a_line_of_its_own_renews_through_its_event_loop() -> None:
    """The default lease line (for a store that does not override ``lease_line``) hands
    renewals to the store's loop: they go through while the loop runs, and a loop that
    does not take them within a lease is a store that did not answer."""

    class _Plain(ForwardingStore):
        def lease_line(self) -> LeaseLine:
            return Store.lease_line(self)  # the default: through this event loop

    async with open_store("memory://") as inner:
        store = _Plain(inner)
        lease = await store.acquire("r", "w", 0.2)
        line = store.lease_line()
        (renewed,) = await asyncio.to_thread(line.renew, [lease])
        assert isinstance(renewed, Lease)
        assert renewed.token == lease.token
        rival = await inner.acquire("taken", "rival", 0.05)
        await inner.release(rival)
        (refused,) = await asyncio.to_thread(line.renew, [rival])
        assert isinstance(refused, LeaseLostError)

        outcome: list[BaseException] = []

        def renew_while_blocked() -> None:
            try:
                line.renew([lease])
            except StoreUnavailableError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=renew_while_blocked)
        thread.start()
        thread.join(_WAIT)  # the loop is blocked here: the renewal cannot run on it
        await asyncio.sleep(0)
        assert [str(exc) for exc in outcome] == ["the event loop did not renew the leases"]
