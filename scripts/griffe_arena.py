"""Griffe extensions for the docs site (mkdocs.yml names them).

``AdaptersAsSubpackage``: pyproject.toml installs the top-level folder ``adapters/`` as
the subpackage ``arena.adapters`` (``package-dir``). Griffe reads packages from their
folders and finds no ``arena/adapters/``; this loads ``adapters/`` and attaches it to
``arena``, so that ``::: arena.adapters`` works in the API pages.

``SphinxRolesAsCode``: the docstrings cross-reference with Sphinx roles
(``:class:`~arena.Arena```), which Markdown would show as typed. They are shown as
inline code of the name a reader sees (``Arena``); the docstrings stay as they are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def _as_code(match: re.Match[str]) -> str:
    target = match[2]
    return f"`{target.rsplit('.', 1)[-1] if match[1] else target}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring as inline code."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        """Called by griffe for every object it loads."""
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_as_code, obj.docstring.value)


class AdaptersAsSubpackage(griffe.Extension):
    """Attach the ``adapters`` package to ``arena`` once ``arena`` is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        """Load ``adapters/`` with the same settings and make it ``arena.adapters``."""
        if pkg.name != "arena" or "adapters" in pkg.members:
            return
        adapters = griffe.load(
            "adapters",
            search_paths=[ROOT],
            try_relative_path=False,
            extensions=loader.extensions,
            docstring_parser=loader.docstring_parser,
            docstring_options=loader.docstring_options,
            modules_collection=loader.modules_collection,
            lines_collection=loader.lines_collection,
        )
        pkg.set_member("adapters", adapters)
        del loader.modules_collection.members["adapters"]


__all__ = ["AdaptersAsSubpackage", "SphinxRolesAsCode"]
