"""Settings read from the environment: one parser for every ``ARENA_*`` flag and one for
every ``ARENA_*`` variable that names one of a few choices, both reading a value the same
way (without case and surrounding spaces)."""

from __future__ import annotations

import os

from arena.errors import ConfigError

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "choice_from_env", "flag_from_env", "word"]

#: Values a flag variable reads as on (compared without case and surrounding spaces).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
#: Values a flag variable reads as off; unset or blank is off too.
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def word(raw: str) -> str:
    """An environment value as every ``ARENA_*`` flag and choice compares it: without
    surrounding spaces, in lower case."""
    return raw.strip().lower()


def flag_from_env(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns its setting on.

    ``1``, ``true``, ``yes``, ``on`` (any case) read as on; ``0``, ``false``, ``no``,
    ``off``, blank or unset as off.

    Raises
    ------
    ConfigError
        For any other value, naming the variable, its value and the values accepted.
    """
    raw = os.environ.get(variable, "")
    value = word(raw)
    if value in TRUE_WORDS:
        return True
    if not value or value in FALSE_WORDS:
        return False
    raise ConfigError(
        f"the environment variable {variable}={raw!r} is not a yes/no value; set it to 1, "
        "true, yes or on to turn it on, or to 0, false, no, off (or unset it) to turn it off"
    )


def choice_from_env(variable: str, choices: tuple[str, ...], meaning: str) -> str:
    """The one of ``choices`` (lower case, the first the default) that the environment
    variable ``variable`` names, in any case; blank or unset is the first.

    Raises
    ------
    ConfigError
        For any other value, naming the variable, its value, the values accepted and
        ``meaning`` (what the variable sets).
    """
    raw = os.environ.get(variable, "")
    value = word(raw)
    if not value:
        return choices[0]
    if value not in choices:
        accepted = " or ".join(repr(choice) for choice in choices)
        raise ConfigError(
            f"the environment variable {variable} is {raw.strip()!r}; set it to {accepted} "
            f"(any case; {meaning}), or unset it"
        )
    return value
