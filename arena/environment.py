"""Yes/no settings read from the environment: one parser for every ``ARENA_*`` flag."""

from __future__ import annotations

import os

from arena.errors import ConfigError

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "flag_from_env"]

#: Values a flag variable reads as on (compared without case and surrounding spaces).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
#: Values a flag variable reads as off; unset or blank is off too.
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


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
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if not value or value in FALSE_WORDS:
        return False
    raise ConfigError(
        f"the environment variable {variable}={raw!r} is not a yes/no value; set it to 1, "
        "true, yes or on to turn it on, or to 0, false, no, off (or unset it) to turn it off"
    )
