"""Python actions of the ``research_agent`` example: where the sources are, and the report.

The research itself is the model's (an ``llm:`` action in the graph, offline a scripted
model answering from ``research_agent.responses.json``).
"""

from __future__ import annotations

from importlib.resources import files

from phasegraph.actions import ActionContext, ActionResult

__all__ = ["locate_machines", "report"]


async def locate_machines(ctx: ActionContext) -> ActionResult:
    """Point the agent at the folder of phasegraph's built-in machine files."""
    return ActionResult(trigger="ok", data={"folder": str(files("phasegraph.states"))})


async def report(ctx: ActionContext) -> ActionResult:
    """Keep the model's final answer as the report, with what its research cost."""
    conversation = ctx.data.get("conversation", [])
    answer = next(
        (m.get("content") for m in reversed(conversation) if m.get("role") == "assistant"), ""
    )
    return ActionResult(trigger="ok", data={"report": answer})
