"""Every code block of the README and the site's guides runs as written, or says why not.

Each page is one session (``doc_kit``): a fresh folder where its commands, files and
programs run in order with the real ``phasegraph`` command. A page whose example stops
working, or a block nobody runs, fails here. The tutorial's pages are in
``test_docs_tutorial.py`` (a file per worker: the two run side by side).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_kit import REPO, pages, run_page

PAGES = [page for page in pages() if "tutorial" not in page.parts]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)
