"""`cairn redact --scan`: the secrets an earlier version stored (before redaction was an entrance's first step)
found in every place cairn keeps text and redacted in place with the same patterns (core/redact.py).
Idempotent (a placeholder is never a secret: a second scan finds nothing) and audited (what it found, counted per
place and kind, never the secrets, in the machine state's history)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.config import Settings
from cairn_cli.core.privacy.stored import Rewrites, compact_stores, rewrite_files, rewrite_tables
from cairn_cli.core.private import strip_private
from cairn_cli.core.redact import redact


@dataclass
class ScanReport:
    dry_run: bool
    found: Rewrites = field(default_factory=Rewrites)
    kinds: Counter = field(default_factory=Counter)  # secrets per kind (a private span counts as "private")
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def as_dict(self) -> dict:
        return {"dry_run": self.dry_run, "secrets": self.total, "kinds": dict(self.kinds), **self.found.as_dict()}


def scan(settings: Settings, home: Path, *, dry_run: bool = False) -> ScanReport:
    """Redact every stored secret (and `<private>` span) in place; `dry_run`: count only."""
    report = ScanReport(dry_run=dry_run)

    def transform(text: str) -> tuple[str, int]:
        stripped = strip_private(text)
        private = int(stripped != text)
        new, counts = redact(stripped)
        report.kinds.update(counts)
        if private:
            report.kinds["private"] += private
        return new, sum(counts.values()) + private

    rewrite_tables(transform, apply=not dry_run, out=report.found)
    rewrite_files(home, transform, apply=not dry_run, out=report.found)
    if report.found.memories:
        report.notes.append(
            f"{len(report.found.memories)} memories redacted in place: re-embedded by the daemon or `cairn memory "
            "embed`; one that is now mostly a placeholder can go with `cairn forget ID`"
        )
    if not dry_run and report.total:
        report.notes += compact_stores()
        from cairn_cli.core.store import state

        state.put(
            "privacy_scan",
            {"secrets": report.total, "kinds": dict(report.kinds), "places": dict(report.found.hits)},
            settings,
            by="cairn redact --scan",
            reason=f"{report.total} stored secrets redacted",
        )
    return report
