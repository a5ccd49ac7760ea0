"""Where the long-running commands (``serve``, ``worker``) send the ``phasegraph`` loggers' lines.

The library only logs (G27); this module, used by the commands, decides the handler and
the format: plain text for a person, or one JSON object a line for a log collector. A
record's ``fields`` (passed by the library as ``extra={"fields": {...}}``) become the JSON
object's keys beside ``time``, ``level``, ``logger`` and ``message``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

__all__ = ["LOG_FORMATS", "JsonLines", "configure_logging", "quiet_drivers"]

LOG_FORMATS: Final = ("text", "json")
"""The values of ``--log-format``."""


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(log_format: str, *, quiet: bool, logger_name: str = "phasegraph") -> None:
    """Send ``logger_name``'s lines to stderr in ``log_format``; warnings only if quiet."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


def quiet_drivers() -> None:
    """Keep the store drivers' own warnings off stderr (errors still show).

    A store that cannot reach its server says so in one line of its own (a command's
    error, a worker's outage line); psycopg's pool would add a warning for every
    reconnection it attempts meanwhile, printed by Python's last-resort handler in a
    command that configured no logging.
    """
    logging.getLogger("psycopg").setLevel(logging.ERROR)
