"""The table of commands: name, help, arguments, and the module that runs each.

Building the parser from this table imports none of the engine: ``phasegraph --help``,
``--version`` and ``<command> --help`` cost little more than a bare Python start. A command's
module (and with it the engine and its libraries) is imported only when that command
runs, by the loader function its row names. For the same reason, the few engine values
the options need come from :mod:`phasegraph._vocabulary`, their light home.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from phasegraph._vocabulary import (
    CAPTURE_CONTENT_ENV,
    DIAGRAM_FORMATS,
    STREAM_RETENTION,
    RunStatus,
)
from phasegraph.cli._handler import Handler, Handlers

__all__ = ["COMMANDS", "Command"]

RUN_STATUSES: Final = tuple(status.value for status in RunStatus)
"""The values ``status --status`` accepts, in definition order."""


# A plain class, not a dataclass: importing dataclasses (and inspect) would add a good
# part of --help's whole cost.
class Command:
    """One row of the table: what ``--help`` shows, the arguments, where the code lives."""

    __slots__ = ("arguments", "help", "load", "name")

    def __init__(
        self,
        name: str,
        help_text: str,
        arguments: Callable[[argparse.ArgumentParser], None],
        load: Callable[[], Handlers],
    ) -> None:
        self.name = name
        """The sub-command's name."""
        self.help = help_text
        """One line for ``phasegraph --help``; also the command's own description."""
        self.arguments = arguments
        """Adds the command's own arguments (the common options are added for it)."""
        self.load = load
        """Imports the command's module and returns its handlers."""

    def handler(self) -> Handler:
        """The command's handler, importing its module now if it is not loaded yet."""
        return self.load()[self.name]


# Loaders: each imports one command module when one of its commands runs.


def _runs() -> Handlers:
    from phasegraph.cli import _runs as module

    return module.HANDLERS


def _human() -> Handlers:
    from phasegraph.cli import _human as module

    return module.HANDLERS


def _definitions() -> Handlers:
    from phasegraph.cli import _definitions as module

    return module.HANDLERS


def _builtins() -> Handlers:
    from phasegraph.cli import _builtins as module

    return module.HANDLERS


def _testing() -> Handlers:
    from phasegraph.cli import _testing as module

    return module.HANDLERS


def _migrate() -> Handlers:
    from phasegraph.cli import _migrate as module

    return module.HANDLERS


def _durable() -> Handlers:
    from phasegraph.cli import _durable as module

    return module.HANDLERS


def _errors() -> Handlers:
    from phasegraph.cli import _errors as module

    return module.HANDLERS


def _serve() -> Handlers:
    from phasegraph.cli import _serve as module

    return module.HANDLERS


def _model_server() -> Handlers:
    from phasegraph.cli import _model_server as module

    return module.HANDLERS


def _worker() -> Handlers:
    from phasegraph.cli import _worker as module

    return module.HANDLERS


def _store() -> Handlers:
    from phasegraph.cli import _store as module

    return module.HANDLERS


def _tokens() -> Handlers:
    from phasegraph.cli import _tokens as module

    return module.HANDLERS


# Arguments of each command, in the order of the table.


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """Commands that take only the common options."""


def _named(what: str) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "name",
            nargs="?",
            metavar="NAME",
            help=f"describe this {what}: {DESCRIBED[what]}",
        )

    return arguments


DESCRIBED: Final = {
    "machine": "states, hooks, triggers, outcomes, budgets, settings and what it writes",
    "tool": "arguments, effect kind, results, settings and what it writes",
}
"""What ``machines NAME`` and ``tools NAME`` describe, for their help."""


def _repeatable_pairs(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=help_text)


def _run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "graph", help="a built-in graph name (see 'phasegraph graphs') or a YAML path"
    )
    _repeatable_pairs(
        parser, "--input", "an input value (JSON if it parses, else a string); repeatable"
    )
    parser.add_argument("--input-file", metavar="FILE", help="a JSON object of input values")
    parser.add_argument(
        "--run-id",
        help="use this run id instead of a generated one (1-128 letters, digits, '.', '_', "
        "'-'; not starting with a punctuation mark)",
    )
    parser.add_argument(
        "--approve",
        action="store_true",
        help="answer every gate that accepts 'confirm' with it (for demos and CI)",
    )
    parser.add_argument(
        "--approve-with",
        action="append",
        default=[],
        metavar="TRIGGER",
        help="answer every gate that accepts TRIGGER with it (repeatable: the first one a "
        "gate accepts is used)",
    )
    _detach(parser, "create the run (its first step committed), hand it to")
    _driving(parser)


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _otel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--otel",
        action="store_true",
        default=os.environ.get("PHASEGRAPH_OTEL", "") not in ("", "0"),
        help="export OpenTelemetry traces of the runs over OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT (env PHASEGRAPH_OTEL=1; needs the otel extra)",
    )
    parser.add_argument(
        "--otel-content",
        action="store_true",
        default=_truthy(os.environ.get(CAPTURE_CONTENT_ENV, "")),
        help="with --otel, put the model's messages, system instructions and tool calls' "
        f"arguments and results in the traces, secrets masked (env {CAPTURE_CONTENT_ENV}=true)",
    )


def _driving(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that drives runs: traces and live streams."""
    _otel(parser)
    parser.add_argument(
        "--durable-stream",
        action="store_true",
        default=_truthy(os.environ.get("PHASEGRAPH_DURABLE_STREAM", "")),
        help="also write live events (a model's streamed text) to the store, in small "
        "batches, so a server on another process or after a restart replays a turn in "
        "flight (env PHASEGRAPH_DURABLE_STREAM=1; off: kept in this process only)",
    )
    parser.add_argument(
        "--stream-retention",
        type=_count,
        default=None,
        metavar="N",
        help="live events kept per run until their turn commits, for clients that "
        f"reconnect (env PHASEGRAPH_STREAM_RETENTION; default {STREAM_RETENTION})",
    )


def _detach(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--detach",
        action="store_true",
        help=f"{what} the 'phasegraph worker' processes (Redis or Postgres store) and return "
        "at once",
    )


def _send(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--text", help="the message's text (the node that takes it reads ctx.payload['text'])"
    )
    given.add_argument(
        "--payload",
        metavar="JSON",
        help="the message as a JSON object (the node that takes it reads it as ctx.payload)",
    )
    parser.add_argument(
        "--id",
        help="the message's id (default: a new one): a message sent again under an id kept "
        "already is taken once",
    )
    _detach(parser, "keep the message in the run's inbox, then hand the run to")


def _resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    _gone_flags(parser, graph=True)
    _detach(parser, "hand the run to")
    _driving(parser)


def _gone_flags(parser: argparse.ArgumentParser, *, graph: bool = False) -> None:
    """Flags of earlier versions, kept only to say what replaced them (not in --help)."""
    parser.add_argument(
        "--allow-changed",
        "--allow-changed-graph",
        dest="allow_changed",
        action="store_true",
        help=argparse.SUPPRESS,
    )
    if graph:
        parser.add_argument("--graph", dest="gone_graph", help=argparse.SUPPRESS)


def _status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", help="the run id (omit to list runs)")
    parser.add_argument("--status", choices=RUN_STATUSES, help="list only these")
    parser.add_argument("--limit", type=_count, default=20, help="how many runs to list")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="print the run's progress (as 'run' does) until it ends or waits for a person, "
        "then report it; the exit status is run's. Ctrl-C stops following, not the run",
    )


def _history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--from",
        dest="start",
        type=_seq,
        default=0,
        metavar="SEQ",
        help="start at this seq (default 0)",
    )
    parser.add_argument(
        "--to", dest="stop", type=_seq, default=None, metavar="SEQ", help="stop before this seq"
    )


def _show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--at", type=_seq, default=None, metavar="SEQ", help="the step to show")


def _reply(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--id", required=True, help="the interrupt id (see 'phasegraph status RUN')"
    )
    parser.add_argument(
        "--step",
        type=_seq,
        default=None,
        metavar="SEQ",
        help="the step that opened the gate (its seq in 'phasegraph status RUN --json'): the "
        "reply is refused if the gate was answered or opened again since (default: the gate "
        "as open now)",
    )
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--confirm", action="store_true", help="fire 'confirm'")
    choice.add_argument("--reject", metavar="FEEDBACK", help="fire 'reject' with this feedback")
    choice.add_argument("--trigger", metavar="NAME", help="fire any trigger the state accepts")
    _repeatable_pairs(
        parser, "--data", "a data update sent with the reply (JSON if it parses); repeatable"
    )
    _repeatable_pairs(
        parser,
        "--payload",
        "a payload value the next action reads (JSON if it parses), e.g. result={...} "
        "answering whether an effect happened; repeatable",
    )
    _gone_flags(parser)
    _detach(parser, "commit the answer, then hand the run to")
    _driving(parser)


def _cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--reason", default="cancelled by request", help="recorded on each node")


def _check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="FILE|NAME",
        help="a YAML file (a machine has `states:`, a graph `nodes:`) or a built-in name",
    )
    parser.add_argument(
        "--run",
        metavar="RUN",
        help="check the definition run RUN follows, as its store keeps it (not the file)",
    )
    parser.add_argument(
        "--against",
        metavar="RUN",
        help="also check that run RUN fits the graph FILE, as 'migrate --dry-run' does",
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail (exit 1) on warnings as well as errors"
    )
    parser.add_argument(
        "--annotations",
        choices=("github",),
        help="print one CI annotation line per finding (github: ::error file=...,line=...::)",
    )


def _diagram(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="FILE|NAME", help="a YAML file or a built-in name")
    parser.add_argument(
        "--format",
        choices=DIAGRAM_FORMATS,
        default=DIAGRAM_FORMATS[0],
        help="output format (default mermaid)",
    )


def _test(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="GRAPH|MACHINE", help="a YAML file or a built-in name")
    _repeatable_pairs(
        parser, "--input", "an input value for the runs (JSON if it parses); repeatable"
    )
    parser.add_argument("--input-file", metavar="FILE", help="a JSON object of input values")
    parser.add_argument(
        "--no-crash",
        action="store_true",
        help="skip the run and crash-equivalence properties (they run the graph's actions)",
    )
    parser.add_argument(
        "--approve",
        action="store_true",
        help="in those runs, answer every review gate with 'confirm' (as run --approve)",
    )
    parser.add_argument(
        "--expect",
        metavar="STATUS",
        choices=("completed", "failed", "waiting", "parked", "cancelled"),
        help="the status the uninterrupted run must end with, for a graph meant to end so "
        "(e.g. failed: one showing a failure handled); default: any but failed or cancelled",
    )
    parser.add_argument(
        "--draft-examples",
        action="store_true",
        help="print a draft of `examples:` showing what a machine's declared examples do not: "
        "each transition taken from each of its sources, each budget run out at its default "
        "limit (read each before keeping it)",
    )
    replayed = parser.add_mutually_exclusive_group()
    replayed.add_argument(
        "--from-run",
        dest="run",
        metavar="RUN",
        help="instead of the properties: drive GRAPH offline against what run RUN (in "
        "--store) recorded (model answers, http and shell results, replies; python actions "
        "and tools run and are checked), report changed model requests, and fail at the "
        "first step that differs (exit 1)",
    )
    replayed.add_argument(
        "--cassette",
        metavar="FILE",
        help="as --from-run, from a cassette file written by 'phasegraph record'",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="with --cassette: run GRAPH live instead (model calls go to "
        "PHASEGRAPH_LLM_BASE_URL or the graph's own endpoint; replies as recorded) and "
        "rewrite FILE from that run",
    )


def _record(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="the cassette file to write (YAML; name it NAME.cassette.yaml for the pytest "
        "plugin to collect it)",
    )


def _fork(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id to fork")
    parser.add_argument(
        "--at", type=_seq, default=None, metavar="SEQ", help="the step to fork from (default: head)"
    )
    _repeatable_pairs(
        parser, "--set", "set a top-level data key in the new run (JSON if it parses); repeatable"
    )
    parser.add_argument(
        "--no-run", action="store_true", help="only create the new run; do not drive it"
    )


def _migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", help="the run id (or --all-waiting GRAPH)")
    parser.add_argument(
        "--to", required=True, metavar="FILE", help="the graph file (or built-in) to move it to"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="only check that the run fits (exit 0 fits, 1 names each misfit); change nothing",
    )
    parser.add_argument(
        "--renames",
        metavar="FILE",
        help="a YAML file naming renamed nodes and states: 'nodes: {old: new}', "
        "'states: {old/path: new/path}'",
    )
    parser.add_argument(
        "--all-waiting",
        metavar="GRAPH",
        help="every waiting or parked run of the graph called GRAPH, with a line per run",
    )


def _replay(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--graph", help="replay against this graph file (find where a changed graph diverges)"
    )


def _errors_of(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--node", help="only the records of this node")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds, not {text!r:.{_SHOWN}}"
        )
    return value


def _whole(text: str, low: int, high: int, what: str) -> int:
    """``text`` as a whole number from ``low`` to ``high`` (argparse's message otherwise)."""
    # Digits only, and few: int() of thousands of digits raises, a huge one overflows the
    # store's integers, and the message would repeat them all.
    if text.isascii() and text.isdigit() and len(text) <= len(str(high)):
        value = int(text)
        if low <= value <= high:
            return value
    raise argparse.ArgumentTypeError(f"expected {what}, not {text!r:.{_SHOWN}}")


def _count(text: str) -> int:
    return _whole(text, 1, _MAX_WHOLE, "a whole number >= 1")


def _seq(text: str) -> int:
    return _whole(text, 0, _MAX_WHOLE, "a step number (a whole number >= 0)")


def _port(text: str) -> int:
    return _whole(text, 0, 65535, "a port number from 0 to 65535")


_MAX_WHOLE = 2**62 - 1  # as the server's: every store keeps it as a 64-bit integer
_SHOWN = 40  # characters of a refused value shown


def _env_list(name: str) -> list[str]:
    """A comma-separated environment variable as a list (empty when unset)."""
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=8321, help="port (default %(default)s; 0: any)"
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("PHASEGRAPH_TOKEN"),
        help="bearer token clients must send (env PHASEGRAPH_TOKEN, which keeps it out of ps)",
    )
    parser.add_argument(
        "--tokens",
        default=os.environ.get("PHASEGRAPH_TOKENS_FILE"),
        metavar="FILE",
        help="a token file of named, scoped tokens ('phasegraph tokens'), re-read when it "
        "changes (env PHASEGRAPH_TOKENS_FILE)",
    )
    parser.add_argument("--jwt-issuer", metavar="ISS", help="accept JWTs from this issuer")
    parser.add_argument(
        "--jwt-audience", metavar="AUD", help="the audience JWTs must be for (this server)"
    )
    parser.add_argument(
        "--jwks", metavar="FILE_OR_URL", help="the issuer's signing keys: a JWKS file or URL"
    )
    parser.add_argument(
        "--jwt-name-claim", default="sub", metavar="CLAIM", help="claim naming the principal"
    )
    parser.add_argument(
        "--jwt-scopes-claim",
        default="scope",
        metavar="CLAIM",
        help="claim with the scopes, space-separated or a list (default %(default)s)",
    )
    parser.add_argument(
        "--jwt-groups-claim",
        default="groups",
        metavar="CLAIM",
        help="claim with the groups (default %(default)s)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's private key")
    parser.add_argument(
        "--auth-failure-burst",
        type=_count,
        default=10,
        metavar="N",
        help="refused credentials a client address may send in a row before it is answered "
        "429; it regains one every 6 s (default %(default)s)",
    )
    parser.add_argument(
        "--trust-proxy",
        action="store_true",
        help="believe X-Forwarded-For and X-Forwarded-Proto (only behind a proxy that sets them)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=_env_list("PHASEGRAPH_ALLOWED_HOSTS"),
        metavar="NAME",
        help="another Host name clients may use, e.g. a proxy's (repeatable; env "
        "PHASEGRAPH_ALLOWED_HOSTS, comma-separated)",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=_env_list("PHASEGRAPH_ALLOWED_ORIGINS"),
        metavar="ORIGIN",
        help="a web origin (scheme://host[:port]) whose pages may call the server "
        "(repeatable; env PHASEGRAPH_ALLOWED_ORIGINS, comma-separated)",
    )
    parser.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="allow a non-loopback --host without a token, token file or JWT issuer "
        "(only behind an authenticating proxy)",
    )
    parser.add_argument(
        "--allow-python",
        action="extend",
        nargs="+",
        default=[],
        metavar="MODULE",
        help="modules python: actions of uploaded graphs may import (exact names)",
    )
    parser.add_argument(
        "--allow-shell", action="store_true", help="accept shell: actions in uploaded graphs"
    )
    parser.add_argument(
        "--max-runs", type=_count, default=64, help="runs stepped at once (default %(default)s)"
    )
    parser.add_argument(
        "--lease-ttl",
        type=_positive,
        default=None,
        help="seconds a run's lease outlives a crashed server (default: env "
        "PHASEGRAPH_LEASE_TTL, else 30)",
    )
    parser.add_argument(
        "--upload-dir",
        default=str(Path(".phasegraph") / "uploads"),
        help="where uploaded graphs are kept (default %(default)s)",
    )
    parser.add_argument(
        "--queue",
        action="store_true",
        help="drive no run here: put new, answered and resumed runs in the store's (Redis or "
        "Postgres) "
        "queue for 'phasegraph worker' processes",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="the server's log lines on stderr (one per request, and per run started, gate "
        "opened, reply, cancel and run end): text for people, json for one object a line "
        "(default %(default)s; --quiet keeps warnings only)",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="look at runs only: drive, start, answer, resume, cancel and fork none (the "
        "process that drives them goes on undisturbed); the viewer shows no such action",
    )
    parser.add_argument(
        "--with-worker",
        action="store_true",
        help="--queue, and drive queued runs in this process too (--max-runs at once), "
        "alongside any other workers",
    )
    _driving(parser)


def _store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("migrate",),
        help="migrate: create the store's tables, or bring them to this version's layout "
        "(Postgres; done on first use too)",
    )
    parser.add_argument(
        "url", nargs="?", metavar="URL", help="the store (default: --store, env PHASEGRAPH_STORE)"
    )


def _tokens_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("add", "list", "revoke"),
        help="add a token (its secret is printed once), list them, or revoke one",
    )
    parser.add_argument("name", nargs="?", help="the token's name (add, revoke)")
    parser.add_argument(
        "--file",
        default=os.environ.get("PHASEGRAPH_TOKENS_FILE"),
        help="the token file (env PHASEGRAPH_TOKENS_FILE)",
    )
    parser.add_argument(
        "--scope",
        action="append",
        default=[],
        help="a scope the token grants (repeatable): runs:read, runs:start, "
        "runs:start:GRAPH, gates:answer, runs:message, runs:resume, runs:cancel, runs:fork, "
        "runs:migrate, admin",
    )
    parser.add_argument(
        "--group", action="append", default=[], help="a group its holder belongs to (repeatable)"
    )
    parser.add_argument(
        "--expires", metavar="AGE", help="expire after AGE: 3600s, 90m, 12h, 30d (default never)"
    )


class _KeepsBrokenLines(argparse.HelpFormatter):
    """Wraps a one-line text (the description), keeps a text broken into lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "".join(indent + line for line in text.splitlines(keepends=True))


_SCRIPT_FORMAT: Final = """\
The base URL is printed on stdout: point llm: actions at it with
PHASEGRAPH_LLM_BASE_URL=URL (or a node's with: {llm: {base_url: URL}}).

The script is a JSON list of answers, one object each:
  {"content": TEXT}                  an assistant message
  {"tool_calls": [{"name": NAME, "arguments": {...}}, ...], "content": TEXT}
                                     tool calls (content optional)
  {"error": 429, "message": TEXT, "retry_after": SECONDS}
                                     an error status: any HTTP status, Retry-After sent
                                     when given (message optional)
  {"error": "context_length"}        the provider's context-length refusal (400,
                                     code context_length_exceeded)
Any entry may add "delay": SECONDS (a slow answer), "usage": {"prompt_tokens": N,
"completion_tokens": N} (default: about four characters a token) and "model": NAME
(the entry answers only requests for that model, e.g. an auxiliary_model's; requests
for other models skip it; an entry without "model" answers any model).

Which entry answers, by turn (the default, as a node's with.llm.script): a request
whose conversation holds N assistant messages (a compression summary counts for the
answers it summarizes) gets the N-th entry (from 0) that fits its model; asking again
for a turn gets the same answer, and any number of runs can share the server. Nothing
is matched against what the request says: a run that takes another path still gets
the scripted answer of its turn. --in-order answers each request with the next unused
entry instead. A request with no entry left gets a 400 error (code script_exhausted).
A streaming request ("stream": true) gets the same answer as server-sent chunks, text
word by word; errors and delays apply to it alike.
"""


def _model_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = _KeepsBrokenLines
    parser.epilog = _SCRIPT_FORMAT
    parser.add_argument("--script", required=True, metavar="FILE", help="the response script")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=0, help="port (default %(default)s: any free one)"
    )
    parser.add_argument(
        "--in-order",
        action="store_true",
        help="answer each request with the next unused entry, not by the turn it asks for",
    )
    parser.add_argument(
        "--max-context",
        type=_count,
        default=None,
        metavar="TOKENS",
        help="refuse requests over about this many tokens with the context-length error",
    )


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--concurrency", type=_count, default=16, help="runs driven at once (default %(default)s)"
    )
    parser.add_argument(
        "--name", help="this worker's consumer name (default HOST:PID; unique per live worker)"
    )
    parser.add_argument(
        "--reclaim-after",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="take over a silent worker's runs after this long (default: the lease length; "
        "keep it at least that where workers run on several hosts)",
    )
    parser.add_argument(
        "--partitions",
        type=_count,
        default=1,
        help="Redis streams to spread runs over, if the store has none recorded yet (a "
        "cluster spreads them over its primaries; default %(default)s; a Postgres store has "
        "one queue)",
    )
    parser.add_argument(
        "--lease-ttl",
        type=_positive,
        default=None,
        help="seconds a run's lease outlives a killed worker (default: env "
        "PHASEGRAPH_LEASE_TTL, else 30)",
    )
    _driving(parser)


COMMANDS = (
    Command("run", "start a run of a graph and drive it to the end (or a wait)", _run, _runs),
    Command("resume", "continue a run from its last committed step", _resume, _runs),
    Command("status", "show one run, or list runs", _status, _runs),
    Command("history", "list a run's committed steps", _history, _runs),
    Command("show", "print a run's full snapshot (at the head or any step)", _show, _runs),
    Command(
        "machines", "list the built-in machines, or describe one", _named("machine"), _builtins
    ),
    Command(
        "tools",
        "describe the built-in tools agents call (all, or the one named)",
        _named("tool"),
        _builtins,
    ),
    Command("graphs", "list the built-in graphs", _no_arguments, _runs),
    Command("reply", "answer a run's pending interrupt and continue the run", _reply, _human),
    Command(
        "send",
        "send a run a message: refused while it is busy (graph busy: reject), else kept in "
        "its inbox and taken in order where the machine accepts it",
        _send,
        _human,
    ),
    Command("cancel", "cancel a waiting, parked or abandoned run", _cancel, _human),
    Command(
        "check",
        "check machines and graphs without running them: problems, unreachable states, "
        "loops no budget bounds, states that cannot finish (exit 1 on errors)",
        _check,
        _definitions,
    ),
    Command(
        "diagram",
        "draw a machine's states or a graph's layers as Mermaid (renders on GitHub) or dot",
        _diagram,
        _definitions,
    ),
    Command(
        "test",
        "prove a graph's properties: liveness, termination bound, reachable outcomes, the "
        "machines' examples, a run of its own actions that does not fail, and "
        "crash-equivalence (exit 1 if one fails)",
        _test,
        _testing,
    ),
    Command(
        "record",
        "write a run's answers from outside (model messages, tool results, http and shell "
        "results, replies) to a cassette file, secrets masked, for 'phasegraph test "
        "--cassette'",
        _record,
        _testing,
    ),
    Command(
        "fork", "start a new run from any committed step of a run and drive it", _fork, _durable
    ),
    Command(
        "migrate",
        "check that a waiting run fits another version of its graph and move it there "
        "(exit 0 fits or moved, 1 does not fit: each misfit named)",
        _migrate_arguments,
        _migrate,
    ),
    Command(
        "replay",
        "re-drive a run's history with its recorded action results (no action runs) and "
        "report 'identical' or the first divergence; exit 0 identical, 1 diverged",
        _replay,
        _durable,
    ),
    Command(
        "errors",
        "show a run's error log: failures, recoveries, emergencies",
        _errors_of,
        _errors,
    ),
    Command(
        "serve",
        "serve the HTTP API: runs, events, replies (until Ctrl-C)",
        _serve_arguments,
        _serve,
    ),
    Command(
        "tokens",
        "manage the token file of 'serve --tokens': add (prints the secret once), list, revoke",
        _tokens_arguments,
        _tokens,
    ),
    Command(
        "model-server",
        "serve a response script as an OpenAI-compatible model at a printed base URL, for "
        "llm: actions to call offline (until Ctrl-C)",
        _model_server_arguments,
        _model_server,
    ),
    Command(
        "store",
        "create or migrate a store's tables now: 'phasegraph store migrate URL' (Postgres)",
        _store_arguments,
        _store,
    ),
    Command(
        "worker",
        "take runs from the Redis or Postgres store's work queue and drive them (any number "
        "of workers, "
        "on any number of hosts; until Ctrl-C or SIGTERM)",
        _worker_arguments,
        _worker,
    ),
)
"""Every command, in the order ``phasegraph --help`` lists them."""
