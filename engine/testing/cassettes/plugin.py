"""A pytest plugin that runs every ``*.cassette.yaml`` file as a test.

Enable it in a ``conftest.py``: ``pytest_plugins = ["phasegraph.testing.cassettes.plugin"]``.
Each cassette drives the graph it names (a built-in name, or a path relative to the
cassette) offline; a divergence fails the test with the report.
``PHASEGRAPH_LLM_BASE_URL`` is ignored while a cassette runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phasegraph.actions.llm._endpoint import BASE_URL_ENV
from phasegraph.testing.cassettes import CASSETTE_SUFFIX, CassetteReport, check_cassette

__all__ = ["CassetteFile", "CassetteItem", "pytest_collect_file"]


class _Diverged(Exception):
    def __init__(self, report: CassetteReport) -> None:
        super().__init__(report.text())
        self.report = report


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    """Collect ``*.cassette.yaml`` files."""
    if file_path.name.endswith(CASSETTE_SUFFIX):
        collected: CassetteFile = CassetteFile.from_parent(parent, path=file_path)
        return collected
    return None


class CassetteFile(pytest.File):
    """A cassette file: one test."""

    def collect(self) -> Iterator[pytest.Item]:
        """The one test of the file."""
        yield CassetteItem.from_parent(self, name=self.path.name)


class CassetteItem(pytest.Item):
    """Drives the cassette's graph against it."""

    def runtest(self) -> None:
        """Fail on a divergence."""
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv(BASE_URL_ENV, raising=False)
            report = check_cassette(self.path)
        if not report.passed:
            raise _Diverged(report)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """The report, not a traceback."""
        if isinstance(excinfo.value, _Diverged):
            return excinfo.value.report.text()
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where the test is."""
        return self.path, 0, f"cassette {self.name}"
