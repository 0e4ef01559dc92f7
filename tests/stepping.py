"""What the step tests share: a layer-like step whose views die in another order than
they were made."""

from __future__ import annotations

from typing import Any

import numpy as np

from arena import Arena

F32 = "float32"


def ptr(ws: Arena, view: Any) -> int:
    return ws.numpy.data_ptr(view)


def ptrs(*views: Any) -> list[int]:
    """The addresses of NumPy views."""
    return [int(v.ctypes.data) for v in views]


def layer(ws: Arena, tokens: int, key: str = "layer") -> list[int]:
    """x lives across the step; h dies after y is made; z reuses h's bytes."""
    with ws.step(key) as st:
        (x,) = st.get_simultaneous(((tokens, 64), F32))
        (h,) = st.get_simultaneous(((tokens, 256), F32))
        (y,) = st.get_simultaneous(((tokens, 64), F32))
        x[:] = 1
        y[:] = 2
        st.release(h)
        (z,) = st.get_simultaneous(((tokens, 64), F32))
        z[:] = 3
        assert np.all(x == 1) and np.all(y == 2)
        return [ptr(ws, v) for v in (x, h, y, z)]
