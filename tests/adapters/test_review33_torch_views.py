"""review33: every torch view handed out, a plan's as built too, is a tensor of its own
(``view.data``), never an autograd view of the buffer's alias: no version counter and no
history shared with another request's views, on any front."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from arena import Arena  # noqa: E402

F32 = torch.float32


def test_a_first_request_s_views_have_version_counters_of_their_own(hit_path: str) -> None:
    # The first request of a layout is handed its plan's views as built: as_strided views
    # of the alias shared its version counter, so writing one in place failed a backward
    # pass that had saved the other ("modified by an inplace operation"), where the same
    # request served by the hit later passed.
    with Arena("cpu", framework="torch") as ws:
        ws.reserve_bytes(1 << 20)  # no growth: the request is a plan's, not a growth's
        for run in range(3):
            x = torch.ones(4, requires_grad=True)
            a, b = ws.torch.get_simultaneous(((4,), F32), ((4,), F32))
            a.fill_(2.0)
            loss = (x * a).sum()  # mul saves a for backward
            b.fill_(3.0)  # other bytes
            loss.backward()
            assert x.grad is not None and x.grad.tolist() == [2.0] * 4, run


@pytest.mark.parametrize("writer", ["uncached", "cached"])
def test_a_write_with_grad_leaves_a_cached_front_s_other_views_clean(
    hit_path: str, writer: str
) -> None:
    # A cached front hands out the views it remembered, made of the buffer's alias. A
    # view written in place from a value that requires grad (an uncached front's first
    # request, or a cached front's view of another request) gave the alias that history,
    # and with it every remembered view: the cached front's next request of another layout
    # came out requiring grad with an AsStridedBackward, and its backward failed
    # ("Trying to backward through the graph a second time").
    with Arena("cpu", framework="torch") as ws:
        ws.reserve_bytes(1 << 20)
        cached = ws.front("torch", cached=True)
        for _ in range(3):
            cached.get_simultaneous(((100,), F32))
        ws.lock()
        front = cached if writer == "cached" else ws.torch
        x = torch.ones(50, requires_grad=True)
        (b,) = front.get_simultaneous(((50,), F32))  # a new layout: a plan's view
        b.copy_(x * 2)
        b.sum().backward()
        (a,) = cached.get_simultaneous(((100,), F32))  # another request, remembered
        assert not a.requires_grad and a.grad_fn is None
        weight = torch.ones(100, requires_grad=True)
        (a * weight).sum().backward()
        assert weight.grad is not None
