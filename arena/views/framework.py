"""How one framework sees a slot buffer's bytes: one import of each buffer into the
framework (kept on the buffer), typed views at a layout's offsets, and the sources a
request structure's generated plan builds its views from."""

from __future__ import annotations

from typing import Any

from arena.base.layout import Layout, compute_layout
from arena.errors import GraphCaptureError
from arena.slots.governor import Governor
from arena.slots.slot import Buffer
from arena.views.plan import Plan

__all__ = ["FrameworkViews"]


class FrameworkViews:
    """One framework's views of an arena's buffers, through its adapter.

    Parameters
    ----------
    adapter : Adapter
        The framework's adapter (``arena.adapters.<name>.ADAPTER``).
    governor : Governor
        The arena's governor: its capture probe and empty allocation.
    """

    __slots__ = ("adapter", "governor", "name")

    def __init__(self, adapter: Any, governor: Governor) -> None:
        self.adapter = adapter
        self.governor = governor
        #: The adapter's key into a buffer's ``wrappers`` (``Adapter.space``: the
        #: framework's name, or torch's inference adapter's own).
        self.name: str = adapter.space

    def wrapper(self, buffer: Buffer) -> Any:
        """The framework's handle on the whole buffer: one import per buffer.

        Raises
        ------
        GraphCaptureError
            The first import of a buffer is asked for while a CUDA graph is captured.
        """
        wrapper = buffer.wrappers.get(self.name)
        if wrapper is None:
            allocation = buffer.allocation
            if allocation is None:
                # A slot that holds no memory serves only zero-byte requests.
                allocation = self.governor.empty_allocation()
            elif self.governor.capture_probe is not None and self.governor.capturing():
                raise GraphCaptureError(
                    f"the first {self.name} view of a {buffer.capacity}-byte slot buffer "
                    f"was requested while a CUDA graph is being captured; importing it into "
                    f"{self.name} may record work on another stream. Make the same request "
                    "once eagerly (warm-up) before capturing"
                )
            wrapper = buffer.wrappers[self.name] = self.adapter.wrap(allocation)
        return wrapper

    def typed(
        self, buffer: Buffer, layout: Layout | int, specs: Any = None, planner: Any = None
    ) -> list[Any]:
        """One view per entry of ``layout``, over ``buffer`` (bounds checked by the caller).

        ``layout`` may be the total alone of ``specs``, a plain request at offset 0: the
        front's compiled ``planner`` builds its views (``Planner.views``), or where it
        leaves them to Python, the adapter from the request's layout."""
        wrapper = self.wrapper(buffer)
        if not isinstance(layout, Layout):  # the total alone
            made = None if planner is None else planner.views(specs, wrapper, buffer.capacity)
            if made.__class__ is tuple:
                return made[1]  # type: ignore[no-any-return]
            layout = compute_layout(specs, self.governor.alignment)
        return self.adapter.typed_views(wrapper, layout)  # type: ignore[no-any-return]

    def build(self, plan: Plan, buffer: Buffer, specs: Any) -> Any:
        """``plan.build`` over ``buffer``'s plan sources: None for another structure, False
        for the general path; whatever it raises is an error (nothing is caught)."""
        sources = buffer.wrappers.get(plan.key)
        if sources is None:
            wrapper = self.wrapper(buffer)
            source = self.adapter.plan_source
            if source is None:  # every view is made from the buffer's handle itself
                sources = (wrapper,) * len(plan.natives)
            else:
                made = []
                for native in plan.natives:
                    made.append(source(wrapper, native))
                sources = tuple(made)
            buffer.wrappers[plan.key] = sources
        return plan.build(specs, buffer.capacity, sources)
