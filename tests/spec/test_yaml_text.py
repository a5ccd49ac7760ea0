"""Text YAML cannot hold: each is one located problem, from the loader and the real CLI.

Control characters, lone surrogates, the escapes ``"\\ud800"`` … ``"\\udfff"`` and bytes that
are not UTF-8 used to escape the loader as raw PyYAML or codec tracebacks; so did values
YAML reads as what they cannot be: an integer of more than 4,300 digits (Python's limit
for converting one from text), a date past the calendar, ``!!bool maybe``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import REPO, cli_argv
from phasegraph.errors import SpecError
from phasegraph.spec import YamlLimits, load_graph, load_graph_text

HELLO = (REPO / "graphs" / "hello.yaml").read_text(encoding="utf-8")
DESCRIPTION = HELLO.splitlines()[1]
assert DESCRIPTION.startswith("description: ")  # every case below edits line 2


def with_description(text: str) -> str:
    return HELLO.replace(DESCRIPTION, f"description: {text}", 1)


LONG = ["more than 4300 digits", "quote it to keep it as text"]
WHO = next(
    (number, len(line) - len(line.lstrip()) + 1)
    for number, line in enumerate(HELLO.splitlines(), 1)
    if line.strip() == "who:"
)
"""Line and column of the input key ``who:``, which the ``key`` case edits."""

CASES = {
    # name: (the file's bytes, line:col of the problem, words the message has)
    "control": (with_description("Greet\x01 someone").encode(), "2:19", ["U+0001", "control"]),
    "nul": (with_description("Greet\x00 someone").encode(), "2:19", ["U+0000", "control"]),
    "c1": (with_description("Greet \x9f").encode(), "2:20", ["U+009F", "control"]),
    "escape": (with_description('"a \\ud800 b"').encode(), "2:14", ["\\ud800", "surrogate"]),
    "pair": (with_description('"\\ud83d\\ude00"').encode(), "2:14", ["\\U0001F600"]),
    "key": (HELLO.replace("who:", '"w\\udfffo":').encode(), "{}:{}".format(*WHO), ["\\udfff"]),
    "latin-1": (with_description("Greet \xe9").encode("latin-1"), "2:20", ["0xe9", "UTF-8"]),
    "raw surrogate": (
        with_description("Greet \udc80").encode("utf-8", "surrogatepass"),
        "2:20",
        ["0xed", "UTF-8"],
    ),
    "long integer": (with_description("7" * 4301).encode(), "2:14", LONG),
    "long negative": (with_description("-1_" + "0" * 5000).encode(), "2:14", LONG),
    "long hexadecimal": (with_description("0x" + "f" * 4000).encode(), "2:14", LONG),
    "date": (with_description("2024-02-30").encode(), "2:14", ["'2024-02-30' is not a date"]),
    "tagged": (with_description("!!bool maybe").encode(), "2:14", ["'maybe' is not a boolean"]),
}


@pytest.mark.parametrize("case", CASES)
def test_text_yaml_cannot_hold_is_one_located_problem(tmp_path: Path, case: str) -> None:
    content, where, words = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as caught:
        load_graph(path)
    (problem,) = caught.value.problems
    assert str(problem.location) == f"{path}:{where}"
    assert all(word in problem.message for word in words), problem.message


@pytest.mark.parametrize("case", ["control", "escape", "latin-1", "long integer", "date"])
def test_the_cli_names_file_and_line_without_a_traceback(tmp_path: Path, case: str) -> None:
    content, where, _ = CASES[case]
    (tmp_path / "bad.yaml").write_bytes(content)
    for command in (["check"], ["run", "--store", "memory://"]):
        done = subprocess.run(
            cli_argv(*command[:1], "bad.yaml", *command[1:]),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        shown = done.stdout + done.stderr
        assert "Traceback" not in shown
        assert f"bad.yaml:{where}:" in shown
        assert done.returncode == (1 if command == ["check"] else 2), shown


def test_a_key_too_long_to_read_is_located_once() -> None:
    # A key of more than 1024 characters is written after "? " (a plain key is shorter).
    text = "nodes: []\n? " + "9" * 5000 + "\n: x\n"
    with pytest.raises(SpecError) as caught:
        load_graph_text(text, name="graph_yaml")
    (problem,) = caught.value.problems
    assert str(problem).startswith("graph_yaml:2:3: this integer has more than 4300 digits")


def test_a_lone_surrogate_in_text_is_located() -> None:
    with pytest.raises(SpecError) as caught:
        load_graph_text("nodes: []\nx: a\ud800b\n", name="graph_yaml")
    (problem,) = caught.value.problems
    assert str(problem) == (
        "graph_yaml:2:5: character U+D800 is a lone UTF-16 surrogate, not a character: remove it"
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.integers(0, len(HELLO)),
    st.integers(0, 12),
    st.text(max_size=8) | st.sampled_from(['"\\ud800"', '"\\U0000dc00"', "\x85", "\ufeff"]),
)
def test_any_edit_of_a_graph_loads_or_is_refused_as_a_spec_error(
    at: int, cut: int, inserted: str
) -> None:
    text = HELLO[:at] + inserted + HELLO[at + cut :]
    try:
        load_graph_text(text, name="graph_yaml", limits=YamlLimits(max_aliases=0))
    except SpecError as exc:
        problems = exc.problems
    else:
        return
    assert problems
