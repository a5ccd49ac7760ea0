"""The MkDocs hook adds every reference page to a strict build (skipped without MkDocs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import refpages_kit

pytest.importorskip("mkdocs")

_CONFIG = """\
site_name: phasegraph reference check
docs_dir: docs
site_dir: site
theme: {{name: mkdocs}}
hooks: [{hook}]
markdown_extensions: [tables, toc]
validation:
  omitted_files: warn
  absolute_links: warn
  unrecognized_links: warn
  anchors: warn
nav:
  - index.md
  - reference/yaml.md
  - reference/machines.md
  - reference/tools.md
  - reference/cli.md
  - reference/http.md
  - reference/python.md
"""


def test_a_strict_build_renders_every_reference_page(tmp_path: Path) -> None:
    # A strict build fails on any warning: a page the nav names but the hook did not
    # add, a link to a heading that is not there.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# phasegraph\n\nSee the [machines](reference/machines.md#team_phase).\n", encoding="utf-8"
    )
    hook = refpages_kit.HOOKS / "reference.py"
    (tmp_path / "mkdocs.yml").write_text(_CONFIG.format(hook=hook), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site" / "reference"
    expected = {
        "yaml": "TransitionSpec",
        "machines": "team_phase",
        "tools": "run_command",
        "cli": "model-server",
        "http": "/runs/{run_id}/reply",
        "python": "phasegraph.store.base.Store",
    }
    for page, text in expected.items():
        html = (site / page / "index.html").read_text(encoding="utf-8")
        assert text in html, page
