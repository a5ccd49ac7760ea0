"""The token file: named bearer tokens kept only as salted scrypt hashes.

``phasegraph tokens add`` writes an entry and prints its secret once; the file holds the
secret's hash, never the secret. A secret reads ``pgt_<id>_<random>``: the id (stored in
the clear) picks the one entry to hash against, so a guess costs one scrypt, not one per
token. ``phasegraph serve --tokens FILE`` re-reads the file whenever it changes, so a
revoked token is refused on its next request without a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeVar

from phasegraph.errors import InputError
from phasegraph.server._keyfile import KeyFile
from phasegraph.server._principal import CredentialRefused, Principal, check_scope

__all__ = [
    "TOKEN_PREFIX",
    "TokenBook",
    "TokenEntry",
    "TokenFile",
    "edit_book",
    "load_book",
    "save_book",
]

_T = TypeVar("_T")

TOKEN_PREFIX: Final = "pgt_"
_FORMAT: Final = 1
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
_ID: Final = re.compile(r"[0-9a-f]{12}")
# scrypt's cost: 16 MiB and a few tens of milliseconds a check. The secrets are random
# (256 bits), so this guards a stolen file against nothing guessable; it is the standard
# price, paid once per token thanks to the verified-token cache below.
_SCRYPT: Final = {"n": 2**14, "r": 8, "p": 1}
_VERIFIED_CACHE: Final = 1024


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One token in the file (its secret is not here: only its hash)."""

    name: str
    id: str
    salt: str
    hash: str
    scopes: tuple[str, ...]
    groups: tuple[str, ...] = ()
    created: float = 0.0
    expires: float | None = None
    scrypt: tuple[int, int, int] = (_SCRYPT["n"], _SCRYPT["r"], _SCRYPT["p"])

    def matches(self, secret: str) -> bool:
        """Whether ``secret`` hashes to this entry's hash (compared in constant time)."""
        n, r, p = self.scrypt
        digest = hashlib.scrypt(
            secret.encode("utf-8", "surrogatepass"),
            salt=bytes.fromhex(self.salt),
            n=n,
            r=r,
            p=p,
            maxmem=256 * n * r + 1024 * 1024,
            dklen=32,
        )
        return hmac.compare_digest(digest, bytes.fromhex(self.hash))

    def json(self) -> dict[str, Any]:
        """The entry as the file stores it."""
        return {
            "name": self.name,
            "id": self.id,
            "salt": self.salt,
            "hash": self.hash,
            "scrypt": list(self.scrypt),
            "scopes": list(self.scopes),
            "groups": list(self.groups),
            "created": self.created,
            "expires": self.expires,
        }


@dataclass(frozen=True, slots=True)
class TokenBook:
    """Every token of one file, by name."""

    entries: tuple[TokenEntry, ...] = ()

    def named(self, name: str) -> TokenEntry | None:
        """The token called ``name``, if any."""
        return next((entry for entry in self.entries if entry.name == name), None)

    def add(
        self,
        name: str,
        scopes: tuple[str, ...],
        groups: tuple[str, ...],
        *,
        now: float,
        expires: float | None = None,
    ) -> tuple[TokenBook, str]:
        """This book with a new token, and the token's secret (shown once, never stored).

        Raises:
            InputError: A bad or taken name, an unknown scope, a bad group.
        """
        _check_name(name, "token name")
        if self.named(name) is not None:
            raise InputError(f"a token named {name!r} exists: revoke it first, or pick a name")
        if not scopes:
            raise InputError("give the token at least one --scope")
        for scope in scopes:
            if (problem := check_scope(scope)) is not None:
                raise InputError(problem)
        for group in groups:
            _check_name(group, "group")
        token_id = secrets.token_hex(6)
        secret = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        salt = secrets.token_bytes(16)
        entry = TokenEntry(
            name=name,
            id=token_id,
            salt=salt.hex(),
            hash="",
            scopes=scopes,
            groups=groups,
            created=now,
            expires=expires,
        )
        entry = replace(entry, hash=_hash(secret, salt, entry.scrypt))
        return TokenBook((*self.entries, entry)), secret

    def revoke(self, name: str) -> TokenBook:
        """This book without the token called ``name``.

        Raises:
            InputError: No such token.
        """
        if self.named(name) is None:
            known = ", ".join(entry.name for entry in self.entries) or "none"
            raise InputError(f"no token named {name!r:.100} (tokens: {known})")
        return TokenBook(tuple(entry for entry in self.entries if entry.name != name))


def _hash(secret: str, salt: bytes, cost: tuple[int, int, int]) -> str:
    n, r, p = cost
    maxmem = 256 * n * r + 1024 * 1024
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=32)
    return digest.hex()


def _check_name(name: str, what: str) -> None:
    if not _NAME.fullmatch(name):
        raise InputError(f"{what} {name!r:.100} must match {_NAME.pattern}")


def load_book(path: Path) -> TokenBook:
    """Read a token file (a missing file is an empty book).

    Raises:
        InputError: The file is not a token file; names the file and the entry.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return TokenBook()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the token file ({exc.strerror})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not a token file ({exc.msg})") from None
    if not isinstance(raw, dict) or raw.get("phasegraph_tokens") != _FORMAT:
        raise InputError(f'{path}: not a token file (no "phasegraph_tokens": {_FORMAT})')
    items = raw.get("tokens")
    if not isinstance(items, list):
        raise InputError(f'{path}: "tokens" must be a list')
    return TokenBook(tuple(_entry(path, index, item) for index, item in enumerate(items)))


def _entry(path: Path, index: int, item: Any) -> TokenEntry:
    where = f"{path}: tokens[{index}]"
    try:
        if not isinstance(item, dict):
            raise TypeError("not an object")
        cost = tuple(int(value) for value in item.get("scrypt", list(_SCRYPT.values())))
        if len(cost) != 3:
            raise ValueError("scrypt must be [n, r, p]")
        entry = TokenEntry(
            name=str(item["name"]),
            id=str(item["id"]),
            salt=str(item["salt"]),
            hash=str(item["hash"]),
            scopes=tuple(str(scope) for scope in item["scopes"]),
            groups=tuple(str(group) for group in item.get("groups", ())),
            created=float(item.get("created", 0.0)),
            expires=None if item.get("expires") is None else float(item["expires"]),
            scrypt=(cost[0], cost[1], cost[2]),
        )
        bytes.fromhex(entry.salt), bytes.fromhex(entry.hash)
    except KeyError as exc:
        raise InputError(f"{where}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from None
    if not _ID.fullmatch(entry.id):
        raise InputError(f"{where}: id must be 12 hexadecimal digits")
    return entry


def save_book(path: Path, book: TokenBook) -> None:
    """Write the book atomically, readable by its owner only."""
    text = json.dumps(
        {"phasegraph_tokens": _FORMAT, "tokens": [entry.json() for entry in book.entries]},
        indent=2,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(temporary, path)  # readers see the old file or the new one, never half
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def edit_book(path: Path, change: Callable[[TokenBook], tuple[TokenBook, _T]]) -> _T:
    """Read the book, ``change`` it and write it back, with no other edit in between.

    Two ``phasegraph tokens add`` run at once would otherwise both read the same book and
    the second write would drop the first one's token. The edit holds an exclusive lock
    on a file beside the book (``.NAME.lock``); a server reading the book never waits.

    Returns:
        What ``change`` returns beside the new book (the secret of a token added).

    Raises:
        InputError: The book is malformed, or ``change`` refuses the edit.
    """
    import fcntl  # POSIX: the token file is edited on the server's host

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        book, result = change(load_book(path))
        save_book(path, book)
        return result
    finally:
        os.close(lock)  # which releases the lock


class TokenFile:
    """The server's view of a token file: re-read whenever it changes on disk.

    A file that is malformed at start-up is bad input; one that turns unreadable or
    malformed later checks no token until it is fixed: each is answered 503 naming the
    file (see :class:`~phasegraph.server._keyfile.KeyFile`; failing closed, a half-edited
    file must not keep a revoked token alive).

    Raises:
        InputError: The file is not a token file (a missing file is an empty one).
    """

    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self._file = KeyFile(path, load_book)
        self._clock = clock
        self._book: TokenBook | None = None
        self._by_id: Mapping[str, TokenEntry] = {}
        self._verified: dict[bytes, str] = {}  # sha256 of a checked secret -> its entry id

    def _entries(self) -> Mapping[str, TokenEntry]:
        """The file's tokens by id, as it holds them now.

        Raises:
            SignInUnavailable: The file cannot be read now.
        """
        book = self._file.keys()
        if book is not self._book:  # read again: a token checked before may be gone
            self._book, self._by_id = book, {entry.id: entry for entry in book.entries}
            self._verified.clear()
        return self._by_id

    async def principal(self, secret: str) -> Principal:
        """The principal ``secret`` names.

        Raises:
            CredentialRefused: Unknown, revoked or expired token.
            SignInUnavailable: The file cannot be read now; names it.
        """
        by_id = self._entries()
        _, _, rest = secret.partition(TOKEN_PREFIX)
        token_id = rest.partition("_")[0]
        entry = by_id.get(token_id)
        if entry is None:
            raise CredentialRefused("unknown or revoked token")
        key = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
        if self._verified.get(key) != entry.id:
            # scrypt takes tens of milliseconds: off the event loop.
            if not await asyncio.to_thread(entry.matches, secret):
                raise CredentialRefused("unknown or revoked token")
            if len(self._verified) >= _VERIFIED_CACHE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[key] = entry.id
        if entry.expires is not None and self._clock() >= entry.expires:
            raise CredentialRefused(f"token {entry.name!r} has expired")
        return Principal(entry.name, entry.groups, frozenset(entry.scopes), "token-file")
