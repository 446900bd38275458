"""Tables that fit the terminal without breaking a state, an id or a number.

Rich shrinks every column of a table that is too wide, so at 80 columns ``succeeded`` became
``succeed``/``ed`` and node names lost their tails (issue 21). Here a column says what it holds:
fixed cells (states, ids, names of things, numbers) keep their width and never wrap; free text
(reasons, labels, placements) takes what is left, shared out evenly, and wraps at spaces (a word
longer than its column is folded). When even the fixed columns do not fit, the columns marked
``spare`` go first, in their rank order, and the title says which were left out; a column marked ``same``
whose cells all agree (every job of one tenant) is said once in the title instead. The layout is decided
at render time from the width rich offers, so the builders stay pure and tests render at any width.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, JustifyMethod, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Cell = str | Text

TEXT_FLOOR = 16
"""Free text is not squeezed below this many characters (or its own width) while spare columns
or other free text can still give way: narrower, a reason reads one word a line."""


@dataclass(frozen=True, slots=True)
class Column:
    """``text``: free text that may wrap at spaces; otherwise a fixed cell that never wraps.
    ``spare``: 0 = always shown; otherwise left out when the table cannot fit with it, rank 1
    first, then 2, and so on. ``same``: when every
    row holds the same value, said once in the title rather than in a column."""

    header: str
    text: bool = False
    spare: int = 0
    same: bool = False
    justify: JustifyMethod = "left"


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _width(cell: Cell) -> int:
    return max((Text(line).cell_len for line in _plain(cell).split("\n")), default=0)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _chrome(n_columns: int) -> int:
    """Characters a row takes besides its cells: one space of padding and one separator
    between neighbours (``collapse_padding``, no outer edge)."""
    return 2 * (n_columns - 1)


def share_out(budget: int, floors: Sequence[int], wants: Sequence[int]) -> list[int]:
    """Widths for free-text columns: each gets what it wants when all fit, else the budget is
    filled evenly (water-filling) from each floor up to what each wants. Below the sum of the
    floors, each gets its floor cut in proportion, at least 1."""
    if sum(wants) <= budget:
        return list(wants)
    if sum(floors) >= budget:
        total = sum(floors) or 1
        return [max(1, f * budget // total) for f in floors]
    low, high = 0, max(wants)
    while low < high:  # the highest level L at which min(want, max(floor, L)) fits
        mid = (low + high + 1) // 2
        if sum(min(w, max(f, mid)) for f, w in zip(floors, wants, strict=True)) <= budget:
            low = mid
        else:
            high = mid - 1
    widths = [min(w, max(f, low)) for f, w in zip(floors, wants, strict=True)]
    left = budget - sum(widths)
    for i, want in enumerate(wants):  # what the level leaves, one character each, left first
        if left and widths[i] < want:
            widths[i] += 1
            left -= 1
    return widths


class FitTable:
    """A table laid out for the width it is rendered at (see the module docstring)."""

    def __init__(
        self, columns: Iterable[Column], title: str | None = None, *, show_header: bool = True
    ) -> None:
        self.columns = list(columns)
        self.title = title
        self.show_header = show_header
        self.rows: list[list[Cell]] = []

    def add_row(self, *cells: Cell) -> None:
        assert len(cells) == len(self.columns), "one cell per column"
        self.rows.append(list(cells))

    def _natural(self, i: int) -> int:
        """The widest cell of column ``i``; a header wider than its cells wraps at spaces."""
        cells = max((_width(row[i]) for row in self.rows), default=0)
        header = self.columns[i].header if self.show_header else ""
        return max(cells, _longest_word(header) if cells else len(header), 1)

    def _floor(self, i: int) -> int:
        column = self.columns[i]
        if not column.text:
            return self._natural(i)
        header = _longest_word(column.header) if self.show_header else 0
        return min(self._natural(i), max(header, TEXT_FLOOR))

    def _spare_rank(self, i: int) -> int:
        return self.columns[i].spare

    def _same(self) -> dict[int, str]:
        """Columns marked ``same`` whose rows all hold one value: that value by column."""
        found: dict[int, str] = {}
        for i, column in enumerate(self.columns):
            values = {_plain(row[i]) for row in self.rows}
            if column.same and len(values) == 1:
                found[i] = values.pop()
        return found

    def _shown(self, width: int) -> list[int]:
        """The columns kept at ``width``: spare ones dropped in rank order until the fixed
        cells and the floors of free text fit."""
        same = self._same()
        shown = [i for i in range(len(self.columns)) if i not in same]
        spare = sorted((i for i in shown if self.columns[i].spare), key=self._spare_rank)
        while spare and _chrome(len(shown)) + sum(self._floor(i) for i in shown) > width:
            shown.remove(spare.pop(0))
        return shown

    def layout(self, width: int) -> Table:
        """The rich table for ``width`` characters."""
        shown = self._shown(width)
        widths = {i: self._natural(i) for i in shown}
        texts = [i for i in shown if self.columns[i].text]
        budget = width - _chrome(len(shown)) - sum(widths[i] for i in shown if i not in texts)
        for i, w in zip(
            texts,
            share_out(budget, [self._floor(i) for i in texts], [widths[i] for i in texts]),
            strict=True,
        ):
            widths[i] = w
        title = self.title
        same = self._same()
        if title is not None and same:
            title += ", " + ", ".join(f"{self.columns[i].header} {v}" for i, v in same.items())
        dropped = [c.header for i, c in enumerate(self.columns) if i not in shown and i not in same]
        if title is not None and dropped:
            title += f" (left out to fit: {', '.join(dropped)})"
        table = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD if self.show_header else None,
            show_header=self.show_header,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
            padding=(0, 1),
        )
        for i in shown:
            column = self.columns[i]
            header = "\n".join(textwrap.wrap(column.header, widths[i])) or column.header
            table.add_column(
                header,
                width=widths[i],
                no_wrap=not column.text,
                overflow="fold" if column.text else "ellipsis",
                justify=column.justify,
            )
        for row in self.rows:
            table.add_row(*(row[i] for i in shown))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.layout(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        n = len(self.columns)
        floor = _chrome(n) + sum(self._floor(i) for i in range(n) if not self.columns[i].spare)
        most = _chrome(n) + sum(self._natural(i) for i in range(n))
        return Measurement(min(floor, most), most).with_maximum(options.max_width)
