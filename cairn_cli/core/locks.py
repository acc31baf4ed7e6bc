"""Advisory locks under CAIRN_HOME for the jobs cron may overlap (training, A/B promotion)."""

from __future__ import annotations

import contextlib
import fcntl
from typing import Iterator

from cairn_cli import config


@contextlib.contextmanager
def home_lock(name: str) -> Iterator[bool]:
    """Hold $CAIRN_HOME/<name>.lock for the block; yields False (and holds nothing) when another process has it."""
    path = config.home() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
