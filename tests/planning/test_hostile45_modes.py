"""Hostile round 45 on the compiled step release and step rows (ea785ea: a torch step row
notes its tensor's ``data_ptr()``): under a torch function mode, ``data_ptr()`` runs the
mode's Python code, where a signal's handler can raise ``KeyboardInterrupt`` (``with
torch.device(...)``: is such a mode). The compiled path cleared every error of those
calls (the row's note, and the release's check of a view against its witness) and went
on, so the interrupt was lost and the program carried on as if Ctrl-C had not been
pressed; the pure-Python path lets it out. An ordinary error of those calls is still
cleared: the Python path makes the calls again and explains it."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from tests.sources import check_books

pytest.importorskip("torch")

F32 = "float32"


def _shot(at: int, error: type[BaseException] = KeyboardInterrupt) -> Any:
    """A torch function mode that raises ``error`` at its ``at``-th ``data_ptr()`` call
    (as a signal's handler would, inside the mode's own Python code; never for ``at``
    0), counting the calls in ``calls``."""
    from torch.overrides import TorchFunctionMode

    class Shot(TorchFunctionMode):
        calls = 0

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if getattr(func, "__name__", "") == "data_ptr":
                self.calls += 1
                if self.calls == at:
                    raise error(f"in data_ptr() call {at}")
            return func(*args, **(kwargs or {}))

    return Shot()


def _program(ws: Arena) -> None:
    """A step that releases two torch views and requests after them."""
    with ws.step("s") as st:
        (a,) = st.get_simultaneous(((64,), F32))
        (b,) = st.get_simultaneous(((32,), F32))
        st.release(a)
        st.release(b)
        st.get_simultaneous(((16,), F32))


def _calls(runs: int, locked: bool) -> int:
    """The data_ptr() calls a mode sees in the run after ``runs`` runs."""
    ws = Arena("cpu", framework="torch")
    for _ in range(runs):
        _program(ws)
    if locked:
        ws.lock()
    counter = _shot(0)
    with counter:
        _program(ws)
    ws.close()
    return int(counter.calls)


@pytest.mark.parametrize("locked", [False, True])
@pytest.mark.parametrize("runs", [1, 2, 3])
def test_an_interrupt_in_a_modes_data_ptr_comes_out(runs: int, locked: bool) -> None:
    """An interrupt at each data_ptr() call of a replay (the run that notes the rows, and
    replays that read them) comes out of the step, and the program runs again after."""
    calls = _calls(runs, locked)
    # a replay's release compares addresses (the run after one run plans at its entry,
    # and only the compiled path notes its rows there, by data_ptr() calls)
    assert calls > 0 or runs == 1
    for at in range(1, calls + 1):
        ws = Arena("cpu", framework="torch")
        for _ in range(runs):
            _program(ws)
        if locked:
            ws.lock()
        with pytest.raises(KeyboardInterrupt, match=f"call {at}"), _shot(at):
            _program(ws)
        _program(ws)  # no region left open, no key left running
        check_books(ws)
        ws.close()


@pytest.mark.parametrize("runs", [1, 2])
def test_an_ordinary_error_in_a_modes_data_ptr_is_the_pythons_to_explain(runs: int) -> None:
    """An Exception from the mode's data_ptr() in the compiled calls is cleared there and
    met again by the Python path's own call: it comes out as itself, or not at all where
    only the compiled path's extra call (the row's note) met it."""
    calls = _calls(runs, False)
    for at in range(1, calls + 1):
        ws = Arena("cpu", framework="torch")
        for _ in range(runs):
            _program(ws)
        try:
            with _shot(at, RuntimeError):
                _program(ws)
        except RuntimeError as error:
            assert f"call {at}" in str(error)
        _program(ws)
        check_books(ws)
        ws.close()
