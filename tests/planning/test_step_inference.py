"""A replayed step under ``torch.inference_mode()`` is served by the replay's hit, as one
under ``no_grad`` is, with the same tensors (issue 32 item 1)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from arena import Arena  # noqa: E402
from arena.planning.steps import Step  # noqa: E402

Mode = Callable[[], AbstractContextManager[Any]]


def _decoder_layer(ws: Arena) -> list[Any]:
    """x lives across the step, h dies before z reuses its bytes."""
    with ws.torch.step("layer") as st:
        (x,) = st.get_simultaneous(((8, 64), torch.float32))
        h, g = st.get_simultaneous(((8, 256), torch.float32), ((8,), torch.int32))
        st.release(h)
        (z,) = st.get_simultaneous(((8, 64), torch.float32))
        return [x, h, g, z]


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the requests the replay's hit leaves to the checked path."""
    calls = [0]
    checked = Step._checked

    def counting(self: Step[Any], *args: Any) -> Any:
        calls[0] += 1
        return checked(self, *args)

    monkeypatch.setattr(Step, "_checked", counting)
    return calls


def _described(views: list[Any]) -> list[tuple[int, tuple[int, ...], tuple[int, ...], Any]]:
    return [(v.data_ptr(), tuple(v.shape), v.stride(), v.dtype) for v in views]


@pytest.mark.parametrize(
    "mode", [torch.inference_mode, torch.no_grad], ids=["inference", "no_grad"]
)
def test_a_replay_under_inference_mode_takes_the_hit(
    hit_path: str, mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counted(monkeypatch)
    with Arena("cpu", framework="torch") as ws:
        with mode():  # the whole warm-up in the mode, as an inference engine runs
            for _ in range(3):  # records, plans, replays (and remembers)
                _decoder_layer(ws)
        ws.lock()
        calls[0] = 0
        with mode():
            served = [_decoder_layer(ws) for _ in range(3)]
        assert calls[0] == 0  # every replayed request took the hit
        with torch.no_grad():
            reference = _decoder_layer(ws)
        for views in served:
            assert _described(views) == _described(reference)
            # Normal tensors whatever the mode: usable under autograd later.
            assert not any(v.is_inference() for v in views)


def test_inference_mode_replays_match_no_grad_replays_of_another_arena(hit_path: str) -> None:
    """The same pointers (relative to the slot) and shapes in either mode."""
    described = []
    for mode in (torch.inference_mode, torch.no_grad):
        with Arena("cpu", framework="torch") as ws:
            with mode():
                for _ in range(3):
                    _decoder_layer(ws)
            ws.lock()
            with mode():
                views = _decoder_layer(ws)
            origin = min(v.data_ptr() for v in views)
            described.append([(p - origin, s, st, d) for p, s, st, d in _described(views)])
    assert described[0] == described[1]
