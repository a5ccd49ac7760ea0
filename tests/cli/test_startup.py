"""Asking the command line for help or its version imports none of the engine.

Each case runs the CLI in a fresh interpreter and reads what ended up in ``sys.modules``,
so a module-level import anywhere on the way (``phasegraph/__init__.py``, the parser, a
command module) shows up here, whatever the clock says.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import phasegraph
from builders import cli_argv
from phasegraph.cli._commands import COMMANDS

HEAVY = frozenset(
    {
        "aiohttp",
        "hiredis",
        "jsonschema",
        "msgpack",
        "msgspec",
        "networkx",
        "pydantic",
        "redis",
        "rich",
        "transitions",
        "yaml",
    }
)
"""The third-party libraries the engine and its command modules import."""

PARSER_MODULES = frozenset(
    {
        "phasegraph",
        "phasegraph._vocabulary",
        "phasegraph.cli",
        "phasegraph.cli._main",
        "phasegraph.cli._commands",
        "phasegraph.cli._handler",
    }
)
"""The phasegraph modules that building the parser may import."""

_MARK = "--- modules ---"
_PROBE = f"""
import sys
from phasegraph.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
names = sorted(sys.modules)
print({_MARK!r}, code, *names, sep="\\n")
"""


def _run(*args: str) -> tuple[str, int, set[str]]:
    """Run ``phasegraph ARGS`` in a fresh interpreter: its output, exit status, modules."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    output, _, tail = done.stdout.partition(f"{_MARK}\n")
    code, *names = tail.split()
    return output, int(code), set(names)


def _top_level(names: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in names}


@pytest.mark.parametrize(
    "args",
    [("--version",), ("--help",), *((command.name, "--help") for command in COMMANDS)],
    ids=" ".join,
)
def test_help_and_version_import_no_engine(args: tuple[str, ...]) -> None:
    output, code, names = _run(*args)
    assert code == 0
    assert output  # the help or version text was printed
    assert _top_level(names) & HEAVY == set()
    assert {name for name in names if name.startswith("phasegraph")} <= PARSER_MODULES


def test_version_is_the_packages() -> None:
    output, code, _ = _run("--version")
    assert (output, code) == (f"phasegraph {phasegraph.__version__}\n", 0)


def test_a_command_imports_its_module_only_when_it_runs() -> None:
    # The control for the cases above: the probe does see what a real command imports.
    output, code, names = _run("status", "--store", "memory://")
    assert (output, code) == ("no runs in memory://\n", 0)
    assert "phasegraph.cli._runs" in names
    assert "phasegraph.api" in names
    assert "phasegraph.cli._serve" not in names  # another command's module


def test_console_script_version_imports_no_engine() -> None:
    # The installed script's own wrapper, not just main(): -X importtime names every
    # module it imports, one per stderr line ending in "| name".
    argv = cli_argv("--version")
    if argv[0] == sys.executable:
        argv = argv[1:]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True
    )
    assert done.stdout == f"phasegraph {phasegraph.__version__}\n"
    imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines()}
    assert "phasegraph.cli._main" in imported
    assert _top_level(imported) & HEAVY == set()
    assert {name for name in imported if name.startswith("phasegraph")} <= PARSER_MODULES


DRIVING = frozenset({"networkx", "transitions", "pydantic", "jsonschema", "yaml"})
"""What preparing and driving a run imports, and reading one does not need."""


@pytest.mark.parametrize("command", ["history", "show"])
def test_reading_a_run_imports_none_of_the_driving_machinery(tmp_path, command: str) -> None:
    # The CLI reads a 10,000-step history in a fraction of a second only if it does not
    # first import the interpreter, the graph library, the machines and the YAML loader.
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    _, code, _ = _run("run", "hello", "--store", store, "--run-id", "r", "-q", "--input", "who=x")
    assert code == 0
    output, code, names = _run(command, "r", "--store", store, "--json")
    assert code == 0
    assert output.startswith(("[", "{"))
    assert _top_level(names) & DRIVING == set()
    assert not {"phasegraph.spec", "phasegraph.run._interpreter", "phasegraph.run._prepare"} & names


LOADING = frozenset({"aiohttp", "jsonschema", "networkx", "openai", "pydantic", "rich", "yaml"})
"""What loading a graph file (and drawing a live table) imports: none of it is needed to
run a graph read back from the compiled-graph cache, with an input that passed before."""


TOOLING = frozenset(
    {"phasegraph.spec._loader", "phasegraph.tools._registry", "phasegraph.tools._builtins"}
)
"""The graph loader, and the tools and their rules, which a graph whose actions call no
tool never needs."""


def test_running_an_unchanged_graph_again_loads_nothing_again(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHASEGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    _, code, first = _run("run", "hello", "--store", "memory://", "-q", "--input", "who=x")
    assert code == 0
    assert {"yaml", "pydantic", "jsonschema"} <= _top_level(first)  # the control: it loaded
    output, code, again = _run("run", "hello", "--store", "memory://", "--input", "who=x")
    assert code == 0
    assert "hello, x!" in output
    assert _top_level(again) & LOADING == set()
    assert not TOOLING & again  # no action of the graph calls a tool
    # Another input is checked against the graph's schema again: the validator is back.
    _, code, other = _run("run", "hello", "--store", "memory://", "-q", "--input", "who=y")
    assert code == 0
    assert "jsonschema" in _top_level(other)
    assert "yaml" not in _top_level(other)
