"""The optional C extensions (the hit path, the exact search): one way to load them.

Each is built at install where a C compiler and Python's headers are found; without it,
or with ``ARENA_PURE_PYTHON`` set before arena is imported, arena runs its pure-Python
twin of the same algorithm, and says why.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from arena.environment import flag_from_env

__all__ = ["load_extension", "numpy_array_api"]


def load_extension(name: str) -> tuple[ModuleType | None, str]:
    """The compiled module ``name`` (``"arena.views._hit"``), or None and why not: the
    ``ARENA_PURE_PYTHON`` flag is set, or the extension was not built.

    Raises
    ------
    ConfigError
        ``ARENA_PURE_PYTHON`` is set to something that is not a yes/no value.
    """
    if flag_from_env("ARENA_PURE_PYTHON"):
        return None, "ARENA_PURE_PYTHON is set"
    try:
        module = importlib.import_module(name)
    except ImportError:  # not built (no compiler at install): the pure-Python twin
        return None, f"the extension {name} is not built"
    return module, ""


def numpy_array_api() -> Any:
    """NumPy's C-API table (the ``_ARRAY_API`` capsule the compiled paths make arrays
    through), or None where NumPy is not imported or keeps it elsewhere (the callers then
    run Python). NumPy 2 keeps it in ``numpy._core``, NumPy 1 in ``numpy.core``."""
    core = sys.modules.get("numpy._core._multiarray_umath") or sys.modules.get(
        "numpy.core._multiarray_umath"
    )
    return getattr(core, "_ARRAY_API", None)
