"""Hostile profiles: wrong types, parser limits and shapes the report cannot show.

A profile that is mismatched, corrupt or unwritable warns (:class:`arena.ArenaWarning`,
with the reason) and is ignored; it never raises out of the arena. A file the arena cannot
read as a profile is left as it is (the rules: ``arena/profilefile.py``). ``python -m
arena report`` refuses an invalid profile with one line and exit status 2.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import arena
from arena.observe import profilefile
from arena.observe.profilefile import ProfileError, check_profile, read_profile
from arena.observe.report import main


def _valid(ubatches: int = 1, lanes: int = 1) -> dict[str, Any]:
    """A small valid profile for the numpy cpu arena's match key."""
    slots = [
        {"ubatch": u, "lane": lane, "peak": 400, "capacity": 512, "growths": 1}
        for u in range(ubatches)
        for lane in range(lanes)
    ]
    return {
        "format": "arena-profile",
        "version": 1,
        "device": "cpu",
        "ubatches": ubatches,
        "lanes": lanes,
        "alignment": 256,
        "growth": "exact",
        "runs": 1,
        "ranks": [0],
        "slots": slots,
        "sites": [
            {
                "site": "x.py:1:f",
                "ubatch": 0,
                "lane": 0,
                "peak": 400,
                "layouts": [{"total": 400, "padding": 0, "views": [[[100], "float32"]]}],
            }
        ],
        "timeline": [
            {
                "t": 0.5,
                "ubatch": 0,
                "lane": 0,
                "old": 0,
                "new": 512,
                "caller": "x.py:1:f",
                "kind": "grow",
            }
        ],
    }


def _variant(**changes: Any) -> dict[str, Any]:
    profile = copy.deepcopy(_valid())
    profile.update(changes)
    return profile


def _site(**changes: Any) -> dict[str, Any]:
    profile = _valid()
    profile["sites"][0].update(changes)
    return profile


#: Valid JSON that must fail check_profile: (profile, words the reason must contain).
INVALID: list[tuple[dict[str, Any], str]] = [
    (_variant(ranks=["0"]), "ranks"),
    (_variant(ranks=[[0]]), "ranks"),
    (_variant(ranks=[None]), "ranks"),
    (_variant(ranks=[True]), "ranks"),
    (_variant(ranks={"0": 0}), "ranks"),
    (_variant(runs=-1), "runs"),
    (
        _variant(slots=[{"ubatch": 0, "lane": 0, "peak": 10**400, "capacity": 1, "growths": 0}]),
        "2**63 - 1",
    ),
    (_variant(timeline=[{**_valid()["timeline"][0], "t": 10**400}]), "'t'"),
    (_variant(timeline=[{**_valid()["timeline"][0], "t": -1.0}]), "'t'"),
    (_variant(runs="1"), "runs"),
    (_variant(device=None), "device"),
    (_variant(growth=3), "growth"),
    (_variant(ubatches=0, slots=[]), "ubatches"),
    (_variant(lanes=0, slots=[]), "lanes"),
    (_variant(alignment=0), "alignment"),
    (_variant(sites={"x": 1}), "sites"),
    (_variant(timeline={"x": 1}), "timeline"),
    (_variant(timeline=[1]), "timeline"),
    (_variant(timeline=[{"ubatch": 0}]), "timeline"),
    (_variant(timeline=[{**_valid()["timeline"][0], "caller": 7}]), "caller"),
    (_variant(timeline=[{**_valid()["timeline"][0], "t": "soon"}]), "'t'"),
    (_variant(timeline=[{**_valid()["timeline"][0], "t": float("nan")}]), "'t'"),
    (_variant(timeline=[{**_valid()["timeline"][0], "ubatch": 3}]), "ubatch"),
    (_variant(timeline=[{**_valid()["timeline"][0], "new": -1}]), "new"),
    (_site(ubatch=3), "ubatch"),
    (_site(lane=1), "lane"),
    (_site(peak=1.5), "peak"),
    (_site(site=None), "site"),
    (_site(layouts=[{"total": 4, "padding": 0, "views": [[[-1], "float32"]]}]), "views"),
    (_site(layouts=[{"total": 4, "padding": 0, "views": [["x", "float32"]]}]), "views"),
    (_site(layouts=[{"total": 4, "padding": 0, "views": [[[1], 5]]}]), "views"),
    (_site(layouts=[{"total": 4, "padding": -2, "views": []}]), "padding"),
    (
        _valid(ubatches=2, lanes=2)
        | {
            "lanes": 2,
            "slots": [
                {"ubatch": u, "lane": 0, "peak": 1, "capacity": 1, "growths": 0}
                for u in range(2)
                for _ in range(2)
            ],
        },
        "slot #1",
    ),
    (_variant(slots=[{"ubatch": 0, "lane": 0, "peak": "1", "capacity": 1, "growths": 0}]), "peak"),
    (_variant(slots=[{"ubatch": 0, "lane": 0, "peak": 1, "capacity": 1}]), "growths"),
    (_variant(slots=[]), "slots"),
]


@pytest.mark.parametrize(("profile", "words"), INVALID)
def test_check_profile_rejects_wrong_types_and_values(profile: dict[str, Any], words: str) -> None:
    with pytest.raises(ProfileError, match=None) as caught:
        check_profile(profile)
    assert words in str(caught.value), str(caught.value)


def test_check_profile_accepts_the_valid_profile_and_a_real_one(tmp_path: Path) -> None:
    assert check_profile(_valid()) is not None
    assert check_profile(_valid(ubatches=2, lanes=3)) is not None
    path = tmp_path / "p.json"
    with arena.Arena("cpu", ubatches=2, lanes=2, framework="numpy", profile=path) as ws:
        with ws.ubatch(1):
            ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    assert read_profile(path)["runs"] == 1


@pytest.mark.parametrize("ranks", [["0"], [[0]], [None]])
def test_a_profile_with_bad_ranks_warns_and_lock_and_close_go_on(
    tmp_path: Path, ranks: list[Any]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_variant(ranks=ranks)))
    with pytest.warns(arena.ArenaWarning, match="ranks"):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    ws.get_simultaneous(((100,), "float32"))
    ws.lock()  # already warned at construction: the repaired file is saved quietly
    ws.close()
    profile = read_profile(path)
    assert profile["ranks"] == [0] and profile["runs"] == 2  # the bad ranks only are dropped


def test_an_unexpected_failure_while_merging_warns_instead_of_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.json"
    ws = arena.Arena("cpu", framework="numpy", profile=path)
    ws.get_simultaneous(((100,), "float32"))

    def broken(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        raise TypeError("'<' not supported between instances of 'str' and 'int'")

    path.write_text(json.dumps(_valid()))
    monkeypatch.setattr(profilefile, "merge_profiles", broken)
    with pytest.warns(arena.ArenaWarning, match="'<' not supported"):
        ws.lock()
    with pytest.warns(arena.ArenaWarning, match="cannot save the arena profile"):
        ws.close()


def test_the_exit_hook_does_not_raise_on_a_bad_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    code = (
        "import json, sys, warnings, arena\n"
        "from arena.observe import profilefile\n"
        "warnings.simplefilter('always')\n"
        "ws = arena.Arena('cpu', framework='numpy', profile=sys.argv[1])\n"
        "ws.get_simultaneous(((100,), 'float32'))\n"
        "def broken(old, new):\n"
        "    raise TypeError('boom from merge')\n"
        "profilefile.merge_profiles = broken\n"
        "open(sys.argv[1], 'w').write(sys.argv[2])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(_valid())],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "ArenaWarning" in result.stderr and "boom from merge" in result.stderr


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000, "nested"),
        ('{"format": "arena-profile", "runs": ' + "9" * 5000 + "}", "4300"),
        ("\ud800", "cannot read"),
    ],
)
def test_parser_limits_warn_and_are_ignored(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with pytest.raises(ProfileError, match=words):
        read_profile(path)
    with pytest.warns(arena.ArenaWarning, match=words):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    before = path.read_bytes()
    ws.get_simultaneous(((100,), "float32"))
    ws.close()
    assert path.read_bytes() == before  # not a profile: left as it is


def test_read_profile_turns_anything_unexpected_into_a_profile_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_valid()))

    def explode(data: Any) -> dict[str, Any]:
        raise KeyError("surprise")

    monkeypatch.setattr(profilefile, "check_profile", explode)
    with pytest.raises(ProfileError, match="surprise"):
        read_profile(path)


REPORT_CRASHES = [
    _site(ubatch=3),
    _valid(ubatches=1, lanes=2)
    | {
        "slots": [
            {"ubatch": 0, "lane": 0, "peak": 1, "capacity": 1, "growths": 0},
            {"ubatch": 0, "lane": 0, "peak": 1, "capacity": 1, "growths": 0},
        ]
    },
    _variant(ubatches=0, slots=[]),
    _variant(timeline=[1]),
    _variant(timeline=[{"ubatch": 0}]),
]


@pytest.mark.parametrize("profile", REPORT_CRASHES)
def test_report_refuses_an_invalid_profile_with_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: dict[str, Any]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    assert main([str(path)]) == 2
    assert main([str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2 and all("not a usable profile" in line for line in lines), lines


def test_report_cli_prints_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_variant(timeline=[{"ubatch": 0}])))
    result = subprocess.run(
        [sys.executable, "-m", "arena", "report", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "timeline" in result.stderr


def test_report_still_shows_a_valid_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_valid(ubatches=2, lanes=2)))
    assert main([str(path)]) == 0
    assert "u1 l1" in capsys.readouterr().out
