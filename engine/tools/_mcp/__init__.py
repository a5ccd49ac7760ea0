"""Tools from MCP servers: a graph's ``mcp:`` servers, their sessions, and their calls.

A graph names its servers at the top level::

    mcp:
      git:
        command: [mcp-server-git, --repository, "{repo}"]   # stdio; or url: + headers:
        env: {GIT_AUTHOR_NAME: agent}
        cwd: "{repo}"
        timeout: 60          # seconds a call may take
        start_timeout: 30    # seconds to start the server and list its tools
        tools: [git_status, git_diff_unstaged, git_add, git_commit]
        effects: {git_add: idempotent}

Its tools join the built-in ones in :class:`~phasegraph.tools._registry.ToolFactory`:
described to the model from the server's listing, under the same phase rules. Every
string is a template over the run's input and data, rendered when a run first uses the
server; each run has its own session, closed when the run is let go.

This package's root reads the settings and needs nothing but the engine; the sessions
(:mod:`._servers`) need the ``mcp`` SDK (the ``[mcp]`` extra), imported only for a graph
that has ``mcp:``.

May import :mod:`phasegraph.tools._builtins`, :mod:`phasegraph.tools._schemas`,
:mod:`phasegraph.actions`, :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.tools._mcp._config import EFFECT_META, McpServer, read_servers

__all__ = ["EFFECT_META", "McpServer", "read_servers"]
