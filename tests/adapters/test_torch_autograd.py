"""torch views work with and without autograd, whatever mode their first request ran in."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

torch = pytest.importorskip("torch")

from arena import Arena  # noqa: E402
from arena.compat.vllm import WorkspaceManager  # noqa: E402

SPECS = (((4, 3), "float32"), ((5,), "int32"))

Request = Callable[[], list["torch.Tensor"]]


@pytest.fixture(params=["uncached", "cached", "vllm"])
def request_views(request: pytest.FixtureRequest) -> Iterator[Request]:
    """The same two-view request through a plain front, a cached front and the vLLM drop-in."""
    if request.param == "vllm":
        manager = WorkspaceManager(torch.device("cpu"))
        torch_specs = (((4, 3), torch.float32), ((5,), torch.int32))
        yield lambda: manager.get_simultaneous(*torch_specs)
        manager.arena.close()
        return
    with Arena("cpu", framework="torch") as a:
        front = a.front("torch", cached=request.param == "cached")
        yield lambda: front.get_simultaneous(*SPECS)


def _backward_through(x: torch.Tensor) -> torch.Tensor:
    """Fill ``x``, use it in a graph that saves it for backward, return the weight's gradient."""
    x.copy_(torch.arange(12, dtype=torch.float32).reshape(4, 3))
    weight = torch.ones(4, 3, requires_grad=True)
    (x * weight).sum().backward()  # mul saves x for backward
    assert weight.grad is not None
    return weight.grad


def test_first_request_under_inference_mode_then_autograd(request_views: Request) -> None:
    with torch.inference_mode():
        x, n = request_views()
        x.fill_(1)
        n.fill_(2)
        assert not x.is_inference()
    x, n = request_views()
    assert not x.is_inference() and not n.is_inference()
    grad = _backward_through(x)
    assert torch.equal(grad, torch.arange(12, dtype=torch.float32).reshape(4, 3))
    n.add_(1)  # in-place outside inference mode is allowed on the later request's view
    with torch.inference_mode():  # and inference mode still works afterwards
        x, _ = request_views()
        assert float(x.sum()) == float(sum(range(12)))


def test_first_request_under_autograd_then_inference_mode(request_views: Request) -> None:
    (x, _) = request_views()
    _backward_through(x)
    with torch.inference_mode():
        (x, n) = request_views()
        n.fill_(3)
        assert float(x.sum()) == float(sum(range(12)))


def test_persistent_first_made_under_inference_mode_then_autograd() -> None:
    with Arena("cpu", framework="torch") as a:
        with torch.inference_mode():
            p = a.torch.get_persistent("table", (4, 3), "float32", zero_init=True)
        assert not p.is_inference()
        grad = _backward_through(a.torch.get_persistent("table", (4, 3), "float32"))
        assert torch.equal(grad, torch.arange(12, dtype=torch.float32).reshape(4, 3))
    manager = WorkspaceManager(torch.device("cpu"))
    with torch.inference_mode():
        q = manager.get_persistent("acc", (4, 3), torch.float32)
    assert not q.is_inference()
    _backward_through(manager.get_persistent("acc", (4, 3), torch.float32))
    manager.arena.close()


@pytest.mark.parametrize("cached", [False, True])
def test_views_first_built_in_inference_mode_work_under_autograd_later(cached: bool) -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", cached_views=cached) as a:
        a.get_simultaneous(((8,), torch.float32))  # sized: the next sizes take the plan
        with torch.inference_mode():
            a.get_simultaneous(((4,), torch.float32))
            a.get_simultaneous(((4,), torch.float32))  # remembered now
        (view,) = a.get_simultaneous(((4,), torch.float32))
        x = torch.ones(4, requires_grad=True)
        view.copy_(x * 2)  # an in-place write of an autograd value into the view
        view.sum().backward()
        assert x.grad is not None and x.grad.tolist() == [2.0] * 4


def _pair(views: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = views
    return a, b


def _saved_then_other_written(get: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Save one view for backward, write another (disjoint) view in place, backward."""
    a, b = get()
    a.fill_(1.0)
    weight = torch.ones(4, requires_grad=True)
    loss = (weight * a).sum()  # mul saves a for backward
    b.add_(1)  # other bytes: a is unchanged
    loss.backward()
    assert weight.grad is not None and weight.grad.tolist() == [1.0] * 4


@pytest.mark.parametrize("where", ["scope", "one request", "step"])
def test_writing_one_view_in_place_leaves_another_saved_for_backward_valid(
    hit_path: str, where: str
) -> None:
    """Every view handed out has a version counter of its own: writing one in place does
    not fail the backward pass of a graph that saved another, disjoint one (with
    ``detach()`` they shared the buffer's counter, and the second pass failed with "one of
    the variables needed for gradient computation has been modified by an inplace
    operation")."""
    spec = ((4,), torch.float32)
    with Arena("cpu", framework="torch") as ws:
        for run in range(4):  # the first requests, then locked: the hit
            if where == "scope":
                with ws.torch.scope() as s:
                    _saved_then_other_written(
                        lambda: (s.get_simultaneous(spec)[0], s.get_simultaneous(spec)[0])
                    )
            elif where == "step":
                with ws.torch.step("layer") as st:
                    _saved_then_other_written(
                        lambda: (st.get_simultaneous(spec)[0], st.get_simultaneous(spec)[0])
                    )
            else:
                _saved_then_other_written(lambda: _pair(ws.torch.get_simultaneous(spec, spec)))
            if run == 1:
                ws.lock()


@pytest.mark.parametrize("cached", [False, True])
def test_a_view_written_with_grad_leaves_no_history_to_later_requests(cached: bool) -> None:
    # A view made for new sizes is as_strided of the buffer's alias: writing it in place
    # from a value that requires grad gave the alias that history, and every later view
    # of new sizes came out requiring grad with a grad_fn (its backward then failed).
    x = torch.ones(8, requires_grad=True)
    with Arena("cpu", framework="torch") as a:
        front = a.front("torch", cached=cached)
        front.get_simultaneous(((8,), torch.float32))
        for n in (4, 5, 6, 7):  # each a new size (a cached front hands a size's views again)
            (view,) = front.get_simultaneous(((n,), torch.float32))
            assert not view.requires_grad and view.grad_fn is None, n
            view.copy_(x[:n] * 2)
            view.sum().backward()
        assert x.grad is not None
        assert x.grad.tolist() == [8.0] * 4 + [6.0, 4.0, 2.0, 0.0]
