"""Puts the docs site's page renderers (``docs/hooks/refpages``) on the import path."""

from __future__ import annotations

import sys

from builders import REPO

HOOKS = REPO / "docs" / "hooks"
if str(HOOKS) not in sys.path:
    sys.path.insert(0, str(HOOKS))
