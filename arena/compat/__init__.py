"""Drop-in compatibility modules for other workspace managers' APIs."""

from __future__ import annotations

__all__: list[str] = []
