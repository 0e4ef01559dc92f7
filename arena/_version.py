"""The single source of the package version (read by setuptools and by ``arena.__version__``)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
