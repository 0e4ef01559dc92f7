"""``python -m arena {demo,bench,report,plan}``."""

from __future__ import annotations

import difflib
import platform
import sys

from arena.errors import ArenaError, ConfigError, DeviceUnavailableError

USAGE = """usage: python -m arena COMMAND [options]
       python -m arena --version

commands:
  demo    play an inference engine's workspace lifecycle and print what it measured
  bench   measure the locked hot path against framework allocation
  report  show a recorded profile as tables and a plot
  plan    re-plan the step plans stored in a profile (--time-limit SECONDS) and write them back

options:
  -h, --help  show this help and exit; COMMAND --help shows a command's options
  --version   print the arena version, the request hit path in use and Python's version
"""

#: The sub-commands.
COMMANDS = ("demo", "bench", "report", "plan")


def version_line() -> str:
    """``arena 0.2.0 (hit path: compiled; Python 3.11.7)``: what ``--version`` prints; a
    pure-Python hit path says why (``hit path: python, ARENA_PURE_PYTHON is set``)."""
    from arena.views.hit import WHY_PYTHON

    from ._version import __version__, active_hit_path

    path = active_hit_path()
    if path == "python" and WHY_PYTHON:
        path = f"python, {WHY_PYTHON}"
    return f"arena {__version__} (hit path: {path}; Python {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a sub-command; a missing framework or a closed pipe ends in one line."""
    args = sys.argv[1:] if argv is None else argv
    # Named as the command's own errors are (``python -m arena plan: ...``).
    where = f"python -m arena {args[0]}" if args and args[0] in COMMANDS else "python -m arena"
    try:
        return _dispatch(args)
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except ImportError as exc:  # FrameworkUnavailableError included
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
    except ArenaError as exc:  # a device, a framework or a setting this machine refuses
        # The library's advice is Python's (device='cpu'); give the flag beside it.
        flag = isinstance(exc, DeviceUnavailableError) and "device='cpu'" in str(exc)
        tail = " (on the command line: --device cpu, or leave --device out)" if flag else ""
        if isinstance(exc, ConfigError) and "framework='" in str(exc) and "--framework" in args:
            # framework='cupy' on a host arena: its advice names the keyword too.
            tail = " (on the command line: --framework NAME, or leave --framework out)"
        print(f"{where}: {type(exc).__name__}: {exc}{tail}", file=sys.stderr)
        return 2


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(version_line())
        return 0
    command, rest = args[0], args[1:]
    if command == "demo":
        from arena.tools.demo import main as demo_main

        return demo_main(rest)
    if command == "bench":
        from arena.tools.bench import main as bench_main

        return bench_main(rest)
    if command == "report":
        from arena.observe.report import main as report_main

        return report_main(rest)
    if command == "plan":
        from arena.tools.replan import main as plan_main

        return plan_main(rest)
    # A misspelt command gets the one it most likely meant (found by a new user).
    close = difflib.get_close_matches(command, (*COMMANDS, "--version", "--help"), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    print(f"unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
