"""Each generated reference page says what its source says, and changes when it changes."""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import refpages_kit  # noqa: F401  (the renderers' folder on sys.path)
import yaml
from hypothesis import given
from hypothesis import strategies as st
from refpages import PAGES, cli_page, http_page, machines_page, python_page, tools_page, yaml_page

from builders import REPO
from phasegraph.actions import declare_effect, effect_of
from phasegraph.cli._describe import builtin_tools
from phasegraph.cli._main import build_parser
from phasegraph.model import Effect
from phasegraph.spec import load_machine
from phasegraph.spec._loader import builtin_machines

MACHINE_SCHEMA = REPO / "specs" / "machine.schema.json"
GRAPH_SCHEMA = REPO / "specs" / "graph.schema.json"


def _section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = page.index(f"\n{heading}\n")
    rest = page[start + len(heading) + 2 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


# --------------------------------------------------------------------------- YAML


def _objects(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    top = f"### {schema['title']} (top level)"
    return {top: schema, **{f"### {n}": d for n, d in schema.get("$defs", {}).items()}}


@pytest.mark.parametrize("path", [MACHINE_SCHEMA, GRAPH_SCHEMA], ids=lambda p: p.stem)
def test_the_yaml_page_lists_every_field_default_and_allowed_value(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    page = yaml_page.page([("Format", path)])
    for heading, definition in _objects(schema).items():
        section = _section(page, heading)
        for field, prop in definition.get("properties", {}).items():
            row = next(line for line in section.splitlines() if line.startswith(f"| `{field}`"))
            if field in definition.get("required", ()):
                assert "(required)" in row
            if "default" in prop:
                assert f"`{json.dumps(prop['default'])}`" in row
            for option in (prop, *prop.get("anyOf", ())):
                for value in option.get("enum", ()):
                    assert f"`{json.dumps(value)}`" in row, (heading, field, value)
            description = " ".join(prop.get("description", "").split()).replace("``", "`")
            assert description.split("|")[0].strip()[:30] in row


def test_renaming_a_schema_field_renames_it_on_the_page(tmp_path: Path) -> None:
    schema = json.loads(MACHINE_SCHEMA.read_text(encoding="utf-8"))
    before = yaml_page.page([("Machine file", MACHINE_SCHEMA)])
    changed = copy.deepcopy(schema)
    changed["properties"]["starting_state"] = changed["properties"].pop("initial")
    changed["required"] = ["starting_state" if r == "initial" else r for r in changed["required"]]
    copied = tmp_path / "machine.schema.json"
    copied.write_text(json.dumps(changed), encoding="utf-8")
    after = yaml_page.page([("Machine file", copied)])
    assert after != before
    assert "| `starting_state` (required) |" in after
    assert "| `initial`" in before
    assert "| `initial`" not in after


@given(
    st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True),
    st.text(st.characters(categories=["L", "Nd", "Zs", "Po"]), min_size=1, max_size=40),
    st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), min_size=1, max_size=4, unique=True),
)
def test_any_new_field_appears_with_its_description_and_values(
    field: str, description: str, values: list[str]
) -> None:
    schema = json.loads(MACHINE_SCHEMA.read_text(encoding="utf-8"))
    schema["$defs"]["BudgetSpec"]["properties"][f"x_{field}"] = {
        "description": description,
        "enum": values,
        "type": "string",
    }
    section = _section(yaml_page.render([("Machine file", schema)]), "### BudgetSpec")
    row = next(line for line in section.splitlines() if line.startswith(f"| `x_{field}`"))
    assert all(f'`"{value}"`' in row for value in values)
    assert " ".join(description.split()).replace("|", "\\|") in row
    # The row stays one row of five cells, whatever the description holds.
    assert len(re.findall(r"(?<!\\)\|", row)) == 6


# --------------------------------------------------------------------------- machines

_EXTRA_MACHINE = """\
machine: task
description: A one-shot task, with a review step added for this test.
initial: run
budgets:
  rounds: {limit: 3, spend_on: [review]}
states:
  run: {hook: run, description: "run the bound action once"}
  review: {hook: inspect_work, description: "look the work over"}
  done: {final: success, description: "the action returned ok"}
  failed: {final: failed, description: "the action returned fail"}
transitions:
  - {trigger: ok, source: run, dest: review}
  - {trigger: approve, source: review, dest: done, conditions: ["setting:strict_review"]}
  - {trigger: fail, source: [run, review], dest: failed}
"""


def test_every_built_in_machine_is_on_the_machines_page_with_its_parts() -> None:
    page = machines_page.page()
    for name in builtin_machines():
        machine = load_machine(name)
        section = _section(page, f"## {name}")
        assert " ".join(machine.description.split())[:60] in section
        for state in machine.states:
            assert f"| `{state}` |" in _section(section, "### States")
        for transition in machine.transitions:
            assert f"| `{transition.trigger}` |" in _section(section, "### Triggers")
        for budget in machine.budgets:
            assert f"| `{budget}` |" in _section(section, "### Budgets")
            assert f"| `budgets.{budget}` |" in _section(section, "### Settings")


def test_a_changed_machine_changes_its_section(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(_EXTRA_MACHINE, encoding="utf-8")
    before = machines_page.render([load_machine("task")], [])
    after = machines_page.render([load_machine(str(path))], [])
    assert after != before
    assert "| `review` | runs hook inspect_work: look the work over |" in after
    assert "| `approve` | review -> done if setting:strict_review |" in after
    assert "| `rounds` | limit 3; every entry into review spends one |" in after
    assert "| `strict_review` | tested by guards of approve |" in after
    assert "review" not in before


def test_concern_actions_name_what_they_fire_read_and_write() -> None:
    page = machines_page.page()
    emergency = _section(page, "### phasegraph.concerns.fallback:emergency")
    assert "`fail`" in emergency
    assert "| `error_key` |" in emergency
    assert "Data key error (by default)." in emergency
    assert "| `fallback_chain` | hook emergency" in emergency


# --------------------------------------------------------------------------- tools


def test_every_built_in_tool_is_on_the_tools_page_with_its_arguments() -> None:
    page = tools_page.page()
    for name, tool in builtin_tools().items():
        section = _section(page, f"## {name}")
        for parameter in inspect.signature(tool).parameters.values():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                assert f"| `{parameter.name}` |" in _section(section, "### Arguments")
        assert f"| `{effect_of(tool).value}` |" in _section(section, "### Effect")
    run_command = _section(page, "## run_command")
    assert "| `with.phases.PHASE.deny_commands` |" in run_command
    assert "argv, exit, stdout, stderr, timed_out" in run_command
    assert "| `once` |" in run_command
    assert "| `none` |" in _section(page, "## read_file")


def test_a_new_tool_gets_its_own_section() -> None:
    @declare_effect(Effect.IDEMPOTENT)
    async def fetch_page(scope: Any, *, url: str, retries: int = 2) -> Mapping[str, Any]:
        """Fetch a web page into the workspace, at most ``retries`` more times."""
        return {"url": url, "status": 200}

    before = tools_page.render(builtin_tools())
    after = tools_page.render({**builtin_tools(), "fetch_page": fetch_page})
    assert "## fetch_page" not in before
    section = _section(after, "## fetch_page")
    assert "Fetch a web page into the workspace, at most `retries` more times." in section
    assert "| `url` | string, required |" in section
    assert "| `retries` | integer, default 2 |" in section
    assert "| `idempotent` |" in section
    assert "| `result` | url, status |" in section


# --------------------------------------------------------------------------- CLI


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_cli_page_lists_every_command_and_option() -> None:
    parser = build_parser()
    page = cli_page.render(parser)
    for name, command in _commands(parser).items():
        assert f"\n## {name}\n" in page
        assert (command.description or "") in page
        section = _section(page, f"## {name}")
        for action in command._actions:
            shown = action.help != argparse.SUPPRESS  # flags of earlier versions are hidden
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                if shown:  # common options are listed once for every command
                    assert f"`{option}`" in page, (name, option)
                else:
                    assert f"`{option}`" not in section, (name, option)


def test_adding_a_cli_argument_adds_it_to_the_page() -> None:
    before = cli_page.render(build_parser())
    parser = build_parser()
    _commands(parser)["machines"].add_argument(
        "--brief", action="store_true", help="one line per machine, nothing more"
    )
    after = cli_page.render(parser)
    assert after != before
    section = _section(after, "## machines")
    assert "| `--brief` |   | one line per machine, nothing more |" in section
    assert "--brief" not in before


# --------------------------------------------------------------------------- HTTP


def _openapi() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(http_page.OPENAPI.read_text(encoding="utf-8"))
    return loaded


def test_the_http_page_lists_every_route_status_and_schema() -> None:
    document = _openapi()
    page = http_page.render(document)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            section = _section(page, f"### {method.upper()} {path}")
            for status in operation["responses"]:
                assert f"| `{status}` |" in section, (method, path, status)
    for name, schema in document["components"]["schemas"].items():
        section = _section(page, f"### {name}")
        for field in schema.get("properties", {}):
            assert f"| `{field}`" in section, (name, field)


def test_a_new_route_appears_with_its_parameters_and_statuses() -> None:
    document = _openapi()
    before = http_page.render(document)
    document["paths"]["/runs/{run_id}/pause"] = {
        "parameters": [{"$ref": "#/components/parameters/RunId"}],
        "post": {
            "summary": "Pause a running run at its next step.",
            "responses": {
                "202": {"description": "The pause is recorded."},
                "404": {"$ref": "#/components/responses/NotFound"},
            },
        },
    }
    after = http_page.render(document)
    assert "pause" not in before
    section = _section(after, "### POST /runs/{run_id}/pause")
    assert "Pause a running run at its next step." in section
    assert "| `run_id` | path | yes |" in section
    assert "| `202` | The pause is recorded. |" in section
    assert "| `404` |" in section
    assert "[Problem](#problem)" in section


# --------------------------------------------------------------------------- Python


def _package(root: Path, docstring: str) -> None:
    package = root / "refpages_probe"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            f'''\
            """A probe package for the Python reference page."""

            __all__ = ["probe"]


            def probe(count: int) -> int:
                """{docstring}

                Use it like this::

                    probe(3)

                Args:
                    count: How many times; a long
                        explanation that goes on.

                Returns:
                    The count, as given, on a line
                    of its own.
                """
                return count
            '''
        ),
        encoding="utf-8",
    )


def test_a_changed_docstring_changes_the_python_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _package(tmp_path, "Count to ``count``, slowly.")
    before = python_page.render(["refpages_probe"])
    _package(tmp_path, "Count to ``count``, quickly.")
    after = python_page.render(["refpages_probe"])
    monkeypatch.delitem(__import__("sys").modules, "refpages_probe")
    assert after != before
    assert "Count to `count`, quickly." in after
    section = _section(after, "### `refpages_probe.probe`")
    assert "probe(count: int) -> int" in section
    assert "- `count`: How many times; a long explanation that goes on." in section
    assert "**Returns**\n\n- The count, as given, on a line of its own." in section
    assert "Use it like this:\n\n```\nprobe(3)\n```" in section


def test_every_page_the_hook_adds_renders() -> None:
    assert sorted(PAGES) == [
        "reference/cli.md",
        "reference/http.md",
        "reference/machines.md",
        "reference/python.md",
        "reference/tools.md",
        "reference/yaml.md",
    ]
    for path, render in PAGES.items():
        page = render()
        assert page.startswith("# "), path
        assert "Generated from" in page, path
