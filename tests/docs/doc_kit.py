"""Run the code blocks of the README and the documentation site as a reader would.

A page is one session: its blocks run in order in one fresh folder, where the real
``phasegraph`` command is on ``PATH`` (and ``.venv/bin/phasegraph`` works, as the README
writes it) and the default store lives. What a block is for is said by its fence and by
an HTML comment on the line right above it (invisible on the rendered page):

- ``<!-- file: NAME -->``: the block is a file of the session, written under NAME; a
  graph or machine written so is checked with ``phasegraph check --strict``.
- ``<!-- exit: N -->``: the block's last command exits N (default 0; every other command
  must succeed).
- ``<!-- illustration -->``: not run (YAML is still parsed, Python still compiled).
- ``<!-- tested by PATH -->``: run by that test file instead (it must exist).

A page may also be run up to one of its headings (``run_page(..., until="## Heading")``),
for a test that takes over from there, as a reader would at that point of the page.

Otherwise ``sh``/``bash`` blocks run in ``bash -e``, ``console`` blocks run their ``$ ``
lines, ``python`` blocks run in the suite's interpreter, and ``yaml`` blocks must be
whole graphs or machines, checked with ``check --strict``. ``text`` and ``mermaid``
blocks are output, never run. Any other block must carry a marker.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Generated at build time by the reference hook, or generated from the docstrings.
NOT_HAND_WRITTEN = ("reference/", "hooks/", "api.md")
OUTPUT_FENCES = frozenset({"text", "mermaid"})
SHELL_FENCES = frozenset({"sh", "bash", "console"})

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*(file|exit|illustration|tested by)\s*:?\s*([^>]*?)\s*-->")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with what its marker says."""

    page: Path
    line: int
    fence: str
    text: str
    marker: str | None
    argument: str

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"


def shown(path: Path) -> str:
    """A path as a message names it: relative to the checkout when inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def pages() -> list[Path]:
    """The README, the files the site includes, and every hand-written page of the site."""
    found = [REPO / name for name in ("README.md", "CONTRIBUTING.md", "benchmarks/README.md")]
    for page in sorted(DOCS.rglob("*.md")):
        relative = page.relative_to(DOCS).as_posix()
        if not relative.startswith(NOT_HAND_WRITTEN):
            found.append(page)
    return found


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.fullmatch(before.strip())
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                fence=match.group(1),
                text=match.group(2),
                marker=marker.group(1) if marker else None,
                argument=marker.group(2) if marker else "",
            )
        )
    return found


def environment(folder: Path) -> dict[str, str]:
    """A reader's shell: the suite's phasegraph first on PATH, no endpoint or store set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PHASEGRAPH_CACHE_DIR"] = str(folder / ".cache")
    return env


def _definition_kind(text: str) -> str | None:
    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        return None
    if "nodes" in document:
        return "graph"
    if "states" in document or "machine" in document:
        return "machine"
    return None


class Session:
    """One page's folder, where its blocks run in order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = environment(folder)
        (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        self.definitions: list[str] = []

    def shell(self, script: str, block: Block, expected: int) -> None:
        done = subprocess.run(
            ["bash", "-e", "-c", script], cwd=self.folder, env=self.env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == expected, (
            f"{block.where}: exit {done.returncode}, expected {expected}\n"
            f"$ {script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )

    def check(self, names: list[str], where: str) -> None:
        """``phasegraph check --strict`` passes on these files."""
        if not names:
            return
        done = subprocess.run(
            [str(Path(sys.executable).parent / "phasegraph"), "check", "--strict", *names],
            cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{where}: check --strict\n{done.stdout}{done.stderr}"

    def run(self, block: Block) -> None:
        """Run, write or parse one block as its fence and marker say."""
        if block.marker == "tested by":
            assert (REPO / block.argument).is_file(), f"{block.where}: no {block.argument}"
        elif block.marker == "illustration":
            _parse(block)
        elif block.marker == "file":
            self._write(block)
        elif block.fence in OUTPUT_FENCES:
            pass
        elif block.fence in SHELL_FENCES:
            expected = int(block.argument) if block.marker == "exit" else 0
            self.shell(_script(block), block, expected)
        elif block.fence == "python":
            path = self.folder / f"_block_{block.line}.py"
            path.write_text(block.text, encoding="utf-8")
            self.shell(f"python {path.name}", block, 0)
        elif block.fence == "yaml" and _definition_kind(block.text):
            name = f"_block_{block.line}.yaml"
            (self.folder / name).write_text(block.text, encoding="utf-8")
            self.check([name], block.where)
        else:
            raise AssertionError(
                f"{block.where}: a ```{block.fence} block runs nowhere: give it a "
                "<!-- file: NAME -->, <!-- illustration --> or <!-- tested by PATH --> marker"
            )

    def _write(self, block: Block) -> None:
        path = self.folder / block.argument
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text, encoding="utf-8")
        _parse(block)
        if block.fence == "yaml" and _definition_kind(block.text):
            self.definitions.append(block.argument)


def _script(block: Block) -> str:
    if block.fence != "console":
        return block.text
    return "\n".join(line[2:] for line in block.text.splitlines() if line.startswith("$ "))


def _parse(block: Block) -> None:
    """What is not run is still well-formed."""
    if block.fence == "yaml":
        yaml.safe_load(block.text)
    elif block.fence == "json":
        json.loads(block.text)
    elif block.fence == "python":
        ast.parse(block.text)


def heading_line(page: Path, heading: str) -> int:
    """The line (1-based) of the page's one heading written exactly ``heading``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = [number for number, line in enumerate(lines, 1) if line.strip() == heading]
    assert len(found) == 1, f"{shown(page)}: {len(found)} lines read {heading!r}, expected 1"
    return found[0]


def run_page(page: Path, folder: Path, *, until: str | None = None) -> Session:
    """Run a page's blocks in one session, then check the definitions it wrote.

    With ``until`` (a heading, such as ``"## Answer the gate"``), only the blocks above
    that heading run; the session is returned for the test to go on from there.
    """
    last = heading_line(page, until) if until is not None else None
    session = Session(folder)
    for block in blocks(page):
        if last is not None and block.line > last:
            break
        session.run(block)
    session.check(session.definitions, shown(page))
    return session
