"""The site builds with no warning (``mkdocs build --strict``), every page in the nav.

The ``test`` extra installs MkDocs (the ``docs`` extra); CI also builds the site in a
step of its own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from doc_kit import DOCS, REPO, pages

pytest.importorskip("mkdocs", reason="the docs extra is not installed")


def _nav_pages(entries: list[object]) -> list[str]:
    found: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return found


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tutorial" / "agent" / "index.html").is_file()
    assert (tmp_path / "reference" / "python" / "index.html").is_file()


def test_every_hand_written_page_is_in_the_nav() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    nav = set(_nav_pages(config["nav"]))
    written = {p.relative_to(DOCS).as_posix() for p in pages() if p.is_relative_to(DOCS)}
    assert written - nav == set()


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names a Python function for the mermaid fence; the nav needs none of it."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda *_: None)
