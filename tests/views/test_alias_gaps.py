"""Mutation gaps of arena.views.aliases (issue 26 item 12): behaviour no other test pinned
down, each test written against a mutant that survived."""

from __future__ import annotations

import gc

from arena import forks
from arena.views.aliases import note_alias, origin_of


class _Array:
    """Stands for a framework array: weakly referable, compared by identity."""


def test_every_live_alias_still_leads_to_its_view_after_many_were_noted() -> None:
    # note_alias #10 to #14, #16 (the purge of dead records, which runs once enough are
    # noted, failed), #11 (the purge dropped the live records instead of the dead ones),
    # _Aliases.__init__ #1 to #3 (planted by hand: they run at import).
    pairs = [(_Array(), _Array()) for _ in range(200)]
    for alias, view in pairs:
        note_alias(alias, view)
    assert all(origin_of(alias) is view for alias, view in pairs)
    dead = [(_Array(), _Array()) for _ in range(150)]
    for alias, view in dead:
        note_alias(alias, view)
    del dead, alias, view
    gc.collect()
    more = [(_Array(), _Array()) for _ in range(300)]
    for alias, view in more:
        note_alias(alias, view)
    assert all(origin_of(alias) is view for alias, view in pairs + more)
    chain = [_Array() for _ in range(5)]
    for later, earlier in zip(chain[1:], chain[:-1], strict=True):
        note_alias(later, earlier)
    assert origin_of(chain[-1]) is chain[0]
    unknown = _Array()
    assert origin_of(unknown) is unknown


def test_aliases_work_after_a_fork() -> None:
    # _Aliases.reset #1: the child's lock was None, so its first note_alias failed.
    forks._reset_in_child()  # what os.fork() runs in the child
    alias, view = _Array(), _Array()
    note_alias(alias, view)
    assert origin_of(alias) is view
