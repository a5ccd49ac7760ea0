"""The package root: public names imported on first use, and one version number."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib

import pytest

import phasegraph
from builders import REPO

HEAVY = ("aiohttp", "jsonschema", "msgpack", "networkx", "pydantic", "redis", "rich", "yaml")


def _fresh(code: str) -> set[str]:
    """The words ``code`` prints when run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    return _fresh(f"{code}\nimport sys\nprint(*sys.modules)")


def test_version_is_pyprojects() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert phasegraph.__version__ == project["version"]


@pytest.mark.parametrize(
    "code", ["import phasegraph", "import phasegraph.errors", "import phasegraph.store"]
)
def test_light_entry_points_import_no_heavy_library(code: str) -> None:
    modules = _modules_after(code)
    assert [name for name in HEAVY if name in modules] == []
    assert "phasegraph.api" not in modules


def test_a_public_name_imports_its_module_on_first_use() -> None:
    before = _modules_after("import phasegraph")
    after = _modules_after("import phasegraph\nphasegraph.Engine")
    assert "phasegraph.api" not in before
    assert "phasegraph.api" in after


@pytest.mark.parametrize("name", sorted(set(phasegraph.__all__) - {"__version__"}))
def test_each_public_name_is_its_defining_modules_object(name: str) -> None:
    value = getattr(phasegraph, name)
    source = importlib.import_module(phasegraph._SOURCES[name])
    assert value is getattr(source, name)


def test_unknown_names_raise_and_subpackages_still_import() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = phasegraph.no_such_name  # type: ignore[attr-defined]
    from phasegraph import codec

    assert codec is importlib.import_module("phasegraph.codec")


def test_dir_lists_every_public_name_before_its_first_use() -> None:
    listed = _fresh("import phasegraph\nprint(*dir(phasegraph))")
    assert set(phasegraph.__all__) <= listed
