"""Locks for the jobs cron may overlap (training, A/B promotion): one run at a time per CAIRN_HOME, and per store
when machines share one (the A/B promotes once for the team, one student is trained at a time)."""

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


@contextlib.contextmanager
def store_lock(name: str) -> Iterator[bool]:
    """`home_lock(name)`, and the memory store's own lock (db.advisory.store_lock: an advisory lock on PostgreSQL, a
    lock file beside a SQLite file) for the machines sharing it; the stores are bound. Yields False (and holds
    nothing) when this machine or another one sharing the store has it."""
    from cairn_cli.db import advisory

    with home_lock(name) as held:
        if not held:
            yield held
            return
        with advisory.store_lock(name) as got:
            yield got
