"""Griffe extension for the docs site: show ``adapters/`` where it is installed, ``arena.adapters``.

pyproject.toml installs the top-level folder ``adapters/`` as the subpackage
``arena.adapters`` (``package-dir``). Griffe reads packages from their folders, so it finds
no ``arena/adapters/``; this extension loads ``adapters/`` and attaches it to ``arena``,
so that ``::: arena.adapters`` works in the API pages. mkdocs.yml names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent


class AdaptersAsSubpackage(griffe.Extension):
    """Attach the ``adapters`` package to ``arena`` once ``arena`` is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        """Load ``adapters/`` with the same docstring settings and make it ``arena.adapters``."""
        if pkg.name != "arena" or "adapters" in pkg.members:
            return
        adapters = griffe.load(
            "adapters",
            search_paths=[ROOT],
            try_relative_path=False,
            docstring_parser=loader.docstring_parser,
            docstring_options=loader.docstring_options,
            modules_collection=loader.modules_collection,
            lines_collection=loader.lines_collection,
        )
        pkg.set_member("adapters", adapters)
        del loader.modules_collection.members["adapters"]
