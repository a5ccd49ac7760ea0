"""The reference pages of the docs site, each rendered from the source it documents.

Every renderer takes its source (a JSON Schema, machine definitions, tools, the argument
parser, the OpenAPI document, module names) and returns Markdown, so a test can hand it a
changed source and see the page follow. :data:`PAGES` renders each page from phasegraph's
own sources; ``docs/hooks/reference.py`` adds them to an MkDocs build. Nothing here
imports MkDocs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from refpages import cli_page, http_page, machines_page, python_page, tools_page, yaml_page

__all__ = ["PAGES"]

PAGES: Mapping[str, Callable[[], str]] = MappingProxyType(
    {
        "reference/yaml.md": yaml_page.page,
        "reference/machines.md": machines_page.page,
        "reference/tools.md": tools_page.page,
        "reference/cli.md": cli_page.page,
        "reference/http.md": http_page.page,
        "reference/python.md": python_page.page,
    }
)
"""Site path of each generated page -> what renders it from phasegraph's sources."""
