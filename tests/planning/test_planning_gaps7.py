"""Gaps left unsorted by the mutation run of issue 26 (Round 6) in the planning modules,
sorted after the run: each test was seen to fail with its mutant planted by hand (mutmut
was not rerun)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from arena.planning.books import StepBooks
from arena.planning.offsets import plan_offsets
from arena.planning.plan import make_plan, plan_slot_steps
from arena.planning.records import StepBook

ALIGN = 256


def _book(counts: list[int], blocks: list[tuple[int, int, int]], found: list[int]) -> StepBook:
    book = StepBook()
    book.counts = counts
    book.sizes = [size for size, _, _ in blocks]
    book.firsts = [first for _, first, _ in blocks]
    book.lasts = [last for _, _, last in blocks]
    book.found = found
    return book


def test_a_recordings_first_fit_smaller_than_the_plan_is_kept() -> None:
    # plan.py make_plan #38, #39 (the first fit installed as None): no test had a
    # recording whose first fit beat plan_offsets' heuristics.
    blocks = [(768, 0, 1), (512, 1, 1), (1024, 1, 2), (1024, 2, 3), (512, 3, 4), (768, 3, 4)]
    found = [0, 768, 1280, 0, 1024, 1536]  # first fit in request order: ends at 2304
    assert plan_offsets(blocks, alignment=ALIGN).total_bytes == 2560
    book = _book([1, 2, 1, 2], blocks, found)
    make_plan(book, ALIGN)
    assert book.offsets == found
    assert book.total == 2304
    assert book.starts == [0, 1, 3, 4, 6]


def test_a_first_fit_as_large_as_the_plan_gives_way_to_the_plan() -> None:
    # plan.py make_plan #37 (`<=`): the first fit was kept when only as small as the plan
    # (docs/planning.md: kept "when that is smaller").
    blocks = [(256, 0, 1), (512, 0, 1), (512, 0, 1), (512, 2, 2)]
    found = [0, 256, 768, 0]  # ends at 1280, as the plan does
    plan = plan_offsets(blocks, alignment=ALIGN)
    assert plan.total_bytes == 1280
    assert list(plan.offsets) != found
    book = _book([3, 0, 1], blocks, found)
    make_plan(book, ALIGN)
    assert book.offsets == list(plan.offsets)
    assert book.total == 1280


def test_a_record_without_requests_plans_to_nothing() -> None:
    # plan.py make_plan #25, #27 (`max` of the empty first fit with default None or no
    # default): a record of no blocks with a first fit (a run without requests that
    # replaced another record) raised. Through Arena the empty step keeps found None.
    book = _book([], [], [])
    make_plan(book, ALIGN)
    assert book.offsets == []
    assert book.total == 0
    assert book.starts == [0]


def test_plan_slot_steps_of_a_slot_without_steps_needs_nothing() -> None:
    # plan.py plan_slot_steps #12, #16 (default None or 1): the bytes a slot without
    # planned steps needs are 0. No caller in the library reads the return value yet.
    slot = _slot_with({})
    assert plan_slot_steps(slot, ALIGN) == 0
    book = _book([0], [], [])
    slot = _slot_with({"unrun": book})  # recorded, never completed
    assert plan_slot_steps(slot, ALIGN) == 0
    assert not book.planned


def _slot_with(steps: dict[Any, StepBook]) -> Any:
    """A stand-in slot whose step books (its StepBooks store) are ``steps``."""
    books = StepBooks()
    for key, book in steps.items():
        books.keep(key, book)
    return cast(Any, SimpleNamespace(store=lambda kind: books))


@pytest.mark.parametrize("short", ["lasts", "found"])
def test_a_book_whose_lists_disagree_is_refused_not_planned_on_a_truncated_record(
    short: str,
) -> None:
    # plan.py make_plan #7, #11, #12 (sizes, firsts, lasts zipped without strict) and #31,
    # #34, #35 (the first fit zipped with the sizes without strict): a book whose lists
    # disagree was planned on the shortest. Every writer in the library fills them from one
    # run or structure; this guards that invariant.
    blocks = [(256, 0, 1), (512, 0, 1), (512, 1, 1)]
    book = _book([2, 1], blocks, [0, 256, 768])
    if short == "lasts":
        book.lasts = book.lasts[:2]
    else:
        book.found = [0, 256]
    with pytest.raises(ValueError, match="zip"):
        make_plan(book, ALIGN)
    assert not book.planned
