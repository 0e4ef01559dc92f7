"""The single source of the package version (read by setuptools and by ``arena.__version__``)."""

from __future__ import annotations

__all__ = ["__version__", "active_hit_path"]

__version__ = "0.1.0"


def active_hit_path() -> str:
    """Name the request hit path in use: ``"python"`` or ``"compiled"``.

    The hit path serves a request seen before (one lookup and one generated call). Only
    the pure-Python one ships today, so this returns ``"python"``; a compiled hit path,
    when one is installed and chosen, will be reported as ``"compiled"``. Printed by
    ``python -m arena --version``.

    Returns
    -------
    str
        ``"python"`` or ``"compiled"``.
    """
    return "python"
