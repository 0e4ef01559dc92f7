"""The compiled hits make a torch request's fresh views (``t.data``, the torch adapter's
``fresh_view``) through the ``data`` attribute's getter itself (``data_of`` in
``arena/views/_hit.c``), found once per type and version tag. It must stay what
``t.data`` is: new tensor objects over the remembered bytes, and a ``data`` attribute
replaced on the class (a new version tag) is followed at once, on every hit (plain, step,
scope), as the Python path follows it.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from arena import Arena  # noqa: E402

SPEC = ((4, 16), torch.float32)


def _requests(ws: Arena) -> dict[str, Any]:
    front = ws.front("torch")
    out: dict[str, Any] = {"plain": front.get_simultaneous(SPEC)[0]}
    with front.step("data") as st:
        out["step"] = st.get_simultaneous(SPEC)[0]
    with front.scope() as s:
        out["scope"] = s.get_simultaneous(SPEC)[0]
    return out


def _warm(ws: Arena) -> None:
    ws.reserve_bytes(1 << 16)
    for _ in range(3):  # record, plan, replay (remembered)
        _requests(ws)
    ws.lock()
    for _ in range(3):  # the compiled hits from here
        _requests(ws)


def test_fresh_views_are_new_tensors_over_the_remembered_bytes(hit_path: str) -> None:
    with Arena("cpu", framework="torch") as ws:
        _warm(ws)
        first, second = _requests(ws), _requests(ws)
        for kind in ("plain", "step", "scope"):
            a, b = first[kind], second[kind]
            assert type(a) is torch.Tensor and a is not b, kind
            assert a.data_ptr() == b.data_ptr() and a.shape == (4, 16), kind
            assert not a.requires_grad and a._base is None, kind


def test_a_data_attribute_replaced_on_the_class_is_followed(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = torch._C.TensorBase.data

    def flat(tensor: Any) -> Any:
        return base.__get__(tensor).view(-1)  # a (64,) tensor over the same bytes

    with Arena("cpu", framework="torch") as ws:
        _warm(ws)
        monkeypatch.setattr(torch.Tensor, "data", property(flat), raising=False)
        for _ in range(2):
            views = _requests(ws)
            assert {kind: tuple(v.shape) for kind, v in views.items()} == {
                "plain": (64,),
                "step": (64,),
                "scope": (64,),
            }
        monkeypatch.undo()
        views = _requests(ws)
        assert {tuple(v.shape) for v in views.values()} == {(4, 16)}
