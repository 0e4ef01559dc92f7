"""Library workspaces: uint8 buffers a kernel library holds across calls (FlashInfer's
``float_workspace_buffer``, a cuBLAS or CUTLASS workspace), one per key and slot.

:meth:`arena.Arena.get_library_workspace` returns the same view for the same key and
size; a larger size during warm-up grows the block (:mod:`arena.slots.workspaces`:
allocated, old contents copied, the old block retired or released) and calls ``on_grow``
with the new view, so the library can switch to it (for FlashInfer:
``wrapper.reset_workspace_buffer(new_view, int_workspace)``). After ``lock()`` a larger
size raises :class:`~arena.ArenaLockedError`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from arena.base.layout import (
    MAX_BYTES,
    compute_layout,
    int_not_bool,
    past_address_range,
    plain_int_fix,
    round_up,
    str_bytes_fix,
)
from arena.config import check_flag, load_adapter
from arena.errors import ConfigError, SpecError
from arena.slots.persistent import check_key, check_new_key
from arena.slots.slot import Slot
from arena.slots.table import SlotTable
from arena.slots.workspaces import LIBRARY, Workspace, WorkspaceStore

__all__ = ["LibraryWorkspaces", "OnGrow", "check_nbytes"]

#: ``on_grow``: called with the new view after a library workspace grows, or None.
OnGrow = Callable[[Any], Any] | None


class LibraryWorkspaces:
    """Hands out an arena's library workspaces in its default framework.

    Parameters
    ----------
    table : SlotTable
        The arena's slots.
    select : callable
        Returns the calling thread's slot.
    framework : str
        The framework of the views (the arena's default).
    inference : bool, optional
        torch inference tensors (an arena made with ``inference_views=True``).
    """

    __slots__ = ("_adapter", "_framework", "_inference", "_select", "_table")

    def __init__(
        self,
        table: SlotTable,
        select: Callable[[], Slot],
        framework: str,
        inference: bool = False,
    ) -> None:
        self._table = table
        self._select = select
        self._framework = framework
        self._inference = inference
        self._adapter: ModuleType | None = None

    def get(
        self,
        key: Any,
        nbytes: int,
        on_grow: OnGrow,
        zero_init: bool = False,
    ) -> Any:
        """The view of library workspace ``key`` for the caller's slot, of at least
        ``nbytes``: :meth:`arena.Arena.get_library_workspace`.

        * The same key and size return the same memory. A larger ``nbytes`` while unlocked
          allocates a larger block, copies the old contents into it (without
          ``zero_init``), installs it, and calls ``on_grow(new_view)``. An ``on_grow`` that
          raises is called again, with the current view, at the next call for the key
          until it returns (the library still holds the old block meanwhile; views keep
          their memory alive). An ``on_grow`` that asks for the key again (and grows it
          again) gets the newest view, and so does the call that ran it.
        * ``zero_init=True``: the bytes are zero on first use and after every growth
          (nothing is copied then), also in the workspaces ``lock()`` makes for sibling
          micro-batches, and in one made without ``zero_init`` that no call has handed
          out yet (a sibling's, a profile's): FlashInfer's float workspace must be zero
          at its first use. A workspace already handed out keeps its contents.
        * Keys must be hashable and equal to themselves (a NaN is refused).
        """
        check_key(key, "library workspace key")
        check_nbytes("nbytes", nbytes)
        if on_grow is not None and not callable(on_grow):
            raise ConfigError(f"on_grow must be callable with the new view, got {on_grow!r}")
        check_flag("zero_init", zero_init)
        governor = self._table.governor
        governor.check_awake(f"library workspace {key!r}")
        size = round_up(max(nbytes, governor.alignment), governor.alignment)
        if size > MAX_BYTES:  # not an allocation that failed: no buffer can hold it
            raise past_address_range(
                f"library workspace {key!r} of {nbytes} bytes rounds up to",
                size,
                f"ask for at most {MAX_BYTES & -governor.alignment} bytes (the limit rounded "
                f"down to the arena's alignment, {governor.alignment})",
            )
        slot = self._select()
        store = slot.store(WorkspaceStore)
        grown: tuple[Workspace, Workspace | None] | None = None
        while True:  # another thread grew it between serving and marking: serve again
            entry = store.library.get(key)
            if entry is None:
                check_new_key(key, "library workspace key")
            if entry is None or entry.nbytes < nbytes:
                entry, old, grew = store.grow(
                    LIBRARY, key, nbytes, size, copy=True, zero_init=zero_init
                )
                if grew:
                    grown = (entry, old)
            if on_grow is not None:
                entry.on_grow = on_grow
            if not entry.handed or (zero_init and not entry.zero_init):
                store.hand_out(entry, zero_init)
            probe = governor.capture_probe
            if probe is None or not probe() or store.mark_captured(entry):
                break
        view = self._view(entry)
        if grown is not None and grown[0] is entry:
            old = grown[1]
            before = 0 if old is None else old.nbytes
            self._table.announce_block(
                slot, "workspace", entry.describe(), old=before, new=entry.nbytes, key=key
            )
        if entry.untold and store.claim_untold(entry):
            try:
                callback = entry.on_grow
                assert callback is not None  # claim_untold checked it
                callback(view)
            except BaseException:
                store.owe(entry)  # the library still holds the old block: tell it again
                raise
            if store.library.get(key) is not entry:  # on_grow asked again and it grew
                return self.get(key, nbytes, None, zero_init)
        return view

    def _view(self, entry: Workspace) -> Any:
        """The entry's view in the arena's framework, made once (again for a JAX array
        deleted by donation)."""
        adapter = self._adapter
        if adapter is None:
            device = self._table.governor.device
            adapter = self._adapter = load_adapter(self._framework, device, self._inference)
        view = entry.views.get(self._framework)
        if view is None or adapter.fresh_views((view,)) is None:
            layout = compute_layout((((entry.nbytes,), "uint8"),), self._table.governor.alignment)
            view = adapter.typed_views(adapter.wrap(entry.allocation), layout)[0]
            entry.views[self._framework] = view
        return view


def check_nbytes(name: str, nbytes: Any) -> int:
    """``nbytes`` if it is an int from 1 to 2**63 - 1.

    Raises
    ------
    SpecError
        Naming ``name`` and the value.
    """
    if not int_not_bool(nbytes) or not 1 <= nbytes <= MAX_BYTES:
        raise SpecError(
            f"{name} must be an int from 1 to {MAX_BYTES} bytes, got {type(nbytes).__name__} "
            f"{nbytes!r}{plain_int_fix(nbytes)}{str_bytes_fix(nbytes)}"
        )
    return nbytes
