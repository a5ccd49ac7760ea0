"""The cassette file: YAML that reads back as it was written, and errors at file:line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import InputError, SpecError
from phasegraph.spec._yaml import dump_text, parse_text
from phasegraph.testing.cassettes import Cassette, Entry, read_cassette, write_cassette

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**18), max_value=10**18)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)))
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), _VALUES, max_size=5))
def test_what_is_written_reads_back_as_it_was(value: dict[str, Any]) -> None:
    document, problems = parse_text(dump_text(value), "x.yaml", "cassette")
    assert problems == []
    assert document is not None
    assert document.data == value


def test_text_of_several_lines_is_a_literal_block() -> None:
    text = dump_text({"file": "def total(values):\n    return sum(values)\n"})
    assert text == "file: |\n  def total(values):\n      return sum(values)\n"


def _cassette() -> Cassette:
    entry = Entry(
        at=3, node="n", hook="think", kind="llm", turn=1,
        request={"digest": "sha256:00", "prompt": "line one\nline two"},
        answer={"message": {"role": "assistant", "content": "ok"}},
        outcome={"trigger": "answer", "state": "done"},
    )  # fmt: skip
    tool = Entry(at=4, node="n", hook="act", kind="tool", turn=1, call=0,
                 request={"tool": "read_file", "arguments": {"path": "a"}},
                 answer={"result": {"text": "x"}})  # fmt: skip
    return Cassette(
        graph="g", source="g.yaml", graph_digest="d", run="r", input={"k": 1}, entries=(entry, tool)
    )


def test_a_cassette_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "a.cassette.yaml"
    write_cassette(_cassette(), path)
    read = read_cassette(path)
    assert replace(read, path=None, entries=()) == replace(_cassette(), entries=())
    assert [e.to_json() for e in read.entries] == [e.to_json() for e in _cassette().entries]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [e.line for e in read.entries] == [
        i + 1 for i, line in enumerate(lines) if line.startswith("- at:")
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("cassette: 1", "cassette: 2"),
            ":2:1: cassette version 2 is newer than this phasegraph reads",
        ),
        (("cassette: 1", "format: 1"), "not a phasegraph cassette (`cassette: 1` is missing)"),
        (("  kind: tool", "  kind: tools"), "entry 1: kind must be one of llm, tool, http"),
        (("  call: 0", "  call: 0\n  extra: 1"), "entry 1: unknown keys extra"),
        (("entries:", "entries: {}\nx:"), "`entries` must be a list of entries"),
    ],
)
def test_a_bad_cassette_is_refused_at_its_line(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = tmp_path / "bad.cassette.yaml"
    write_cassette(_cassette(), path)
    text = path.read_text(encoding="utf-8")
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1), encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        read_cassette(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{path}:")


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read the cassette .*: No such file"):
        read_cassette(tmp_path / "none.cassette.yaml")
