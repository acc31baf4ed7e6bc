"""Semantic engagement backfill (`cairn backfill-semantic`): the live second chance, run late over history, on the
deliveries the lexical test alone decided "not engaged", each response recovered from its session's transcript;
rescued rows get a basis of their own, `semantic-backfill` (docs/stop.md).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from cairn_cli.clock import iso_now, utcnow
from cairn_cli.config import Settings
from cairn_cli.core.labels.engagement import SEMANTIC_BACKFILL, backfill_threshold, semantic_best
from cairn_cli.core.metrics import mean_interval
from cairn_cli.core.store.embeddings import Embedder

if TYPE_CHECKING:
    from cairn_cli.core.transcript import Transcript

STATE_KEY = "semantic_backfill"  # machine state: the last run; its history is every run's audit record
TOO_SMALL = 30  # fewer graded rows than this on a side: "too small to act on"

# why a delivery could not be examined (counted, never fatal)
NO_HOOK_STATE = "no hook state for the turn"
NO_TRANSCRIPT_PATH = "no transcript path recorded"
NO_PROMPT = "no prompt recorded"
PROMPT_EXPIRED = "prompt expired (older than CAIRN_RETENTION_DAYS): backfill runs within the retention period"
MISSING = "transcript missing (moved or deleted)"
UNREADABLE = "transcript unreadable"
TURN_NOT_FOUND = "turn not found in the transcript (truncated, compacted or another file)"
NO_RESPONSE = "no response text in the turn"
MEMORY_GONE = "memory deleted"
NO_EMBEDDER = "no embedder answered"


@dataclass
class BackfillOptions:
    dry_run: bool = False
    limit: int | None = None
    since: dt.datetime | None = None
    session: str | None = None
    batch_size: int = 64  # deliveries per embedding request


@dataclass
class GradeSide:
    """The mean agent grade of one side (rescued / not rescued) among the rows that have a grade."""

    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    too_small: bool


@dataclass
class BackfillReport:
    run: str
    dry_run: bool
    threshold: float
    threshold_source: str
    model: str | None = None
    selected: int = 0
    examined: int = 0
    rescued: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    grades: dict[str, GradeSide] = field(default_factory=dict)  # rescued | not_rescued
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def rescued_share(self) -> float | None:
        return self.rescued / self.examined if self.examined else None

    def as_dict(self) -> dict:
        return {**asdict(self), "rescued_share": self.rescued_share}


def pending(opts: BackfillOptions) -> list:
    """The deliveries to examine, oldest first: main-agent rows decided not engaged with no semantic measurement."""
    from cairn_cli.db.tables import MemoryDelivery as D

    query = D.select().where(
        (D.engaged == False)  # noqa: E712
        & D.engaged_semantic.is_null()
        & D.engaged_backfill.is_null()
        & (D.layer != "subagent")
    )
    if opts.since is not None:
        query = query.where(D.delivered_at >= opts.since)
    if opts.session:
        query = query.where(D.session_id == opts.session)
    query = query.order_by(D.id)
    if opts.limit:
        query = query.limit(opts.limit)
    return list(query)


class _Responses:
    """Each turn's recovered response, reading each transcript once."""

    def __init__(self, max_bytes: int | None = None):
        self._transcripts: dict[str, Transcript | str] = {}  # a path's transcript, or why it cannot be read
        self.max_bytes = max_bytes

    def _read(self, path: str) -> Transcript | str:
        from cairn_cli.core.transcript import read_transcript

        if path not in self._transcripts:
            try:
                self._transcripts[path] = read_transcript(path, max_bytes=self.max_bytes)
            except FileNotFoundError:
                self._transcripts[path] = MISSING
            except OSError:  # a directory, a FIFO, no permission
                self._transcripts[path] = UNREADABLE
        return self._transcripts[path]

    def response(self, hook_row, occurrence: int) -> tuple[str | None, str | None]:
        """(the response of the turn, None) or (None, why). `occurrence`: which of the session's turns with this
        same prompt it is (0: the first), so that a repeated prompt finds its own turn."""
        from cairn_cli.core.labels.cm import strip_block
        from cairn_cli.core.ranking.context import clean

        if hook_row is None:
            return None, NO_HOOK_STATE
        data = hook_row.data or {}
        path = hook_row.transcript_path or data.get("transcript_path")
        if not path:
            return None, NO_TRANSCRIPT_PATH
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return None, PROMPT_EXPIRED if "prompt" in (data.get("expired") or ()) else NO_PROMPT
        transcript = self._read(os.path.expanduser(path))
        if isinstance(transcript, str):
            return None, transcript
        matching = [t for t in transcript.turns() if clean(t.prompt.text)[: len(prompt)] == prompt]
        if not matching:
            return None, TURN_NOT_FOUND
        turn = matching[min(occurrence, len(matching) - 1)]
        text = strip_block("\n".join(m.text for m in turn.responses if m.text)).strip()
        return (text, None) if text else (None, NO_RESPONSE)


def _occurrences(session_id: str) -> dict[int, int]:
    """turn -> how many earlier main-agent turns of the session had the same prompt."""
    from cairn_cli.db.tables import HookState

    seen: dict[str, int] = {}
    out = {}
    rows = (
        HookState.select(HookState.turn, HookState.data)
        .where((HookState.session_id == session_id) & (HookState.is_subagent == False))  # noqa: E712
        .order_by(HookState.turn)
    )
    for row in rows:
        prompt = (row.data or {}).get("prompt") or ""
        out[row.turn] = seen.get(prompt, 0)
        seen[prompt] = out[row.turn] + 1
    return out


def run(
    settings: Settings,
    opts: BackfillOptions,
    *,
    embed_with_model: Embedder,
    progress: Callable[[int, str], Callable[[int], None]] | None = None,
) -> BackfillReport:
    """Examine the pending deliveries (see the module note), write the outcome unless a dry run, audit the run."""
    from cairn_cli.core.store import hookstate
    from cairn_cli.db.tables import Memory

    t0 = time.perf_counter()
    threshold, source = backfill_threshold(settings)
    report = BackfillReport(iso_now(), opts.dry_run, threshold, source)
    rows = pending(opts)
    report.selected = len(rows)
    texts = {}
    ids = list({r.memory_id for r in rows})
    for start in range(0, len(ids), 500):
        for m in Memory.select(Memory.id, Memory.content).where(Memory.id.in_(ids[start : start + 500])):
            texts[m.id] = m.content
    responses = _Responses()
    occurrences: dict[str, dict[int, int]] = {}
    hook_rows: dict[tuple[str, int], Any] = {}
    ready: list[tuple[Any, str]] = []  # (delivery, response) that can be examined
    skipped: dict[str, list] = {}
    for r in rows:
        key = (r.session_id, r.turn)
        if key not in hook_rows:
            hook_rows[key] = hookstate.get_turn(r.session_id, r.turn)
        hook_row = hook_rows[key]
        if hook_row is not None and hook_row.is_subagent:  # a subagent's turn logged under another layer
            report.selected -= 1
            continue
        if r.memory_id not in texts:
            skipped.setdefault(MEMORY_GONE, []).append(r)
            continue
        if r.session_id not in occurrences:
            occurrences[r.session_id] = _occurrences(r.session_id)
        response, why = responses.response(hook_row, occurrences[r.session_id].get(r.turn, 0))
        if why or response is None:
            skipped.setdefault(why or NO_RESPONSE, []).append(r)
        else:
            ready.append((r, response))
    tick = progress(len(ready), "backfill") if progress and ready else None
    decided: list[tuple[Any, float]] = []
    for start in range(0, len(ready), max(1, opts.batch_size)):
        batch = ready[start : start + max(1, opts.batch_size)]
        scores = _score(batch, texts, settings, embed_with_model, report)
        if scores is None:
            skipped.setdefault(NO_EMBEDDER, []).extend(r for r, _ in ready[start:])
            report.notes.append("the embedder stopped answering: the rest is left for the next run")
            break
        decided.extend(zip((r for r, _ in batch), scores))
        if tick:
            tick(len(batch))
    report.skipped = {why: len(v) for why, v in sorted(skipped.items(), key=lambda kv: -len(kv[1]))}
    report.examined = len(decided)
    report.rescued = sum(cos >= threshold for _, cos in decided)
    report.grades = {
        "rescued": _side([r.grade for r, cos in decided if cos >= threshold and r.grade is not None]),
        "not_rescued": _side([r.grade for r, cos in decided if cos < threshold and r.grade is not None]),
    }
    if not opts.dry_run:
        _write(decided, threshold, report.run)
    report.seconds = round(time.perf_counter() - t0, 3)
    if not opts.dry_run:
        _audit(report, settings)
    return report


def _score(batch, texts: dict, settings: Settings, embed_with_model: Embedder, report: BackfillReport):
    """Each delivery's cosine with its response's best chunk (None when no embedder answers). One embedding request
    per batch: the batch's memories and its distinct responses' chunks; a second model midway is refused."""
    from cairn_cli.core.labels.engagement import chunks

    wanted = [texts[r.memory_id] for r, _ in batch]
    for _, response in batch:
        wanted.extend(chunks(response, settings.ENGAGEMENT_CHUNK_CHARS))
    wanted = list(dict.fromkeys(wanted))
    got = embed_with_model(wanted)
    if got is None:
        return None
    model, vecs = got
    if report.model is None:
        report.model = model
    elif model != report.model:
        report.notes.append(f"the embedder changed from {report.model} to {model} midway")
        return None
    vectors = dict(zip(wanted, vecs))
    out = []
    for r, response in batch:
        best, _ = semantic_best(  # with the model: a learned embedder's cosines on its base's scale
            [texts[r.memory_id]],
            response,
            settings.ENGAGEMENT_CHUNK_CHARS,
            lambda ts: (model, [vectors[t] for t in ts]),
        )
        out.append(float(best[0]) if best else 0.0)
    return out


def _side(grades: list[int]) -> GradeSide:
    mean, low, high = mean_interval([float(g) for g in grades])
    r = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return GradeSide(len(grades), r(mean), r(low), r(high), len(grades) < TOO_SMALL)


def _write(decided: list[tuple[Any, float]], threshold: float, run_id: str) -> None:
    """Rescued: engaged by the backfill's basis; examined and not rescued: the cosine kept, the lexical decision
    too. Every examined row is tagged with the run (one transaction)."""
    from cairn_cli.db.tables import MemoryDelivery as D
    from cairn_cli.db.tables import ephemeral_proxy

    now = utcnow()
    with ephemeral_proxy.atomic():
        for r, cos in decided:
            cos = round(cos, 6)
            fields = {"engaged_semantic": cos, "engaged_backfill": run_id}
            if cos >= threshold:
                fields.update(engaged=True, engaged_method=SEMANTIC_BACKFILL, engaged_score=cos, engaged_at=now)
            D.update(**fields).where(D.id == r.id).execute()


def _audit(report: BackfillReport, settings: Settings) -> None:
    from cairn_cli.core.store import state

    summary = {
        "run": report.run,
        "examined": report.examined,
        "rescued": report.rescued,
        "skipped": report.skipped,
        "threshold": report.threshold,
        "threshold_source": report.threshold_source,
        "model": report.model,
        "seconds": report.seconds,
    }
    state.put(
        STATE_KEY,
        summary,
        settings,
        by="cairn backfill-semantic",
        reason=f"examined {report.examined}, rescued {report.rescued} at cosine >= {report.threshold:g}",
    )
