"""An alignment above a page on the host: views' addresses, not only their offsets, are
multiples of it (the host source's blocks were page aligned, so half of an 8192-aligned
arena's views started at an odd multiple of 4096), on the NumPy source and the
fixed-address one; a host source object that aligns less is refused, naming its
alignment and the fix."""

from __future__ import annotations

import sys

import pytest

from arena import Arena, ConfigError, HostSource
from arena.memory.sources import HOST_ALIGNMENT, AlignedHostSource

SOURCES = ["host"] + (["virtual"] if sys.platform.startswith("linux") else [])


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("alignment", [8192, 1 << 16, 1 << 21])
def test_every_view_starts_at_a_multiple_of_the_alignment(source: str, alignment: int) -> None:
    with Arena("cpu", framework="numpy", alignment=alignment, source=source) as ws:
        front = ws.numpy
        addresses = []
        for size in (1, 5000, 70_000, 300_000, 2_000_000):  # grows (moves, on "host")
            views = ws.get_simultaneous(((size,), "uint8"), ((3,), "float32"), ((9,), "int8"))
            addresses += [front.data_ptr(v) for v in views]
        with ws.scope() as scope:
            addresses += [front.data_ptr(v) for v in scope.get_simultaneous(((7,), "int8"))]
        for _ in range(2):  # recorded, then planned
            with ws.step("s") as st:
                (x,) = st.get_simultaneous(((100,), "float32"))
                (y,) = st.get_simultaneous(((10,), "float32"))
                addresses += [front.data_ptr(x), front.data_ptr(y)]
        addresses.append(front.data_ptr(ws.get_persistent("p", (5,), "float32")))
        ws.lock()
        addresses += [front.data_ptr(v) for v in ws.get_simultaneous(((64,), "uint8"))]
        assert [a % alignment for a in addresses] == [0] * len(addresses)


def test_the_host_source_made_for_a_page_or_less_is_the_plain_one() -> None:
    with Arena("cpu", framework="numpy", alignment=HOST_ALIGNMENT, source="host") as ws:
        assert type(ws.source) is HostSource
    with Arena("cpu", framework="numpy", alignment=8192, source="host") as ws:
        assert isinstance(ws.source, AlignedHostSource) and ws.source.alignment == 8192


def test_a_host_source_object_aligning_less_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"alignment=8192 is more than HostSource\(\) aligns"):
        Arena("cpu", framework="numpy", alignment=8192, source=HostSource())
    with pytest.raises(ConfigError, match=r"Pass alignment <= 8192"):
        Arena("cpu", framework="numpy", alignment=16384, source=AlignedHostSource(8192))
    with Arena("cpu", framework="numpy", alignment=4096, source=HostSource()) as ws:
        (view,) = ws.get_simultaneous(((3,), "float32"))
        assert ws.numpy.data_ptr(view) % 4096 == 0
