"""The request log names the user's own line for every kind of request, on both hit
paths, now that ``ws.get_simultaneous`` is the default front's own method (the compiled hit
reads the caller's frame itself)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from arena import Arena

F32 = "float32"


def _here() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _sites(ws: Arena) -> dict[int, int]:
    """Line of this file -> recorded peak, for the sites in this file."""
    out: dict[int, int] = {}
    for site, nbytes in ws.stats().call_sites.items():
        name, line, _ = site.split(":")
        assert name == "test_call_site_paths.py", site
        out[int(line)] = nbytes
    return out


@pytest.mark.parametrize("profiled", [False, True])
def test_each_kind_of_request_is_named_by_its_own_line(
    hit_path: str, profiled: bool, tmp_path: Path
) -> None:
    """With a profile the compiled hit leaves every note to Python; without, it names a
    known site itself."""
    profile = tmp_path / "p.json" if profiled else None
    with Arena("cpu", framework="numpy", profile=profile) as ws:
        lines: dict[str, int] = {}
        views: Any
        for _ in range(3):  # the first pass grows; later ones are hits
            lines["plain"] = _here() + 1
            ws.get_simultaneous(((100,), F32))
            lines["try"] = _here() + 1
            ws.try_get_simultaneous(((200,), F32))
            lines["front"] = _here() + 1
            ws.numpy.get_simultaneous(((300,), F32))
            with ws.scope():
                lines["scope"] = _here() + 1
                ws.get_simultaneous(((50,), F32))
            with ws.step("s"):
                lines["step"] = _here() + 1
                views = ws.get_simultaneous(((60,), F32))
        assert views[0].shape == (60,)
        sites = _sites(ws)
        assert set(lines.values()) <= set(sites), (lines, sites)
        assert sites[lines["plain"]] >= 400
        assert sites[lines["try"]] >= 800
        assert sites[lines["front"]] >= 1200
        # a hit from a new line after the earlier lines hit: named by its own line
        again = _here() + 1
        ws.get_simultaneous(((100,), F32))
        assert again in _sites(ws)
        with ws.locked():
            locked = _here() + 1
            ws.get_simultaneous(((100,), F32))
        assert locked not in _sites(ws)  # locked requests are not recorded
