"""A torch front of inference tensors (``ws.front("torch", inference=True)``,
``Arena(inference_views=True)``): every request kind hands out inference tensors, from
view sets of its own, with no per-request cost; ``ws.torch`` keeps its normal tensors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.refcounts import assert_counts_flat

torch = pytest.importorskip("torch")

from arena.adapters.torch import ADAPTER  # noqa: E402

from arena import Arena, ConfigError  # noqa: E402
from arena.views.builder import ViewBuilder  # noqa: E402

F32 = torch.float32
PAIR = (((8, 64), F32), ((8,), torch.int64))


@pytest.fixture
def misses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the requests no hit served (every miss, plain, step or scope, is one
    ViewBuilder.miss)."""
    calls = [0]
    miss = ViewBuilder.miss

    def counting(self: ViewBuilder, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return miss(self, *args, **kwargs)

    monkeypatch.setattr(ViewBuilder, "miss", counting)
    return calls


def _work(front: Any) -> Iterator[Any]:
    """A plain request (twice, so it is remembered), one of new sizes (a plan's), a step
    with a release and a scope: every view they hand out."""
    yield from front.get_simultaneous(*PAIR)
    yield from front.get_simultaneous(*PAIR)
    yield from front.get_simultaneous(((4, 32), F32), ((3,), torch.int64))
    with front.step("layer") as st:
        (x,) = st.get_simultaneous(((8, 64), F32))
        h, g = st.get_simultaneous(((8, 256), F32), ((8,), torch.int32))
        st.release(h)
        (z,) = st.get_simultaneous(((8, 64), F32))
        yield from (x, h, g, z)
    with front.scope() as scope:
        yield from scope.get_simultaneous(((8, 64), F32), ((2, 2), torch.float16))


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_every_request_kind_hands_out_inference_tensors(
    hit_path: str, cached: bool, misses: list[int]
) -> None:
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        front = ws.front("torch", cached=cached, inference=True)
        assert front.inference and "inference" in repr(front)
        for _ in range(3):  # records, plans, replays (and remembers)
            assert all(torch.is_inference(v) for v in _work(front))
        ws.lock()
        list(_work(front))  # a scope remembers its views from its first locked run
        misses[0] = 0
        for _ in range(3):
            views = list(_work(front))
            assert all(torch.is_inference(v) for v in views)
        assert misses[0] == 0  # hits, step replays and scope hits: no view built again
        # The default front over the same slot: normal tensors, from its own view sets.
        assert not ws.torch.inference
        (plain,) = ws.torch.get_simultaneous(((8, 64), F32))
        assert not torch.is_inference(plain)
        assert plain.data_ptr() == front.get_simultaneous(((8, 64), F32))[0].data_ptr()
        buffer = ws._table.slots[0].buffer
        assert buffer.wrappers["torch/inference"].base.is_inference()
        assert not buffer.wrappers["torch"].base.is_inference()
        own = "torch/inference/cached" if cached else "torch/inference"
        assert PAIR in buffer.prepared[own] and PAIR not in buffer.prepared.get("torch", {})


def test_growth_hands_out_inference_tensors_over_the_new_buffer(hit_path: str) -> None:
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        front = ws.front("torch", inference=True)
        for _ in range(2):
            front.get_simultaneous(*PAIR)
        small = ws._table.slots[0].buffer
        big = (((64, 1024), F32),)
        (grown,) = front.get_simultaneous(*big)
        assert ws._table.slots[0].buffer is not small  # the slot grew
        assert torch.is_inference(grown)
        for _ in range(2):  # remembered over the new buffer, a plan's sizes, a hit
            assert all(torch.is_inference(v) for v in front.get_simultaneous(*PAIR))
        (normal,) = ws.torch.get_simultaneous(*big)
        assert not torch.is_inference(normal) and normal.data_ptr() == grown.data_ptr()


def test_a_mode_mix_keeps_each_front_to_its_kind(hit_path: str) -> None:
    """Inference tensors in any mode from the inference front (never saved for backward;
    one handed out inside the mode is not written in place outside it: torch's errors;
    reading works); normal tensors from ws.torch in any mode, usable under autograd."""
    with Arena("cpu", framework="torch") as ws:
        front = ws.front("torch", inference=True)
        for mode in (torch.inference_mode, torch.no_grad, torch.enable_grad):
            with mode():
                for _ in range(3):  # a miss, a plan, a hit in each mode
                    a, b = front.get_simultaneous(*PAIR)
                    (n,) = ws.torch.get_simultaneous(((8, 64), F32))
                    assert torch.is_inference(a) and torch.is_inference(b)
                    assert not torch.is_inference(n)
        weight = torch.ones(8, 64, requires_grad=True)
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved"):
            (weight * a).sum()
        a, _ = front.get_simultaneous(*PAIR)
        a = front.write_into(a, torch.ones(8, 64))  # the arena's write works in any mode
        assert float(a.sum()) == 8 * 64  # reading works outside the mode
        with torch.inference_mode():
            (inside, _) = front.get_simultaneous(*PAIR)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            inside.add_(1)  # (torch checks after the kernel ran: the bytes may be written)
        inside = front.write_into(inside, torch.ones(8, 64))  # outside the mode too
        with torch.inference_mode():
            inside.add_(1)
        assert float(a.sum()) == 2 * 8 * 64  # the same bytes
        (n,) = ws.torch.get_simultaneous(((8, 64), F32))
        n.copy_(torch.full((8, 64), 3.0))
        (weight * n).sum().backward()  # a normal view is saved for backward
        assert weight.grad is not None and float(weight.grad.sum()) == 3 * 8 * 64


@pytest.mark.parametrize("first", ["default", "inference"])
def test_plans_keep_their_view_sources_apart(hit_path: str, first: str) -> None:
    """Both fronts build one structure's requests by its plan over one buffer: each from
    sources of its own kind, whichever came first."""
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        fronts = {"default": ws.torch, "inference": ws.front("torch", inference=True)}
        order = [first, *(name for name in fronts if name != first)]
        for sizes in (8, 6, 5):
            specs = (((sizes, 64), F32), ((sizes,), torch.int64))
            for name in order:
                views = fronts[name].get_simultaneous(*specs)
                assert [torch.is_inference(v) for v in views] == [name == "inference"] * 2


def test_inference_is_torch_only_and_a_flag() -> None:
    with Arena("cpu", framework="torch") as ws:
        with pytest.raises(ConfigError, match=r"inference=True is for torch fronts only"):
            ws.front("numpy", inference=True)
        with pytest.raises(ConfigError, match="inference"):
            ws.front("torch", inference="yes")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="tensorflow"):
            ws.front("tensorflow", inference=True)  # the unknown framework is named first
        assert not ws.front("numpy", inference=False).inference
        assert not ws.torch.inference and not ws.numpy.inference
    with pytest.raises(ConfigError, match="inference_views"):
        Arena("cpu", inference_views="true")  # type: ignore[arg-type]


def test_an_arena_of_inference_views() -> None:
    """inference_views=True: torch fronts and library workspaces of a torch arena hand out
    inference tensors; inference=False and other frameworks still get their own."""
    with Arena("cpu", framework="torch", inference_views=True) as ws, torch.inference_mode():
        assert ws.torch.inference and ws.front("torch", cached=True).inference
        assert all(torch.is_inference(v) for v in ws.get_simultaneous(*PAIR))
        assert torch.is_inference(ws.get_library_workspace("lib", 1024))
        assert not torch.is_inference(ws.front("torch", inference=False).get_simultaneous(*PAIR)[0])
        assert not ws.numpy.inference and ws.numpy.get_simultaneous(((4,), "float32"))
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        assert not torch.is_inference(ws.get_library_workspace("lib", 1024))


def test_persistent_buffers_per_kind() -> None:
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        front = ws.front("torch", inference=True)
        mine = front.get_persistent("kv", (4, 4), F32, zero_init=True)
        theirs = ws.torch.get_persistent("kv", (4, 4), F32)
        assert torch.is_inference(mine) and not torch.is_inference(theirs)
        assert mine.data_ptr() == theirs.data_ptr()
        assert front.get_persistent("kv", (4, 4), F32) is mine
        assert ws.torch.get_persistent("kv", (4, 4), F32) is theirs


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inf", "no_grad"])
def test_debug_mode_retires_and_poisoning_fills_inference_views(mode: Any) -> None:
    with Arena("cpu", framework="torch", debug=True, poison=True) as ws, mode():
        front = ws.front("torch", inference=True)
        with front.scope() as scope:
            (kept,) = scope.get_simultaneous(((4, 4), F32))
            assert torch.is_inference(kept) and bool(torch.isnan(kept).all())  # poisoned
        assert kept.numel() == 0  # retired at the scope's exit, outside the mode too
        with front.step("s") as st:
            (x,) = st.get_simultaneous(((4, 4), F32))
            st.release(x)
        assert x.numel() == 0
        with front.step("t") as st:
            with torch.inference_mode():
                (y,) = st.get_simultaneous(((4, 4), F32))
            with torch.inference_mode(False):
                st.release(y)  # handed out inside the mode, retired outside it
        assert y.numel() == 0


def test_compiled_hits_on_an_inference_front_keep_reference_counts_flat(hit_path: str) -> None:
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        front = ws.front("torch", inference=True)
        for _ in range(3):
            front.get_simultaneous(*PAIR)
        ws.lock()
        remembered = ws._table.slots[0].buffer.prepared["torch/inference"][PAIR]
        watched = (PAIR, PAIR[0], PAIR[0][0], *remembered.views)
        front.get_simultaneous(*PAIR)

        def gets() -> None:
            for _ in range(100_000):
                front.get_simultaneous(*PAIR)

        assert_counts_flat(watched, gets)


def test_a_plans_views_are_remembered_as_built_inside_the_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default front remembers a plan's views built inside inference mode by building
    normal ones again; the inference front keeps the ones the plan built (inference
    tensors already): no second build."""
    adapter = type(ADAPTER.for_inference())
    built = [0]
    typed = adapter.typed_views

    def counting(self: Any, *args: Any) -> Any:
        built[0] += 1
        return typed(self, *args)

    monkeypatch.setattr(adapter, "typed_views", counting)
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        front = ws.front("torch", inference=True)
        front.get_simultaneous(((64, 64), F32), ((64,), torch.int64))  # grows: built whole
        built[0] = 0
        for _ in range(3):  # a plan's, handed out as built, then remembered, then a hit
            views = front.get_simultaneous(*PAIR)
            assert all(torch.is_inference(v) for v in views)
        assert built[0] == 0
