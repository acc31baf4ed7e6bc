"""Rendering for people and scripts: rich tables on stdout, --json via orjson, messages and progress on stderr.

rich and tqdm are imported only when something is rendered, never at import time.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import orjson


def _default(obj: Any):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def json_out(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
    sys.stdout.write("\n")
    sys.stdout.flush()


def text_out(text: str) -> None:
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def message(text: str) -> None:
    """A human message: stderr, so stdout stays data."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def table(
    rows: list[dict], columns: list[str], *, title: str | None = None, widths: dict[str, int] | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # cells are data, never markup: a memory that says "[cm]" or "[red]" is shown as written
    tbl = Table(title=Text(title) if title else None, show_lines=False, header_style="bold")
    for col in columns:
        tbl.add_column(Text(col), overflow="fold", max_width=(widths or {}).get(col))
    for row in rows:
        tbl.add_row(*(Text("" if row.get(c) is None else str(row.get(c))) for c in columns))
    console = Console(stderr=False)
    if not console.is_terminal:
        console = Console(width=200)
    console.print(tbl)


def key_values(pairs: dict, *, title: str | None = None) -> None:
    table([{"field": k, "value": v} for k, v in pairs.items()], ["field", "value"], title=title)


@contextmanager
def progress(
    total: int | None, desc: str, *, enabled: bool = True, unit: str = "mem"
) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr; yields a callback taking the number of items done."""
    if not enabled:
        yield lambda n: None
        return
    from tqdm import tqdm

    bar = tqdm(
        total=total, desc=desc, file=sys.stderr, unit=unit, leave=False, disable=None if sys.stderr.isatty() else True
    )
    try:
        yield bar.update
    finally:
        bar.close()


@contextmanager
def progress_bars(unit: str, *, enabled: bool = True) -> Iterator[Callable[[int, str], Callable[[int], None]] | None]:
    """Bars a long job opens as it goes: yields `start(total, desc)`, which opens one more `progress` bar and returns
    its callback (every bar is closed when the block ends); None when not enabled (--json: no bar)."""
    with ExitStack() as stack:

        def start(total: int, desc: str) -> Callable[[int], None]:
            return stack.enter_context(progress(total, desc, unit=unit))

        yield start if enabled else None
