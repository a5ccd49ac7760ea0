"""Run stores: the contract, checks shared by every backend, and ``open_store``.

A store is chosen by URL (:data:`ACCEPTED_URL_FORMS`). The backends (:mod:`.memory`,
:mod:`.sqlite`, :mod:`.redis`) are imported lazily by :func:`open_store`, so a SQLite user
never imports ``redis``. Stores see bytes only and never import the codec; the ``check_*``
helpers and ``*_error`` builders word every backend's refusals the same way, and a
third-party backend may use them too. May import :mod:`phasegraph.errors` and
:mod:`phasegraph._process` (who holds a lease) only.
"""

from __future__ import annotations

from phasegraph.store._open import (
    ACCEPTED_URL_FORMS,
    DEFAULT_STORE_URL,
    check_commit,
    check_page,
    check_ttl,
    journal_head_error,
    lease_held_error,
    lease_lost_error,
    open_store,
    run_not_found_error,
    sequence_conflict_error,
)
from phasegraph.store.base import (
    Commit,
    ForwardingStore,
    Lease,
    LeaseLine,
    Message,
    RunMeta,
    Store,
    StoredRun,
)

__all__ = [
    "ACCEPTED_URL_FORMS",
    "DEFAULT_STORE_URL",
    "Commit",
    "ForwardingStore",
    "Lease",
    "LeaseLine",
    "Message",
    "RunMeta",
    "Store",
    "StoredRun",
    "check_commit",
    "check_page",
    "check_ttl",
    "journal_head_error",
    "lease_held_error",
    "lease_lost_error",
    "open_store",
    "run_not_found_error",
    "sequence_conflict_error",
]
