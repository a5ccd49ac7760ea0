"""The fast YAML reader gives exactly what the full loader gives, or leaves the document."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from builders import REPO, TESTS
from phasegraph.spec._fastyaml import read_fast
from phasegraph.spec._yaml import YamlLimits, _read_marked

SHIPPED = sorted(
    [*REPO.glob("states/*.yaml"), *REPO.glob("graphs/*.yaml"), *TESTS.glob("fixtures/**/*.yaml")]
)


def _places(marks: dict[tuple[Any, ...], yaml.Mark]) -> dict[tuple[Any, ...], tuple[int, int]]:
    return {path: (mark.line, mark.column) for path, mark in marks.items()}


def _agree(text: str) -> bool:
    """Assert the readers agree when the fast one reads; whether it read."""
    fast = read_fast(text, YamlLimits().max_depth)
    if fast is None:
        return False
    full = _read_marked(text, "doc", YamlLimits())
    assert not isinstance(full, list), full  # the fast reader never reads a refused file
    assert fast[0] == full[0]
    assert repr(fast[0]) == repr(full[0])  # same types too (1 vs 1.0 vs True)
    assert _places(fast[1]) == _places(full[1])
    assert _places(fast[2]) == _places(full[2])
    assert [(k, m.line, m.column) for k, m in fast[3]] == [
        (k, m.line, m.column) for k, m in full[3]
    ]
    return True


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_and_fixture_file_reads_the_same(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return
    if not _agree(text):
        # Only anchors and aliases, or a syntax error, send a file to the full loader.
        full = _read_marked(text, "doc", YamlLimits())
        assert isinstance(full, list) or re.search(r"[&*][A-Za-z_]", text), path


def test_the_common_graph_is_read_fast_and_the_rest_is_left() -> None:
    assert _agree(
        "graph: g\nnodes:\n  - {id: a, machine: task, needs: [], n: 0x1F, t: 2026-01-01}\n"
    )
    left = [
        "a: &x 1\nb: *x\n",  # anchors and aliases
        "a: !!str 1\n",  # explicit tags
        "a: {<<: {b: 1}}\n",  # merge keys
        "? [a]\n: 1\n",  # a collection as a key
        "a: 1\n---\nb: 2\n",  # two documents
        "a: [\n",  # a syntax error: the full loader words it
        "a: \x07\n",  # a character YAML does not print
        "a:" + " [" * 70 + " ]" * 70 + "\n",  # past the nesting limit
    ]
    assert [read_fast(text, YamlLimits().max_depth) for text in left] == [None] * len(left)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, width=32),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8),
    st.sampled_from(["yes", "no", "on", "~", "0o17", "1_000", "1:20", "2001-12-14", ".inf", "-"]),
)
DOCS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text("abxyz09_", min_size=1, max_size=4) | st.integers(0, 9), inner, max_size=4
        )
    ),
    max_leaves=25,
)


@given(DOCS, st.booleans())
def test_generated_documents_read_the_same(document: Any, flow: bool) -> None:
    text = yaml.safe_dump({"root": document}, default_flow_style=flow, allow_unicode=True)
    assert _agree(text)


@given(
    st.lists(
        st.sampled_from(["a: 1", "a: 2", "b:", "  - x", "  c: y", "- z", "d: [1, 2]"]), max_size=6
    )
)
def test_stitched_documents_agree_or_are_left(lines: list[str]) -> None:
    _agree("\n".join(lines) + "\n")
