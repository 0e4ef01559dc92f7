"""``python -m arena``'s dispatch and error lines, called in this process (``main(argv)``),
found by Round 12a of mutation testing (``scripts/mutation facade``, docs/testing.md):
tests/tools/test_cli.py runs the commands in new interpreters, where a mutation run's
mutants are not active. Each test names the mutants it kills."""

from __future__ import annotations

import io
import platform

import pytest

import arena
from arena.__main__ import USAGE, main, version_line
from arena.memory.devices import cuda_device_count
from arena.views import hit

no_gpu = pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is usable here")


def test_no_command_prints_the_usage_and_fails_help_succeeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``_dispatch`` #10, #12 (the exit codes of no command and of ``--help``)."""
    assert main([]) == 2
    assert capsys.readouterr().out == USAGE + "\n"
    assert main(["--help"]) == 0
    assert capsys.readouterr().out == USAGE + "\n"


def test_version_prints_the_line_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    """``_dispatch`` #19 (exit 1), ``main`` #1, #3 (the arguments given ignored: ``None``
    or the process's own), ``version_line`` #6 (the reason's path shown as ``None``)."""
    assert main(["--version"]) == 0
    path = "compiled" if hit.compiled is not None else f"python, {hit.WHY_PYTHON}"
    line = f"arena {arena.__version__} (hit path: {path}; Python {platform.python_version()})"
    assert capsys.readouterr().out == line + "\n"
    assert version_line() == line


def test_an_unknown_command_is_named_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """``_dispatch`` #40 (the line printed to stdout), ``main`` #11 (the second argument
    read: an IndexError for one)."""
    assert main(["nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"unknown command 'nope'\n\n{USAGE}\n"


@pytest.mark.parametrize("command", ["demo", "bench", "report"])
def test_each_command_gets_its_own_arguments(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``_dispatch`` #25 (``"DEMO"``: demo unknown), #30, #34 (``bench`` and ``report``
    given ``None``: argparse read the process's own arguments)."""
    with pytest.raises(SystemExit) as caught:
        main([command, "--help"])
    assert caught.value.code == 0
    assert f"python -m arena {command}" in capsys.readouterr().out


def test_a_closed_pipe_ends_quietly_with_success(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` #16 (exit 1 where the reader left)."""

    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", Gone())
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert main(["--help"]) == 0


@no_gpu
def test_a_missing_gpu_names_the_command_and_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` #6 (the command's name ``None``), #22, #28 (the ``--device`` hint left out
    or ``None``), #50 (the line printed to stdout)."""
    assert main(["demo", "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python -m arena demo: DeviceUnavailableError: ")
    assert captured.err.endswith(" (on the command line: --device cpu, or leave --device out)\n")


@no_gpu
def test_a_framework_that_cannot_view_the_host_names_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``main`` #41, #42 (the ``--framework`` hint looked for as ``--FRAMEWORK``, or given
    only where the flag is not)."""
    assert main(["demo", "--framework", "cupy", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m arena demo: ConfigError: framework='cupy' ")
    assert err.endswith(" (on the command line: --framework NAME, or leave --framework out)\n")
