"""The table of commands: every row runs its own handler and describes itself."""

from __future__ import annotations

import argparse
import inspect
from collections import defaultdict
from collections.abc import Callable

import pytest

from phasegraph.cli import main
from phasegraph.cli._commands import COMMANDS, Command
from phasegraph.cli._handler import Handlers


def _flat(text: str) -> str:
    """Text with argparse's line wrapping undone."""
    return " ".join(text.split())


def test_every_command_has_a_handler_and_every_handler_a_command() -> None:
    rows: defaultdict[Callable[[], Handlers], set[str]] = defaultdict(set)
    for command in COMMANDS:
        rows[command.load].add(command.name)
        assert inspect.iscoroutinefunction(command.handler())
    for load, names in rows.items():
        assert set(load()) == names  # a module's HANDLERS holds exactly its rows
    assert len({command.name for command in COMMANDS}) == len(COMMANDS)


def test_help_lists_every_command_with_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    listing = _flat(capsys.readouterr().out)
    for command in COMMANDS:
        assert f"{command.name} {_flat(command.help)}" in listing


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_command_help_describes_it_and_the_common_options(
    command: Command, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command.name, "--help"])
    assert exited.value.code == 0
    text = _flat(capsys.readouterr().out)
    assert _flat(command.help) in text
    for option in ("--store", "--json", "--quiet"):
        assert option in text


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_every_argument_is_described(command: Command) -> None:
    parser = argparse.ArgumentParser(prog=command.name)
    command.arguments(parser)
    undescribed = [action.dest for action in parser._actions if not action.help]
    assert undescribed == []


def test_bad_input_from_a_command_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "no-such-run", "--store", "memory://"]) == 2
    assert capsys.readouterr().err.startswith("phasegraph: ")
