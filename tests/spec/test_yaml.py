"""Tests for phasegraph.spec._yaml: data, marks, repeated keys, limits and refusals.

Most tests run on both event sources the reader takes: libyaml's (the one PyYAML's wheels
ship) and PyYAML's pure-Python parser (used where libyaml is missing). The data is
checked against ``yaml.safe_load``, PyYAML's reference reading.
"""

from __future__ import annotations

import datetime
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import REPO, TESTS
from phasegraph.spec import _yaml
from phasegraph.spec._yaml import YamlLimits, parse_text

SHIPPED = sorted(
    [*REPO.glob("states/*.yaml"), *REPO.glob("graphs/*.yaml"), *TESTS.glob("fixtures/**/*.yaml")]
)


@pytest.fixture(params=["libyaml", "python"])
def source(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Read with libyaml's events, then with PyYAML's pure-Python parser's."""
    if request.param == "python":
        monkeypatch.setattr(_yaml, "_LIBYAML_PARSER", None)
    return str(request.param)


class Read:
    """What the reader made of a text: data, 1-based marks, problems as text."""

    def __init__(self, text: str, limits: YamlLimits | None = None) -> None:
        doc, problems = parse_text(text, "doc", "graph", limits)
        self.problems = [str(problem) for problem in problems]
        self.data: Any = None if doc is None else doc.data
        marks = {} if doc is None else doc.node_marks
        keys = {} if doc is None else doc.key_marks
        self.nodes = {path: (line + 1, column + 1) for path, (line, column) in marks.items()}
        self.keys = {path: (line + 1, column + 1) for path, (line, column) in keys.items()}

    @property
    def problem(self) -> str:
        (only,) = self.problems
        return only


def refused(text: str, limits: YamlLimits | None = None) -> str:
    """The single problem of a refused text."""
    read = Read(text, limits)
    assert read.data is None, read.data
    return read.problem


# --------------------------------------------------------------------------- data and marks

NESTED = """\
graph: g
nodes:
  - id: a
    with:
      deep: {x: [1, {y: 2}]}
  - {id: b, needs: [a], n: 0x1F, t: 2026-01-01}
"""


def test_data_marks_and_key_marks_by_key_path(source: str) -> None:
    read = Read(NESTED)
    assert read.problems == []
    assert read.data == yaml.safe_load(NESTED)
    assert read.data["nodes"][1]["n"] == 31
    assert read.data["nodes"][1]["t"] == datetime.date(2026, 1, 1)
    assert read.nodes[()] == (1, 1)
    assert read.nodes[("nodes",)] == (3, 3)
    assert read.nodes[("nodes", 0)] == (3, 5)
    assert read.nodes[("nodes", 0, "with", "deep")] == (5, 13)
    assert read.nodes[("nodes", 0, "with", "deep", "x", 1)] == (5, 21)
    assert read.nodes[("nodes", 0, "with", "deep", "x", 1, "y")] == (5, 25)
    assert read.nodes[("nodes", 1, "needs", 0)] == (6, 21)
    assert read.keys[("nodes", 0, "with", "deep", "x", 1, "y")] == (5, 22)
    assert read.keys[("nodes", 1, "t")] == (6, 34)
    assert read.keys[("graph",)] == (1, 1)


def test_where_the_nodes_are_is_kept_out_of_the_collectors_walk(source: str) -> None:
    """Marks are ints in dicts of nothing else: reading a big graph gives a collection
    nothing more to walk, however the document nests, repeats or shares its values."""
    text = NESTED + "shared: [&a {k: [1]}, *a, {<<: *a, j: 2}]\nrepeat: {x: [1]}\nrepeat: 2\n"
    doc, _ = parse_text(text, "doc", "graph")
    assert doc is not None
    assert len(doc.places) > 10
    assert not any(gc.is_tracked(places) for places in doc.places)
    assert Read(text).keys[("repeat",)] == (9, 1)  # the later key, as the data keeps


def test_problems_of_a_checked_spec_are_placed_at_the_deepest_known_key() -> None:
    doc, _ = parse_text(NESTED, "doc", "graph")
    assert doc is not None
    assert str(doc.place(("nodes", "1", "needs", "0"))) == "doc:6:21"
    assert str(doc.place(("nodes", 0, "with", "nowhere", "at", "all"))) == "doc:4:5"
    assert str(doc.place(("absent",))) == "doc:1:1"


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_and_fixture_file_reads_as_pyyaml_reads_it(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return  # a fixture of bytes that are not UTF-8
    read = Read(text)
    if read.data is None:  # refused: then PyYAML refuses it too, or it is not a mapping
        assert read.problems
        return
    assert read.data == yaml.safe_load(text)
    located = set(_paths(read.data))
    assert set(read.nodes) <= located
    if "*" not in text:  # the parts of an alias's value are located at its anchor only
        assert set(read.nodes) == located


def _paths(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, (*path, index))


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, width=32),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8),
    st.sampled_from(["yes", "no", "on", "~", "0o17", "1_000", "1:20", "2001-12-14", ".inf", "-"]),
)
KEYS = st.text("abxyz09_", min_size=1, max_size=4) | st.integers(0, 9)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


@settings(deadline=None)
@given(DOCS, st.booleans())
def test_generated_documents_read_as_pyyaml_reads_them(document: Any, flow: bool) -> None:
    text = yaml.safe_dump({"root": document}, default_flow_style=flow, allow_unicode=True)
    read = Read(text)
    assert read.problems == []
    assert read.data == yaml.safe_load(text)
    assert repr(read.data) == repr(yaml.safe_load(text))  # same types: 1, 1.0, True
    assert set(read.nodes) == set(_paths(read.data))  # every node is located...
    lines = text.splitlines()
    for path, (line, column) in read.keys.items():  # ...and every key where it is written
        written = lines[line - 1][column - 1 :].lstrip("'\"? ")
        assert written.startswith(str(path[-1]).lower()[:1] or "'"), (path, written)


@settings(deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["a: 1", "a: 2", "b:", "  - x", "  c: y", "- z", "d: [1, 2]", "e: &e {f: 1}", "g: *e"]
        ),
        max_size=6,
    )
)
def test_stitched_documents_read_as_pyyaml_or_are_refused_located(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    read = Read(text)
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        assert read.data is None
        assert read.problems[0].startswith("doc:")
        return
    if isinstance(expected, dict):
        assert read.data == expected
    else:
        assert read.data is None
        assert "a graph file is a mapping" in read.problems[-1]


# --------------------------------------------------------------------------- located errors


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a:\n  b:\n    c: [1, 2\n  d: 3\n", "4:4"),  # a flow list left open in a mapping
        ("a:\n  - b: 1\n    c: {x: 1 y: 2}\n", "3:15"),  # a flow mapping without a comma
        ("a:\n  - 1\n  - b: c: d\n", "3:9"),  # a mapping value where none may be
        ("a:\n  b: 'open\n", "3:1"),  # a quote never closed
        ("machine: bad\nstates: {a: [}\n", "2:14"),
    ],
)
def test_syntax_errors_in_nested_collections_are_located(
    source: str, text: str, where: str
) -> None:
    problem = refused(text)
    assert problem.startswith(f"doc:{where}: YAML syntax error: "), problem
    assert problem.endswith("; check indentation, quotes and brackets")


def test_libyaml_says_what_it_found_instead() -> None:
    problem = refused("a: {b: 1\n  c: 2\n")
    assert "did not find expected ',' or '}', but found ':'" in problem
    assert "found '<stream end>'" in refused("a: [\n")


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("a: 1\n---\nb: 2\n", "2:1", "expected a single document in the stream"),
        ("a: *nowhere\n", "1:4", "found undefined alias 'nowhere'"),
        ("a: &x 1\nb: &x 2\n", "2:4", "found duplicate anchor 'x' (first at line 1)"),
        ("a: !foo x\n", "1:4", "could not determine a constructor for the tag '!foo'"),
        ("a: !foo [x]\n", "1:4", "could not determine a constructor for the tag '!foo'"),
        ("a: =\n", "1:4", "could not determine a constructor for the tag"),
        ("a: !!str {b: 1}\n", "1:4", "expected a scalar node, but found mapping"),
        ("a: !!map x\n", "1:4", "expected a mapping node, but found scalar"),
        ("a: !!seq {b: 1}\n", "1:4", "expected a sequence node, but found mapping"),
        ("a: !!binary a\n", "1:4", "failed to decode base64 data"),
        ("a: !!omap [1]\n", "1:12", "expected a mapping of length 1, but found scalar"),
    ],
)
def test_documents_yaml_cannot_build_are_refused_located(
    source: str, text: str, where: str, words: str
) -> None:
    problem = refused(text)
    assert problem.startswith(f"doc:{where}: YAML syntax error: "), problem
    assert words in problem


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("? [a]\n: 1\n", "1:3"),  # a list as a key
        ("a:\n  ? {b: 1}\n  : 2\n", "2:5"),  # a mapping as a key, nested
        ("x: &x [1]\ny: {*x : 1}\n", "1:4"),  # an alias of a list as a key: where the list is
    ],
)
def test_collections_as_keys_are_refused_located(source: str, text: str, where: str) -> None:
    problem = refused(text)
    assert problem == (
        f"doc:{where}: YAML syntax error: found unhashable key while constructing a mapping; "
        "check indentation, quotes and brackets"
    )


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("a: '2024-02-30'\nb:\n  - 2024-02-30\n", "3:5", "'2024-02-30' is not a date (day is out"),
        ("a:\n  b: !!bool maybe\n", "2:6", "'maybe' is not a boolean"),
        ("a:\n  b: !!int x\n", "2:6", "'x' is not an integer"),
        ("a:\n  - " + "9" * 5000 + "\n", "2:5", "more than 4300 digits"),
        ("a:\n  - 0x" + "f" * 4000 + "\n", "2:5", "more than 4300 digits"),
        ('a: {"b\\ud800": 1}\n', "1:5", "the escape \\ud800 names half of a UTF-16 surrogate"),
        ('a:\n- "x \\U0000dc00"\n', "2:3", "the escape \\udc00 names half"),
        ('a: "\\ud83d\\ude00"\n', "1:4", "escape it as \\U0001F600"),
    ],
)
def test_values_yaml_cannot_hold_are_refused_located(
    source: str, text: str, where: str, words: str
) -> None:
    problem = refused(text)
    assert problem.startswith(f"doc:{where}: "), problem
    assert words in problem
    assert "YAML syntax error" not in problem


def test_every_value_that_cannot_be_read_is_reported_in_order(source: str) -> None:
    read = Read("a: 2024-13-01\nb: [ok, !!bool perhaps]\nc: !!float many\n")
    assert [problem.split(": ")[0] for problem in read.problems] == [
        "doc:1:4",
        "doc:2:9",
        "doc:3:4",
    ]


@pytest.mark.parametrize(
    ("data", "where", "words"),
    [
        (b"a: 1\nb: caf\xe9\n", "2:7", "byte 0xe9 here is not UTF-8"),
        ("a: 1\nb: x\udc80\n".encode("utf-8", "surrogatepass"), "2:5", "byte 0xed here"),
    ],
)
def test_files_that_are_not_utf8_are_refused_located(
    tmp_path: Path, data: bytes, where: str, words: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    doc, problems = _yaml.read_file(path, "graph")
    assert doc is None
    (problem,) = problems
    assert str(problem).startswith(f"{path}:{where}: a graph file is UTF-8 text")
    assert words in str(problem)


def test_characters_yaml_does_not_allow_are_refused_one_per_line() -> None:
    read = Read("a: x\udc80y\udc81\nb: \x07\nc: ok\n")
    assert read.data is None
    assert read.problems == [
        "doc:1:5: character U+DC80 is a lone UTF-16 surrogate, not a character: remove it",
        "doc:2:4: character U+0007 is a control character, which YAML does not allow in a "
        "file: remove it",
    ]


# --------------------------------------------------------------------------- repeated keys


def test_repeated_keys_are_located_at_the_repeat_and_the_last_value_is_kept(source: str) -> None:
    read = Read("a: 1\nb:\n  - {x: 1, y: 2, x: 3}\n  - c: 1\n    c: 2\na: 4\nd: {1: a, true: b}\n")
    assert read.data == {"a": 4, "b": [{"x": 3, "y": 2}, {"c": 2}], "d": {1: "b"}}
    assert read.problems == [
        "doc:3:18: duplicate key 'x': it would silently replace the earlier one; keep one",
        "doc:5:5: duplicate key 'c': it would silently replace the earlier one; keep one",
        "doc:6:1: duplicate key 'a': it would silently replace the earlier one; keep one",
        "doc:7:11: duplicate key True: it would silently replace the earlier one; keep one",
    ]
    assert read.keys[("b", 0, "x")] == (3, 18)  # the key that counts is the one located


# --------------------------------------------------------------------------- anchors and aliases


def test_an_alias_shares_the_anchored_value_located_where_it_is_written(source: str) -> None:
    text = "base: &base {x: [1, 2]}\nuses:\n  - *base\n  - *base\nalso: *base\n"
    read = Read(text)
    assert read.data == yaml.safe_load(text)
    assert read.data["uses"][0] is read.data["base"]  # shared, never copied
    assert read.nodes[("uses", 1)] == (1, 7)  # the anchored value's place
    assert read.keys[("also",)] == (5, 1)
    assert ("uses", 0, "x") not in read.nodes  # ...whose parts are located once, at the anchor


def _laughs(levels: int, width: int) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_the_first_alias_past_the_limit(source: str) -> None:
    # a0 is 11 values, a1 111, a2 1111: a2's aliases of a1 pass 1,000 together, a3's alone.
    problem = refused(_laughs(8, 10), YamlLimits(max_nodes=1000))
    assert problem.startswith("doc:4:10: YAML aliases expand this file to more than 1000 values")
    assert refused(_laughs(40, 2)).startswith("doc:")  # 2**40 values: refused, never walked


def test_a_document_of_aliases_within_the_limits_reads(source: str) -> None:
    text = _laughs(2, 10)
    read = Read(text, YamlLimits(max_nodes=1112 + 111 + 11 + 5))
    assert read.problems == []
    assert read.data == yaml.safe_load(text)


def test_aliases_nesting_past_the_limit_are_refused_at_the_deepest(source: str) -> None:
    text = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [[*a{i - 1}]]\n" for i in range(1, 6))
    problem = refused(text, YamlLimits(max_depth=8))
    assert problem.startswith("doc:6:11: YAML aliases nest this file deeper than 8 levels")
    assert Read(text, YamlLimits(max_depth=12)).problems == []


def test_an_alias_inside_the_collection_it_names_is_refused(source: str) -> None:
    problem = refused("a:\n  b: &loop\n    - 1\n    - {c: *loop}\n")
    assert problem.startswith("doc:4:11: alias *loop is inside the collection it names")


def test_aliases_past_the_count_are_refused_once_at_the_first(source: str) -> None:
    text = "x: &x 1\nmany: [" + ", ".join(["*x"] * 5) + "]\nmore: [*x]\n"
    problem = refused(text, YamlLimits(max_aliases=3))
    assert problem.startswith("doc:2:20: more than 3 YAML aliases (*name) in one file")


def test_no_aliases_allowed_reports_each_line_that_has_one(source: str) -> None:
    text = "x: &x {a: 1}\ny: [*x, *x]\nz: {<<: *x}\nw: *x\n"
    read = Read(text, YamlLimits(max_aliases=0))
    assert [problem.split(": ", 1)[0] for problem in read.problems] == [
        "doc:2:5",
        "doc:3:9",
        "doc:4:4",
    ]
    assert all("YAML aliases (*name) are not accepted here" in p for p in read.problems)


# --------------------------------------------------------------------------- nesting


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: " + "[" * 10 + "]" * 10 + "\n", "1:8"),  # flow: the 6th level
        ("".join("  " * i + f"k{i}:\n" for i in range(8)) + "  " * 8 + "v: 1\n", "6:11"),
        ("a:\n  - - - - {b: 1}\n", "2:11"),
    ],
)
def test_nesting_past_the_limit_is_refused_where_it_passes(
    source: str, text: str, where: str
) -> None:
    problem = refused(text, YamlLimits(max_depth=5))
    assert problem.startswith(f"doc:{where}: YAML collections nest deeper than 5 levels here")


def test_nesting_deeper_than_libyaml_looks_is_refused_too() -> None:
    # libyaml reads a flow collection far ahead, and stops at its own limit of 1,000.
    problem = refused("a: " + "[" * 5000 + "]" * 5000 + "\n", YamlLimits(max_depth=2000))
    assert problem.startswith("doc:1:")
    assert "YAML collections nest deeper than 2000 levels here" in problem


def test_nesting_up_to_the_limit_reads(source: str) -> None:
    read = Read("a: " + "[" * 4 + "]" * 4 + "\n", YamlLimits(max_depth=5))
    assert read.data == {"a": [[[[]]]]}


# --------------------------------------------------------------------------- merge keys and tags

MERGED = """\
base: &base {a: 1, b: 2}
more: &more {b: 3, c: 4}
one: {<<: *base, b: 20, d: 5}
list: {<<: [*base, *more]}
inline:
  <<: {x: 1, <<: {y: 2}}
  z: 3
"""


def test_merge_keys_merge_as_pyyaml_does(source: str) -> None:
    read = Read(MERGED)
    assert read.problems == []
    assert read.data == yaml.safe_load(MERGED)
    assert read.data["one"] == {"a": 1, "b": 20, "d": 5}  # a written key wins
    assert read.data["list"] == {"a": 1, "b": 2, "c": 4}  # then the earlier source
    assert read.data["inline"] == {"x": 1, "y": 2, "z": 3}
    assert list(read.data["one"]) == ["a", "b", "d"]


def test_merged_keys_are_not_repeats_and_merge_values_are_not_located(source: str) -> None:
    read = Read("base: &b {a: 1}\nuse:\n  <<: *b\n  a: 2\n  <<: {q: 1}\n")
    assert read.problems == []
    assert read.data["use"] == {"a": 2, "q": 1}
    assert ("use", "a") in read.keys
    assert ("use", "q") not in read.nodes  # placed at the key of the mapping that merged it
    doc, _ = parse_text("base: &b {a: 1}\nuse:\n  <<: *b\n  a: 2\n  <<: {q: 1}\n", "doc", "graph")
    assert doc is not None
    assert str(doc.place(("use", "q"))) == "doc:2:1"


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("a: {<<: 1}\n", "1:9", "expected a mapping or list of mappings for merging"),
        ("a: {<<: [{b: 1}, [2]]}\n", "1:18", "expected a mapping for merging, but found sequence"),
        ("a: <<\n", "1:4", "could not determine a constructor for the tag"),
    ],
)
def test_bad_merges_are_refused_located(source: str, text: str, where: str, words: str) -> None:
    problem = refused(text)
    assert problem.startswith(f"doc:{where}: YAML syntax error: "), problem
    assert words in problem


def test_explicit_tags_build_what_pyyaml_builds(source: str) -> None:
    text = (
        "s: !!str 12\ni: !!int '7'\nf: !!float 1\nn: ! 1\nb: !!binary aGk=\n"
        "set: !!set {x, y}\nomap: !!omap [p: 1, q: 2]\npairs: !!pairs [p: 1, p: 2]\n"
        "m: !!map {a: 1}\nq: !!seq [1]\nnested: [!!set {z}]\n<<: {merged: !!omap [k: v]}\n"
        "in: {<<: !!set {k}}\nlisted: {<<: [!!set {l}, !!map {m: 1}]}\n"
    )
    read = Read(text)
    assert read.problems == []
    assert read.data == yaml.safe_load(text)
    assert read.data["set"] == {"x", "y"}
    assert read.data["nested"] == [{"z"}]
    assert read.data["merged"] == [("k", "v")]
    assert read.data["in"] == {"k": None}  # a set merges its pairs, as PyYAML merges it
    assert read.data["listed"] == {"l": None, "m": 1}
