"""``python -m arena``'s dispatch, its misspelling hint and its error lines, called in this
process (``main(argv)``), found by Round 14c of mutation testing (``scripts/mutation
facade``, docs/testing.md): tests/tools/test_cli.py runs the commands in new interpreters,
where a mutation run's mutants are not active. Each test names the mutants it kills."""

from __future__ import annotations

import sys

import pytest

import arena.__main__ as cli
from arena.__main__ import USAGE, main, version_line


def test_plan_gets_its_own_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """``_dispatch`` #37 (``"PLAN"``: plan unknown) and #38 (``plan`` given ``None``:
    argparse read the process's own arguments)."""
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--help"])
    assert caught.value.code == 0
    assert "python -m arena plan" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("reprot", "report"), ("dmeo", "demo"), ("--hepl", "--help"), ("--verison", "--version")],
)
def test_a_misspelt_command_names_the_one_it_most_likely_meant(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``_dispatch`` #39, #52 (no hint), #48 (``--help`` looked for as ``XX--helpXX``),
    #54 (the second match read of a list of one: an IndexError)."""
    assert main([typed]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"unknown command {typed!r}; did you mean {meant!r}?\n\n{USAGE}\n"


def test_no_arguments_given_reads_the_process_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main`` #4 (``sys.argv[2:]``: the command itself skipped, the usage printed)."""
    monkeypatch.setattr(sys, "argv", ["python -m arena", "--version"])
    assert main() == 0
    assert capsys.readouterr().out == version_line() + "\n"


def test_an_import_error_outside_a_command_is_named_after_the_program(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main`` #13 (the program named ``XXpython -m arenaXX``) and #17 (``None`` printed
    for the error): ``--version`` where the hit path's module cannot be imported."""

    def missing() -> str:
        raise ImportError("No module named 'arena.views.hit' (stand-in)")

    monkeypatch.setattr(cli, "version_line", missing)
    assert main(["--version"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "python -m arena: No module named 'arena.views.hit' (stand-in)\n"
