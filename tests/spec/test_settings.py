"""The registry of node settings: in step with the code that reads them, and enforced on load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import SpecError
from phasegraph.spec import load_graph_text
from phasegraph.spec._settings import NODE_SETTINGS

ENGINE = Path(__file__).parent.parent.parent / "engine"
# How the package reads a node's settings: settings.get("KEY"), settings["KEY"], or a
# constant naming the key (REVIEW_TIMEOUT_SETTING = "review_timeout").
_READS = (
    re.compile(r"""settings\.get\(\s*["']([A-Za-z_]\w*)["']"""),
    re.compile(r"""settings\[\s*["']([A-Za-z_]\w*)["']\s*\]"""),
    re.compile(r"""^[A-Z_]*SETTING(?:S_KEY)?(?::\s*Final)?\s*=\s*["']([A-Za-z_]\w*)["']""", re.M),
)
_NOT_NODE_SETTINGS = ("engine/testing", "engine/server", "engine/cli", "engine/spec/_settings")


# Reads the patterns match that are not of a node's settings.
_OTHER_SETTINGS = {("engine/tools/_registry.py", "tools")}  # an MCP server's `tools:` list


def _read_in_package() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(ENGINE.rglob("*.py")):
        shown = str(path.relative_to(ENGINE.parent))
        if any(shown.startswith(skipped) for skipped in _NOT_NODE_SETTINGS):
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in _READS:
            for key in pattern.findall(text):
                if (shown, key) not in _OTHER_SETTINGS:
                    found.setdefault(key, shown)
    return found


def test_every_setting_the_package_reads_is_registered() -> None:
    read = _read_in_package()
    assert {"budgets", "review_timeout", "llm", "phases", "error_key"} <= set(read)
    missing = {key: where for key, where in read.items() if key not in NODE_SETTINGS}
    # Keys read inside a registered setting's own mapping are not top-level settings.
    inner = {k for s in NODE_SETTINGS.values() for k in (s.keys or ())}
    assert {key: where for key, where in missing.items() if key not in inner} == {}


def _closed_node(settings: str) -> str:
    return (
        f"nodes:\n  - id: n\n    machine: task\n    with: {settings}\n"
        "    bind:\n      run: {shell: [make], on_exit: {0: ok, 1: fail}}\n"
    )


@given(key=st.from_regex(r"[a-z][a-z_]{0,14}", fullmatch=True))
def test_a_node_binding_only_phasegraph_actions_takes_only_registered_keys(key: str) -> None:
    text = _closed_node(f'{{"{key}": 1}}')  # quoted: YAML reads a bare `no` as false
    setting = NODE_SETTINGS.get(key)
    if setting is not None and setting.shape is not None and not setting.shape(1):
        with pytest.raises(SpecError, match=f"with.{key} must be"):
            load_graph_text(text, name="g.yaml")
        return
    if setting is not None and key != "budgets" and setting.keys is None:
        load_graph_text(text, name="g.yaml")
        return
    if key in NODE_SETTINGS:
        return  # a mapping setting given a number: its owner judges the value
    with pytest.raises(SpecError) as refused:
        load_graph_text(text, name="g.yaml")
    [problem] = refused.value.problems
    assert problem.message.startswith(f"node 'n': with.{key}: nothing reads this setting")
    assert str(problem.location) == "g.yaml:4:12"


def test_a_node_with_a_function_of_its_own_keeps_its_own_keys_but_not_near_misses() -> None:
    own = (
        "nodes:\n  - id: n\n    machine: task\n    with: {{{key}: 1}}\n"
        '    bind:\n      run: {{python: "my.module:work", triggers: [ok]}}\n'
    )
    assert load_graph_text(own.format(key="provider"), name="g").nodes[0].settings == {
        "provider": 1
    }
    with pytest.raises(SpecError, match="did you mean 'review_timeout'"):
        load_graph_text(own.format(key="review_timout"), name="g")


def test_budget_overrides_may_name_the_budgets_of_nested_machines() -> None:
    text = (
        "nodes:\n  - id: n\n    machine: solo_agent\n    with: {budgets: {turns: 3, verify: 1}}\n"
        "    bind:\n      think: {llm: {model: m, tools: [advance]}}\n"
        "      act: {tools: conversation}\n"
        "      verify: {shell: [pytest], on_exit: {0: pass, default: fail}}\n"
        "      reflect: {llm: {model: m}, on_outcome: {answer: retry, compressed: null}}\n"
    )
    assert load_graph_text(text, name="g").nodes[0].settings["budgets"] == {"turns": 3, "verify": 1}


def _chain(settings: str) -> str:
    return (
        f"nodes:\n  - id: n\n    machine: fallback_chain\n    with: {settings}\n"
        "    bind:\n      main: {shell: [make], on_exit: {0: ok, default: fail}}\n"
        '      recover: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}\n'
        '      emergency: {python: "phasegraph.concerns.fallback:emergency", triggers: [fail]}\n'
    )


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        (
            "{suggestions: [try again]}",
            "with.suggestions must be a mapping of error code to a list",
        ),
        ("{suggestions: {timeout: try again}}", "with.suggestions must be"),
        ("{recovery: {retries: 3}}", "with.recovery has no enabled, so the guards of machine"),
        ("{recovery: {enabled: true, retries: 3}}", "with.recovery.retries: nothing reads"),
        ("{emergency: true}", "with.emergency must be a mapping, e.g. {enabled: true}"),
        ("{loop_detection: {threshold: many}}", "with.loop_detection must be a mapping whose"),
        ("{command_timeout: soon}", "with.command_timeout must be a number of seconds"),
    ],
)
def test_a_nested_setting_of_the_wrong_shape_is_refused_at_load(
    settings: str, refused: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(refused)):
        load_graph_text(_chain(settings), name="g.yaml")


@pytest.mark.parametrize(
    "settings",
    [
        "{suggestions: {timeout: [Try later.]}}",
        "{recovery: {enabled: false}, emergency: {enabled: true}}",
        "{recovery: {}}",
        "{loop_detection: {threshold: 3}, command_timeout: 2.5}",
    ],
)
def test_settings_of_the_right_shape_load(settings: str) -> None:
    load_graph_text(_chain(settings), name="g.yaml")
