"""The one clock: naive UTC datetimes, what both databases store."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def iso_now() -> str:
    """utcnow() to the second, as the audit trail and model cards write it."""
    return utcnow().isoformat(timespec="seconds")
