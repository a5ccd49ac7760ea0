"""Secrets kept out of what phasegraph writes down: the one masker of the environment's secrets.

A value is a secret when the environment variable holding it is named like one (``…KEY``,
``…TOKEN``, ``…SECRET``, ``…PASSWORD``, ``…CREDENTIALS``) or is named by the caller (the
variables an ``http:`` binding's ``headers_from_env`` or an ``llm:`` binding's
``api_key_env`` reads). Traces and cassettes write every occurrence of one as ``***``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MASK", "SecretMasker"]

MASK: Final = "***"
"""What a secret is written as."""

_SECRET_NAME: Final = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)
_SECRET_MIN: Final = 8
"""Shorter values are not masked: they would mask ordinary words."""


class SecretMasker:
    """Replaces the values of the environment's secret variables with :data:`MASK`.

    Args:
        environ: The environment (``os.environ``).
        named: Further variables whose values are secrets, whatever their names.
    """

    def __init__(self, environ: Mapping[str, str], named: Iterable[str] = ()) -> None:
        wanted = set(named)
        found = {
            value
            for key, value in environ.items()
            if (key in wanted or _SECRET_NAME.search(key)) and len(value) >= _SECRET_MIN
        }
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(found, key=len, reverse=True)

    def __call__(self, value: Any) -> str:
        """``value`` as text (JSON unless it is a string), every secret masked."""
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return self.text(text)

    def text(self, text: str) -> str:
        """``text`` with every secret masked."""
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def value(self, value: Any) -> Any:
        """A JSON-like value with every secret in its strings (and keys) masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value
