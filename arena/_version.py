"""The single source of the package version (read by setuptools and by ``arena.__version__``)."""

from __future__ import annotations

__all__ = ["__version__", "active_hit_path"]

__version__ = "0.2.0"


def active_hit_path() -> str:
    """Name the request hit path new fronts use: ``"compiled"`` or ``"python"``.

    The hit path serves a request seen before (one lookup, an int check, fresh views):
    ``"compiled"`` where the optional C extension ``arena.views._hit`` was built at
    install and ``ARENA_PURE_PYTHON`` is not set, else ``"python"`` (see
    :mod:`arena.views.hit`). Printed by ``python -m arena --version``, with the reason
    when it is ``"python"``.

    Returns
    -------
    str
        ``"compiled"`` or ``"python"``.
    """
    from arena.views.hit import HIT_PATH

    return HIT_PATH
