"""Hostile checks of the arena's bound default-front methods (core.py binds the default
front's ``get_simultaneous``/``try_get_simultaneous`` on the instance once made)."""

from __future__ import annotations

import gc
import inspect
import threading
import weakref

from arena import Arena
from arena.memory.sources import HostSource


def test_a_subclass_overriding_only_try_get_simultaneous_keeps_it() -> None:
    """The binding must look at each method on its own: a subclass that overrides only
    ``try_get_simultaneous`` (or only ``get_simultaneous``) keeps its override after the
    first request made the default front."""

    class OnlyTry(Arena):
        def try_get_simultaneous(self, *specs: tuple[object, object]) -> list[object] | None:
            return ["mine"]

    class OnlyGet(Arena):
        def get_simultaneous(self, *specs: tuple[object, object]) -> list[object]:
            return ["mine", *super().get_simultaneous(*specs)]

    with OnlyTry("cpu", framework="numpy") as ws:
        assert ws.try_get_simultaneous(((4,), "float32")) == ["mine"]
        ws.get_simultaneous(((4,), "float32"))  # makes the default front
        assert ws.try_get_simultaneous(((4,), "float32")) == ["mine"]
        assert ws.get_simultaneous == ws.front("numpy").get_simultaneous
    with OnlyGet("cpu", framework="numpy") as other:
        assert other.get_simultaneous(((4,), "float32"))[0] == "mine"
        assert other.get_simultaneous(((4,), "float32"))[0] == "mine"
        assert other.try_get_simultaneous == other.front("numpy").try_get_simultaneous


class _Counting(HostSource):
    def __init__(self) -> None:
        self.live = 0

    def allocate(self, nbytes: int):  # type: ignore[no-untyped-def]
        self.live += 1
        return super().allocate(nbytes)

    def release(self, allocation) -> None:  # type: ignore[no-untyped-def]
        self.live -= 1


def test_an_arena_dropped_after_binding_is_collected_and_its_blocks_released() -> None:
    """The bound methods hold the front, not a new path back: an arena dropped without
    close() after serving through them is collected and every block goes back."""
    source = _Counting()
    ws = Arena("cpu", framework="numpy", source=source)
    ws.get_simultaneous(((1024,), "float32"))
    ws.try_get_simultaneous(((4096,), "float32"))
    assert source.live >= 1
    gone = weakref.ref(ws)
    del ws
    gc.collect()
    assert gone() is None
    assert source.live == 0


def test_two_threads_making_the_default_front_bind_the_one_it_keeps() -> None:
    """Threads racing the first request all end on the one default front, the one bound."""
    for _ in range(20):
        ws = Arena("cpu", framework="numpy")
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def first(ws: Arena = ws, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                ws.get_simultaneous(((8,), "float32"))
            except BaseException as exc:  # reported below
                errors.append(exc)  # noqa: B023 - read before the next round

        threads = [threading.Thread(target=first) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        front = ws.front("numpy")
        assert ws.get_simultaneous == front.get_simultaneous
        assert ws.try_get_simultaneous == front.try_get_simultaneous
        ws.close()


def test_the_bound_methods_keep_a_signature(hit_path: str) -> None:
    """``inspect.signature(ws.get_simultaneous)`` (help(), IDEs, notebooks) answered before
    the first request and raised ValueError after it on the compiled path: the bound
    method is the C one, which had no text signature."""
    with Arena("cpu", framework="numpy") as ws:
        before = str(inspect.signature(ws.get_simultaneous))
        ws.get_simultaneous(((4,), "float32"))
        for method in (ws.get_simultaneous, ws.try_get_simultaneous):
            parameters = list(inspect.signature(method).parameters.values())
            assert [(p.name, p.kind) for p in parameters] == [
                ("specs", inspect.Parameter.VAR_POSITIONAL)
            ], before
            assert method.__doc__
