"""The docs kit fails a page for the reasons it promises, and the README keeps CI's commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_kit import REPO, run_page


def _page(folder: Path, text: str) -> Path:
    page = folder / "page.md"
    page.write_text(text, encoding="utf-8")
    (folder / "session").mkdir()
    return page


def test_a_block_that_runs_nowhere_is_refused(tmp_path: Path) -> None:
    page = _page(tmp_path, "Text.\n\n```toml\nname = 'x'\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:3: a ```toml block runs nowhere"):
        run_page(page, tmp_path / "session")


def test_a_command_that_fails_fails_the_page_unless_its_exit_is_given(tmp_path: Path) -> None:
    text = "```sh\nphasegraph status no-such-run\n```\n"
    (tmp_path / "a").mkdir()
    with pytest.raises(AssertionError, match="exit 2, expected 0"):
        run_page(_page(tmp_path / "a", text), tmp_path / "a" / "session")
    (tmp_path / "b").mkdir()
    run_page(_page(tmp_path / "b", "<!-- exit: 2 -->\n" + text), tmp_path / "b" / "session")


def test_a_page_runs_up_to_a_heading_and_hands_its_session_over(tmp_path: Path) -> None:
    text = (
        "```sh\necho above > above.txt\n```\n\n## Later\n\n"
        "```sh\nphasegraph status no-such-run\n```\n"
    )
    page = _page(tmp_path, text)
    session = run_page(page, tmp_path / "session", until="## Later")
    assert session.folder == tmp_path / "session"
    assert (session.folder / "above.txt").read_text(encoding="utf-8") == "above\n"
    with pytest.raises(AssertionError, match=r"page.md: 0 lines read '## Sooner', expected 1"):
        run_page(page, tmp_path / "session", until="## Sooner")
    (tmp_path / "whole").mkdir()
    with pytest.raises(AssertionError, match="exit 2, expected 0"):  # the block below it
        run_page(page, tmp_path / "whole")


def test_a_written_graph_is_checked_strictly(tmp_path: Path) -> None:
    # A machine whose last transition is missing: check finds a guard gap.
    machine = (REPO / "docs" / "tutorial" / "first-graph.md").read_text(encoding="utf-8")
    block = machine.split("<!-- file: polish.yaml -->\n```yaml\n", 1)[1].split("```", 1)[0]
    broken = "\n".join(line for line in block.splitlines() if "unless" not in line)
    page = _page(tmp_path, f"<!-- file: polish.yaml -->\n```yaml\n{broken}\n```\n")
    with pytest.raises(AssertionError, match=r"refused by every guard"):
        run_page(page, tmp_path / "session")


def test_ci_runs_the_readme_set_up_commands_as_written() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    main_job = (
        "python3 -m venv .venv && .venv/bin/pip install -q -e . && "
        ".venv/bin/phasegraph run hello --input who=world"
    )
    tests = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest"
    for command in (main_job, tests):
        assert f"```sh\n{command}\n```" in readme
        assert command in ci
