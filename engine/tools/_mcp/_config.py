"""A graph's ``mcp:`` servers as settings: read, checked against the built-ins, rendered."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import pydantic

from phasegraph.actions._shell import render
from phasegraph.errors import Problem
from phasegraph.model import Effect, GraphDef
from phasegraph.spec._models import McpServerSpec

__all__ = ["EFFECT_META", "McpServer", "read_servers"]

EFFECT_META: Final = "phasegraph/effect_id"
"""The ``_meta`` key of a tool call's request that carries the call's effect id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """One server's settings (every string a template until :meth:`rendered`).

    Attributes:
        name: The server's name in the graph.
        command: argv of a stdio server; None for an HTTP one.
        env: Extra environment variables of the command.
        cwd: The command's working folder.
        url: The streamable HTTP endpoint; None for a stdio server.
        headers: HTTP headers sent to ``url``.
        timeout: Seconds a tool call may take.
        start_timeout: Seconds to start the server and list its tools.
        tools: The tools the graph takes from it.
        effects: Tool → declared effect kind (others: the server's hints).
    """

    name: str
    command: tuple[str, ...] | None
    env: Mapping[str, str]
    cwd: str | None
    url: str | None
    headers: Mapping[str, str]
    timeout: float
    start_timeout: float
    tools: tuple[str, ...]
    effects: Mapping[str, Effect]

    @classmethod
    def of(cls, name: str, settings: Mapping[str, Any]) -> McpServer:
        """The server ``name`` as a graph's ``mcp:`` entry describes it (defaults filled).

        Raises:
            pydantic.ValidationError: ``settings`` is not a valid entry (a graph loaded
                from YAML was checked already; one built in code is checked here).
        """
        spec = McpServerSpec.model_validate(dict(settings))
        return cls(
            name=name,
            command=None if spec.command is None else tuple(spec.command),
            env=MappingProxyType(spec.env),
            cwd=spec.cwd,
            url=spec.url,
            headers=MappingProxyType(spec.headers),
            timeout=spec.timeout,
            start_timeout=spec.start_timeout,
            tools=tuple(spec.tools),
            effects=MappingProxyType({tool: Effect(kind) for tool, kind in spec.effects.items()}),
        )

    def rendered(self, values: Mapping[str, Any]) -> McpServer:
        """These settings with every template filled from ``values`` (a run's input and data).

        Raises:
            ActionError: A template names a value the run does not have.
        """

        def fill(text: str) -> str:
            return render(text, values)

        return McpServer(
            name=self.name,
            command=None if self.command is None else tuple(map(fill, self.command)),
            env=MappingProxyType({k: fill(v) for k, v in self.env.items()}),
            cwd=None if self.cwd is None else fill(self.cwd),
            url=None if self.url is None else fill(self.url),
            headers=MappingProxyType({k: fill(v) for k, v in self.headers.items()}),
            timeout=self.timeout,
            start_timeout=self.start_timeout,
            tools=self.tools,
            effects=self.effects,
        )


def read_servers(
    definition: GraphDef, builtins: Iterable[str]
) -> tuple[dict[str, McpServer], list[Problem]]:
    """The graph's servers, and a problem for each tool that shadows a built-in one.

    Servers offering the same tool are refused when the graph is loaded (the schema
    check knows every server there); the built-in names are known only here.
    """
    taken = set(builtins)
    servers: dict[str, McpServer] = {}
    problems: list[Problem] = []
    for name, settings in definition.mcp.items():
        try:
            servers[name] = McpServer.of(name, settings)
        except pydantic.ValidationError as exc:
            text = "; ".join(str(error["msg"]) for error in exc.errors(include_url=False))
            problems.append(Problem(f"mcp.{name}: {text}", definition.location))
    problems += [
        Problem(
            f"mcp.{server.name}.tools: {tool!r} is a built-in tool: MCP server "
            f"{server.name!r} cannot offer it under that name "
            f"(built-in: {', '.join(sorted(taken))})",
            definition.location,
        )
        for server in servers.values()
        for tool in server.tools
        if tool in taken
    ]
    return servers, problems
