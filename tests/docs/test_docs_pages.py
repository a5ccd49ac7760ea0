"""Every code block of the README and the site's pages runs as written, or says why not.

Each page is one session (``doc_kit``): a fresh folder where its commands, files and
programs run in order with the real ``phasegraph`` command. A page whose example stops
working, or a block nobody runs, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_kit import REPO, blocks, pages, run_page


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_the_pages_have_blocks_to_run() -> None:
    # The scan sees the tutorial's commands (a broken fence pattern would pass vacuously).
    tutorial = [b for p in pages() if "tutorial" in p.parts for b in blocks(p)]
    assert sum(b.fence == "sh" and b.marker != "illustration" for b in tutorial) >= 5
