"""Where an ``llm:`` action sends its requests: the environment, node settings, or a script.

The endpoint is read at every call, in this order:

1. ``PHASEGRAPH_LLM_BASE_URL``;
2. the node's ``with: {llm: {base_url: URL}}``;
3. the node's ``with: {llm: {script: FILE}}``: a response script (JSON, relative to the
   graph file) answered offline by a :class:`ScriptedModelServer`, one per script (and
   event loop), started by the first call and kept with the model clients;
4. ``OPENAI_BASE_URL``;
5. the OpenAI API.

With ``PHASEGRAPH_LLM_BASE_URL``, ``PHASEGRAPH_LLM_MODEL`` (when set) names the model to
ask there instead of each binding's ``model`` (an ``auxiliary_model`` is kept: if the
endpoint lacks it, summaries fall back to the main model).

The key is ``PHASEGRAPH_LLM_API_KEY``, else the variable ``with.llm.api_key_env`` names,
else ``OPENAI_API_KEY``. A key is never written in a graph file (only the name of the
variable that holds it), and never recorded: messages mask it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

from phasegraph.actions.llm._client import Endpoint
from phasegraph.actions.llm._pool import loop_pool
from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.core._sources import StoredFiles, read_bytes
from phasegraph.errors import ActionError

__all__ = ["BASE_URL_ENV", "KEY_ENV", "MODEL_ENV", "SETTINGS_KEY", "open_endpoint"]

BASE_URL_ENV: Final = "PHASEGRAPH_LLM_BASE_URL"
MODEL_ENV: Final = "PHASEGRAPH_LLM_MODEL"
KEY_ENV: Final = "PHASEGRAPH_LLM_API_KEY"
SETTINGS_KEY: Final = "llm"
"""The node's ``with`` block that may name ``base_url``, ``api_key_env`` and ``script``."""


def _key(settings: Mapping[str, Any]) -> str:
    named = settings.get("api_key_env")
    for variable in (KEY_ENV, named, "OPENAI_API_KEY"):
        if isinstance(variable, str) and os.environ.get(variable):
            return os.environ[variable]
    return ""


def _script(
    path: str, base_dir: Path | None, stored: StoredFiles | None
) -> tuple[Path, str, list[Mapping[str, Any]]]:
    """The script's file, its text and its answers (the text tells an edited script apart).

    A run's stored copy of the script (``stored``) is read rather than the file.
    """
    candidate = Path(path)
    if not candidate.is_absolute() and base_dir is not None:
        candidate = base_dir / candidate
    try:
        text = read_bytes(candidate, stored).decode("utf-8")
        script = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot read the response script {str(candidate)!r}: {exc}") from None
    if not isinstance(script, list) or not all(isinstance(e, Mapping) for e in script):
        raise ActionError(f"the response script {str(candidate)!r} is not a list of answers")
    return candidate.resolve(), text, script


async def _close_server(server: ScriptedModelServer) -> None:
    await server.aclose()


@contextlib.asynccontextmanager
async def open_endpoint(
    node_settings: Mapping[str, Any], base_dir: Path | None, stored: StoredFiles | None = None
) -> AsyncIterator[Endpoint]:
    """The endpoint for one call (a script's server is kept open until the call ends).

    ``stored`` is the run's stored definition files, whose response scripts are read
    rather than the files on disk.

    Raises:
        ActionError: ``with.llm`` is malformed or its script cannot be read.
    """
    settings = node_settings.get(SETTINGS_KEY) or {}
    if not isinstance(settings, Mapping):
        raise ActionError("with.llm must be a mapping (base_url, api_key_env, script)")
    key = _key(settings)
    chosen = os.environ.get(BASE_URL_ENV)
    if chosen:
        yield Endpoint(base_url=chosen, api_key=key, model=os.environ.get(MODEL_ENV) or None)
        return
    base_url = settings.get("base_url")
    if base_url or not settings.get("script"):
        yield Endpoint(base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None, api_key=key)
        return
    path, text, script = _script(str(settings["script"]), base_dir, stored)

    async def start() -> ScriptedModelServer:
        # Answers by turn keep no state between requests, so one server serves every
        # call of every run; it keeps no log of requests, which would only grow.
        server = ScriptedModelServer(script, by_turn=True, record=False)
        await server.start()
        return server

    pool = await loop_pool()
    async with pool.use(("script", path, text), start, _close_server) as server:
        yield Endpoint(base_url=server.base_url, api_key=key)
