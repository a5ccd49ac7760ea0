"""What to install for an optional part: the pip command that works as written.

phasegraph is installed from a checkout or from a wheel built from one, never from a
package index, so asking pip for phasegraph with an extra by name would fail. The packages an extra
names can be installed anywhere, by their own names: the command lists them, read from
the installed distribution's own metadata (the ``[project.optional-dependencies]`` of
``pyproject.toml``), so it never drifts from them.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Final

__all__ = ["install_hint"]

_DISTRIBUTION: Final = "phasegraph"


def install_hint(extra: str, *names: str) -> str:
    """The command that installs the extra ``extra`` (only ``names`` among its packages).

    For example ``pip install 'PyJWT[crypto]<3,>=2.8' (the auth extra; from a checkout:
    pip install -e '.[auth]')``.
    """
    found = [r for r in _requirements(extra) if not names or _name(r) in names]
    from_checkout = f"pip install -e '.[{extra}]'"
    if not found:
        return f"{from_checkout} in a checkout of phasegraph"
    packages = " ".join(f"'{requirement}'" for requirement in found)
    return f"pip install {packages} (the {extra} extra; from a checkout: {from_checkout})"


def _requirements(extra: str) -> list[str]:
    """The requirements of ``extra``, without their markers (none when not installed)."""
    try:
        listed = importlib.metadata.requires(_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    found = []
    for line in listed:
        requirement, _, condition = line.partition(";")
        if marker.search(condition) and _name(requirement) != _DISTRIBUTION:
            found.append(requirement.strip())
    return found


def _name(requirement: str) -> str:
    """A requirement's project name, normalized (``PyJWT[crypto]>=2.8`` → ``pyjwt``)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    return re.sub(r"[-_.]+", "-", match[0]).lower() if match else ""
