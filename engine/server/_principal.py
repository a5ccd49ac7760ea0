"""Who a request speaks for (a :class:`Principal`) and what a scope lets it do.

Every credential the server accepts — the single ``--token``, a token from the token file,
a JWT from the team's identity provider, or none on a loopback server without one — ends
as one :class:`Principal`. Routes get it with :func:`principal_of`; that is the one place
the engine's actor for a request comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiohttp import web

from phasegraph.actions._human import GROUP_PREFIX
from phasegraph.model import Actor

__all__ = [
    "ADMIN",
    "GATES_ANSWER",
    "PRINCIPAL",
    "RUNS_CANCEL",
    "RUNS_FORK",
    "RUNS_READ",
    "RUNS_RESUME",
    "RUNS_START",
    "SCOPES",
    "CredentialRefused",
    "NameRefused",
    "Principal",
    "ScopeMissing",
    "SignInUnavailable",
    "check_name",
    "check_scope",
    "principal_of",
]

RUNS_READ: Final = "runs:read"
RUNS_START: Final = "runs:start"
GATES_ANSWER: Final = "gates:answer"
RUNS_MESSAGE: Final = "runs:message"
RUNS_RESUME: Final = "runs:resume"
RUNS_CANCEL: Final = "runs:cancel"
RUNS_FORK: Final = "runs:fork"
RUNS_MIGRATE: Final = "runs:migrate"
ADMIN: Final = "admin"

SCOPES: Final = {
    RUNS_READ: "list and read runs, their steps, graphs and events; replay them",
    RUNS_START: "start runs of any built-in graph or of an uploaded one "
    "(runs:start:GRAPH: of the built-in graph GRAPH only)",
    GATES_ANSWER: "answer a run's pending gates (reply)",
    RUNS_MESSAGE: "send a run messages (its graph's busy: says what one does)",
    RUNS_RESUME: "resume an unfinished run",
    RUNS_CANCEL: "cancel a run",
    RUNS_FORK: "fork a run from one of its steps",
    RUNS_MIGRATE: "check that a run fits another version of its graph, and move it there",
    ADMIN: "everything above",
}
"""Every scope a credential can grant, with what it allows (``docs/teams.md`` shows them)."""


def check_scope(scope: str) -> str | None:
    """Why ``scope`` is not a scope this server knows (``None``: it is one)."""
    if scope in SCOPES or (scope.startswith(RUNS_START + ":") and scope != RUNS_START + ":"):
        return None
    return f"unknown scope {scope!r:.60} (known: {', '.join(SCOPES)}, runs:start:GRAPH)"


def check_name(name: str) -> str | None:
    """Why no principal may be called ``name`` (``None``: one may).

    A gate's reviewers list principals' names beside ``group:NAME`` references to groups,
    and the two must stay apart: a principal named ``group:release`` must not pass for a
    member of ``release``. So a name that contains ``group:`` signs in as no one, whatever
    the credential (a token file edited by hand, a JWT whose subject says so).
    """
    if GROUP_PREFIX in name:
        return (
            f"the credential names {name!r:.100}, and no principal's name may contain "
            f"{GROUP_PREFIX!r}: it begins a reference to a group (a gate's reviewers name "
            "groups as 'group:NAME'); rename the principal at its identity provider or "
            "in the token file"
        )
    return None


@dataclass(frozen=True, slots=True)
class Principal:
    """A person or service the server knows, with the groups and scopes a credential gave.

    Attributes:
        name: Who it is (a token's name, a JWT's subject, ``operator`` for ``--token``).
        groups: Groups it belongs to (gate reviewers may name them).
        scopes: What it may do (see :data:`SCOPES`).
        source: How it was recognised: ``token``, ``token-file``, ``jwt`` or ``local``.
    """

    name: str
    groups: tuple[str, ...] = ()
    scopes: frozenset[str] = frozenset()
    source: str = "token"

    def allows(self, scope: str, graph: str | None = None) -> bool:
        """Whether this principal may do ``scope`` (for the built-in ``graph``, if given).

        ``runs:start`` without a graph asks whether it may start *some* run: a
        ``runs:start:GRAPH`` scope says yes, and the route then asks about the graph.
        """
        if ADMIN in self.scopes or scope in self.scopes:
            return True
        if scope != RUNS_START:
            return False
        if graph is None:
            return any(held.startswith(RUNS_START + ":") for held in self.scopes)
        return f"{RUNS_START}:{graph}" in self.scopes

    @property
    def actor(self) -> Actor:
        """Who this principal is to the engine: recorded on every step it decides."""
        return Actor(name=self.name, groups=self.groups)

    @property
    def trusted(self) -> bool:
        """Whether the engine records this principal's replies without holding it to reviewers.

        Only ``local`` is: a loopback server with no sign-in configured, where whoever
        reaches it has the machine (and its store) in hand, as the command line does.
        Every signed-in principal — the ``--token`` operator too — is held to a gate's
        reviewers: an administrator is not silently a reviewer.
        """
        return self.source == "local"


class CredentialRefused(Exception):
    """A credential was presented and is not good: the request is answered 401."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NameRefused(Exception):
    """A good credential names a principal no one may be (see :func:`check_name`): 403.

    Not a guess at a credential, so the sign-in throttle does not count it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SignInUnavailable(Exception):
    """A credential cannot be checked now: the request is answered 503.

    The identity provider's keys are out of reach; the client is not blamed for it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ScopeMissing(Exception):
    """The principal lacks a scope the request needs: the request is answered 403."""

    def __init__(self, scope: str, detail: str) -> None:
        super().__init__(detail)
        self.scope = scope
        self.detail = detail


PRINCIPAL: Final = web.RequestKey("phasegraph.principal", Principal)


def principal_of(request: web.Request) -> Principal:
    """The principal the request speaks for (set by the server's authentication)."""
    return request[PRINCIPAL]
