"""Mutation gaps of arena.slots.holder (issue 26 item 12): behaviour no other test pinned
down, each test written against a mutant that survived."""

from __future__ import annotations
