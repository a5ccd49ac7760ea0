"""Child runs after their parent's commit: launched, watched, and their end answered.

A node bound to ``graph:`` waits at a :data:`~phasegraph.run._children.CHILD_RUN` gate
whose payload names its child run; the step that opened the gate is committed before the
child exists. Everything after that commit is a side effect, done by whoever drives runs
(a :class:`~phasegraph.worker._driver.RunDriver`: a worker, the server, or ``phasegraph
run``), through the run's :class:`~phasegraph.worker._mailbox.Mailbox`, and every part
of it survives a crash by being done again:

* **Launching.** At the start and the end of every drive of a run, each of its open
  ``child_run`` gates is looked at (:meth:`ChildRuns.look`): a child run that does not
  exist is created (its id is derived from the gate's opening, so a second creation finds
  it taken), with its parent's gate in its seq-0 record (:class:`ParentLink`), and
  launched (:meth:`Mailbox.launch`: queued for the workers, or driven in this process); a
  child that exists and is running is launched unless it is in hand already. A crash
  between the parent's commit and the launch leaves the parent's drive unfinished (a
  worker's queue entry unacknowledged), and the next drive launches it.
* **Answering.** When a drive leaves a run ended, and its seq-0 record names a parent,
  the parent's gate is answered (:meth:`ChildRuns.ended`) through the parent's mailbox,
  before the drive returns: a worker acknowledges the child's entry only after that, so a
  worker killed in between leaves the entry to be reclaimed, and the next drive of the
  ended child answers again. A drive of the parent also answers the gates whose child it
  finds ended. Each answer quotes the step that opened its gate and is a
  :attr:`~phasegraph.worker._mailbox.Reply.once` notice: the first to be applied closes
  the gate, every later one is dropped without a word. At least once, exactly once.
* **A child that cannot start** (its graph no longer loads, its input does not fit the
  graph's ``input:`` schema) fails its gate at once, with why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Final, TypeVar, final

from phasegraph.api import Engine
from phasegraph.errors import (
    InputError,
    LeaseHeldError,
    RunNotFoundError,
    RunStateError,
    SpecError,
)
from phasegraph.model import Interrupt, RunState, RunStatus
from phasegraph.run._children import (
    CHILD_RUN,
    ParentLink,
    child_answer,
    child_failed,
)
from phasegraph.worker._mailbox import Mailbox, Reply

__all__ = ["ChildRuns", "parent_of"]

_AT_ONCE: Final = 16  # child runs looked at (read, created, launched) at once, per run
T = TypeVar("T")


@final
class ChildRuns:
    """The child runs of the runs one driver drives, looked after through its mailbox.

    Args:
        engine: The engine (and store) runs are driven with.
        mailbox: Launches child runs and hands their ends to their parents.
        log: The host's logger.
    """

    def __init__(self, engine: Engine, mailbox: Mailbox, *, log: logging.Logger) -> None:
        self._engine = engine
        self._mailbox = mailbox
        self._log = log

    async def settle(self, state: RunState) -> bool:
        """After a drive: answer the parent of a child run that ended, or :meth:`look`.

        Returns:
            Whether a reply was handed to the run itself (a child of it had ended).
        """
        if state.status.terminal:
            await self.ended(state)
            return False
        return await self.look(state)

    async def look(self, state: RunState) -> bool:
        """Create and launch the child run of each open ``child_run`` gate as needed.

        A gate whose child ended is answered through the run's mailbox.

        Returns:
            Whether a reply was handed to the run (a child had ended).
        """
        gates = [gate for gate in state.interrupts.values() if gate.kind == CHILD_RUN]
        if not gates:
            return False
        answered = await _bounded([self._gate(state.run_id, gate) for gate in gates])
        return any(answered)

    async def ended(self, state: RunState) -> str | None:
        """If ``state`` is a child run that ended, answer its parent's gate.

        Returns:
            The parent run answered, if any.
        """
        link = await parent_of(self._engine, state.run_id)
        if link is None:
            return None
        await self._answer(link, state)
        return link.run

    # -- one gate -----------------------------------------------------------------------

    async def _gate(self, run_id: str, gate: Interrupt) -> bool:
        """Look after the child run of one gate; whether its end was answered."""
        link = ParentLink.of_gate(run_id, gate)
        child_id = str(gate.payload.get("run", ""))
        try:
            stored = await self._engine.store.read(child_id)
        except RunNotFoundError:
            return await self._create(link, gate, child_id)
        status = RunStatus(stored.meta.status)
        if status.terminal:
            await self._answer(link, await self._engine.get(child_id))
            return True
        if status is RunStatus.RUNNING:
            await self._mailbox.launch(child_id)  # in hand already, or left by a crash
        return False

    async def _create(self, link: ParentLink, gate: Interrupt, child_id: str) -> bool:
        """Create the child run and launch it; whether it failed its gate by not starting."""
        payload: Any = gate.payload
        try:
            start = self._engine.start(
                str(payload.get("graph", "")),
                payload.get("input") or {},
                run_id=child_id,
                parent=link,
            )
            async with start:
                pass
        except (RunStateError, LeaseHeldError):
            pass  # created meanwhile (another driver of the parent): launched below anyway
        except (SpecError, InputError) as exc:
            why = f"child run {child_id!r} cannot start: {exc}"
            self._log.warning("run %s, node %s: %s", link.run, link.node, why)
            result = child_failed(child_id, "not started", why)
            reply = Reply(link.interrupt, result, step=link.step, once=True)
            await self._mailbox.answer(link.run, reply)
            return True
        await self._mailbox.launch(child_id)
        return False

    async def _answer(self, link: ParentLink, child: RunState) -> None:
        """Hand the parent's gate the child's end (its ``output:`` keys, or why it failed)."""
        try:
            prepared = await self._engine.prepared_for(child)
            outputs: Sequence[str] = prepared.definition.output
        except (
            SpecError,
            RunStateError,
        ) as exc:  # its results cannot be named: say so rather than drop them
            why = f"child run {child.run_id!r} ended, but its graph no longer loads: {exc}"
            result = child_failed(child.run_id, str(child.status), why)
        else:
            result = child_answer(child, outputs, link.into)
        reply = Reply(link.interrupt, result, step=link.step, once=True)
        await self._mailbox.answer(link.run, reply)


async def parent_of(engine: Engine, run_id: str) -> ParentLink | None:
    """The gate a run answers when it ends, as its seq-0 record names it (``None``: no child)."""
    first = await engine.history(run_id, start=0, stop=1)
    return ParentLink.of_record(first[0]) if first else None


async def _bounded(work: Sequence[Awaitable[T]]) -> list[T]:
    """Await ``work``, at most :data:`_AT_ONCE` at a time; results in order."""
    slots = asyncio.Semaphore(_AT_ONCE)

    async def one(item: Awaitable[T]) -> T:
        async with slots:
            return await item

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(item)) for item in work]
    except BaseExceptionGroup as failed:
        # The first failure as itself (an unreachable store is retried by the host, a
        # crash is a crash): the others were cut short by it, or failed alike.
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]
