"""Which file an arena made without ``profile=`` records into when ``ARENA_PROFILE`` is set.

``ARENA_PROFILE=PATH`` is shared by every arena of the process (and by every process that
sets it), but a profile presizes only an arena of its own settings and name. So each arena
gets a file of its own, keyed by its settings and name:

* ``PATH`` itself, when it holds no profile yet (or is not a profile at all: the arena then
  warns and leaves it alone, as for ``profile=PATH``) or holds this arena's, and no other
  arena of this process records into it;
* else ``STEM.IDENT.SUFFIX`` beside it, ``IDENT`` naming the arena: its name (if any), the
  device kind, ubatches, lanes and alignment (``profile.engine.cuda-2x1-a256.json``), with
  ``-2``, ``-3``, ... for further arenas of the same key in one process.

A restarted engine's arenas find their own files again, in any order of construction.
``python -m arena report PATH`` lists the files beside ``PATH``.
"""

from __future__ import annotations

import re
import threading
import weakref
from pathlib import Path
from typing import Any

from arena.observe.profilefile import ProfileError, key_of, load_profile

__all__ = ["arena_ident", "claim_profile_path", "sibling_profiles"]

_CLAIMS: dict[str, weakref.ref[Any]] = {}
_LOCK = threading.Lock()


def arena_ident(key: tuple[Any, ...]) -> str:
    """``"engine.cuda-2x1-a256"``: the part of a profile's file name that names an arena
    of ``key`` (device kind, ubatches, lanes, alignment, name)."""
    device, ubatches, lanes, alignment, name = key
    settings = f"{device}-{ubatches}x{lanes}-a{alignment}"
    return settings if name is None else f"{name}.{settings}"


def _holds_another(path: Path, key: tuple[Any, ...]) -> bool:
    """Whether ``path`` holds a valid profile of another arena (anything unreadable is
    left to the recorder, which warns and never overwrites it)."""
    try:
        found = load_profile(path)
    except (ProfileError, OSError):
        return False
    return found is not None and key_of(found[0]) != key


def claim_profile_path(base: str, key: tuple[Any, ...], owner: Any) -> Path:
    """The file an arena of ``key`` records into for ``ARENA_PROFILE=base`` (see the
    module doc), claimed for ``owner`` (held weakly: the claim ends with it)."""
    root = Path(base)
    ident = arena_ident(key)
    with _LOCK:
        for number in range(1, 10_000):
            if number == 1:
                candidates = [root, root.with_name(f"{root.stem}.{ident}{root.suffix}")]
            else:
                candidates = [root.with_name(f"{root.stem}.{ident}-{number}{root.suffix}")]
            for path in candidates:
                claim = _CLAIMS.get(str(path))
                if claim is not None and claim() is not None:
                    continue  # another arena of this process records there
                if path == root and _holds_another(path, key):
                    continue
                _CLAIMS[str(path)] = weakref.ref(owner)
                return path
    raise RuntimeError(f"no free profile file name beside {base!r}")  # pragma: no cover


def sibling_profiles(base: str) -> list[Path]:
    """The per-arena profiles beside ``base`` (``STEM.*.SUFFIX``), sorted."""
    root = Path(base)
    pattern = re.compile(re.escape(root.stem) + r"\..+" + re.escape(root.suffix) + "$")
    try:
        return sorted(
            p for p in root.parent.iterdir() if pattern.match(p.name) and p.name != root.name
        )
    except OSError:
        return []
