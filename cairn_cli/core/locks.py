"""Advisory locks under CAIRN_HOME for the jobs cron may overlap (training, A/B promotion)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cairn_cli import config
from cairn_cli.files import exclusive_lock


@contextlib.contextmanager
def home_lock(name: str) -> Iterator[bool]:
    """Hold $CAIRN_HOME/<name>.lock for the block; yields False (and holds nothing) when another process has it."""
    with exclusive_lock(config.home() / f"{name}.lock") as held:
        yield held
