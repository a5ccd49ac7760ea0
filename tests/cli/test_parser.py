"""A command line that starts with a command is parsed by that command's parser alone.

``main`` builds only the named command's sub-parser (the others cost a good part of a
short command's start-up); these tests hold it to the whole parser's answer, word for
word: the same namespace, or the same exit status and the same text on stdout and stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.cli._commands import COMMANDS
from phasegraph.cli._main import _command_of, build_parser

NAMES = [command.name for command in COMMANDS]

WORDS = st.sampled_from(
    [
        *NAMES,
        "hello",
        "x",
        "who=x",
        "3",
        "-",
        "--",
        "-h",
        "--help",
        "--version",
        "--vers",
        "--store",
        "memory://",
        "--json",
        "-q",
        "--input",
        "--run-id",
        "--status",
        "--nope",
        "-z",
    ]
)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, str, str]:
    """What ``parser`` makes of ``argv``: its namespace or exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: object = vars(parser.parse_args(argv))
        except SystemExit as exc:
            result = ("exit", exc.code)
    return result, out.getvalue(), err.getvalue()


def _both(argv: list[str]) -> tuple[tuple[object, str, str], tuple[object, str, str]]:
    return _parse(build_parser(only=_command_of(argv)), argv), _parse(build_parser(), argv)


@given(st.sampled_from(NAMES), st.lists(WORDS, max_size=6))
def test_a_command_line_starting_with_a_command_parses_as_with_every_command(
    name: str, rest: list[str]
) -> None:
    argv = [name, *rest]
    assert _command_of(argv) == name  # the narrow parser is the one in use
    narrow, whole = _both(argv)
    assert narrow == whole


@given(st.lists(WORDS, max_size=6))
def test_any_command_line_parses_as_with_every_command(argv: list[str]) -> None:
    narrow, whole = _both(argv)
    assert narrow == whole


@pytest.mark.parametrize("argv", [["run", "--help"], ["run"], ["status", "--nope"]])
def test_the_cases_that_print_agree(argv: list[str]) -> None:
    # The control for the properties above: these print help or an error, and exit.
    narrow, whole = _both(argv)
    assert narrow == whole
    (result, out, err) = narrow
    assert isinstance(result, tuple)
    assert result[0] == "exit"
    assert "usage: phasegraph" in out + err


@pytest.mark.parametrize("argv", [[], ["-h", "run"], ["--version"], ["nope"], ["--store", "x"]])
def test_a_command_line_not_starting_with_a_command_gets_the_whole_parser(
    argv: list[str],
) -> None:
    assert _command_of(argv) is None
