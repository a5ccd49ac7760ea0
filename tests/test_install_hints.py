"""Every install line the project prints or documents works as written.

phasegraph is on no package index: a line such as ``pip install 'phasegraph[otel]'`` fails
for every user. The messages name an extra's packages themselves (read from the
distribution's metadata, so they follow ``pyproject.toml``) and the checkout's
``pip install -e '.[EXTRA]'``; the docs say the same.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest
from packaging.requirements import Requirement

from builders import REPO
from phasegraph._extras import install_hint

EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "optional-dependencies"
]
FROM_AN_INDEX = re.compile(r"pip install[^\n`]*\bphasegraph\[")


@pytest.mark.parametrize("extra", ["otel", "auth", "mcp"])
def test_a_hint_names_the_extras_packages_as_pyproject_does(extra: str) -> None:
    hint = install_hint(extra)
    named = [Requirement(text) for text in re.findall(r"'([^']+)'", hint.partition("(")[0])]
    assert sorted(str(r) for r in named) == sorted(str(Requirement(r)) for r in EXTRAS[extra])
    # Each is what this environment installed from the same pyproject: the line works.
    for requirement in named:
        assert requirement.specifier.contains(importlib.metadata.version(requirement.name))
    assert hint.endswith(f"from a checkout: pip install -e '.[{extra}]')")


def test_the_test_hint_names_only_what_phasegraph_test_needs() -> None:
    hint = install_hint("test", "hypothesis", "pytest")
    assert hint.startswith("pip install 'hypothesis>=6.100' 'pytest>=8' (")


def test_no_doc_or_message_installs_phasegraph_from_an_index() -> None:
    places = [REPO / "README.md", *REPO.glob("docs/**/*.md"), *REPO.glob("engine/**/*.py")]
    places += [*REPO.glob("graphs/*"), *REPO.glob("states/*")]
    found = [
        f"{path.relative_to(REPO)}: {match[0]}"
        for path in places
        if path.is_file()
        for match in FROM_AN_INDEX.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []


def test_every_extra_the_docs_install_exists() -> None:
    places = [REPO / "README.md", REPO / "CONTRIBUTING.md", *REPO.glob("docs/**/*.md")]
    named = {
        extra
        for path in places
        for group in re.findall(r"(?:-e '\.|\.whl)\[([a-z,]+)\]'", path.read_text(encoding="utf-8"))
        for extra in group.split(",")
    }
    assert {"auth", "mcp", "otel", "docs", "test"} <= named
    assert named <= set(EXTRAS)


def test_the_wheel_the_docs_install_is_the_one_the_build_makes() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    places = [REPO / "README.md", *REPO.glob("docs/**/*.md")]
    wheels = {name for path in places for name in re.findall(r"[\w./-]+\.whl", path.read_text())}
    assert wheels == {f"dist/phasegraph-{version}-py3-none-any.whl"}
