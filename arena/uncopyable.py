"""Objects that own live memory or a lock refuse to be copied or pickled, saying why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["REASON", "refuse_copies"]


#: Why: an arena, its fronts, scopes and steps stand for memory and locks of one process.
REASON = (
    "it stands for memory and locks that live in this process only (a copy would share "
    "or close them: an Arena's copy's close() would close the original); pass the object "
    "itself, or build a new Arena with the same arguments in the other process"
)


def refuse_copies(what: str, why: str = REASON) -> Callable[..., NoReturn]:
    """A method for ``__reduce_ex__``, ``__copy__`` and ``__deepcopy__`` that raises a
    ``TypeError`` naming ``what`` is copied and ``why`` it cannot be."""

    def refuse(self: Any, *args: Any) -> NoReturn:
        raise TypeError(f"{what} cannot be copied or pickled: {why}")

    return refuse
