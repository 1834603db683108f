"""Issue 12, item 5: `Runtime.follow` reads the log in pages of at most 64 events, and
after a page of large events in pages of about 64 KB (at least one event), so that a
stream paced by a slow client holds one bounded page."""

from __future__ import annotations

import pytest

from recovery._following import PAGE_CHARS, PAGE_ROWS, _next_page
from store import EventRow


def rows(*sizes: int) -> list[EventRow]:
    return [EventRow(i, "response.output_text.delta", "x" * n) for i, n in enumerate(sizes)]


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        pytest.param(rows(), PAGE_ROWS, id="empty"),
        pytest.param(rows(*[200] * 64), PAGE_ROWS, id="small-events"),
        pytest.param(rows(200, 16 * 1024, 200), PAGE_CHARS // (16 * 1024), id="one-16KB-event"),
        pytest.param(rows(200, 5_000_000), 1, id="one-larger-than-a-page"),
    ],
)
def test_the_next_page_holds_about_page_chars(page: list[EventRow], expected: int) -> None:
    assert _next_page(page) == expected
