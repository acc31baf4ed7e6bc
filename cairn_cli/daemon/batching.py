"""The daemon's model queue: the requests it serves at once share one embedder and one cross-encoder.

The models are called by one thread (torch already spreads one call over the cores it is given, two calls at once
would take each other's cores, and a fast tokenizer must not be entered by two threads at once), so they have a
queue and a worker thread: callers wait in the queue, first come first served, and the worker runs the calls
waiting at the same time as one call of each model (one forward pass for all their texts or pairs, up to a cap),
then hands each caller its share.

- `ModelQueue.submit(payload, start_by=)`: the caller's result; a caller whose turn has not come by `start_by`
  leaves the queue (`Missed`) and its request goes on without it; `model_queue(encoder)`: the daemon's;
- `QueuedEncoder`: an encoder's face over the queue (`urgent` for a prompt's own embedding); a long list goes in
  slices, so that the calls of a bulk embedding take turns with the others; no turn before the client's deadline:
  DeadlineExceeded;
- `QueuedReranker`: a reranker's face for one request: its turn must come within the rerank budget (and early
  enough for the answer to meet the client's deadline), else the stage is skipped (RerankSkipped) and the
  ranking's notes and provenance say so.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from cairn_cli.core.ranking.engine import RerankSkipped
from cairn_cli.errors import DeadlineExceeded

EMBED_SLICE = 16  # texts of a bulk embedding in one turn of the queue
MODEL_CAP = 64  # texts and pairs in one turn of the worker (a caller's own are never split)
RERANK_WAIT_BUDGETS = 1.0  # a request waits for its cross-encoder turn at most this many rerank budgets
ANSWER_RESERVE_S = 0.1  # after the stage: blending, the block, logging the turn, the answer


class Missed(Exception):
    """The caller's turn did not come in time; it left the queue."""

    def __init__(self, waited_s: float, ahead: int):
        super().__init__(f"waited {waited_s * 1000:.0f} ms behind {ahead} call(s)")
        self.waited_s, self.ahead = waited_s, ahead


class _Job:
    __slots__ = ("done", "error", "payload", "result", "running", "urgent")

    def __init__(self, payload: Any, urgent: bool):
        self.payload, self.urgent = payload, urgent
        self.running = False
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class ModelQueue:
    """Callers of the models, first come first served, the urgent ones (a prompt's: its hook waits for it) ahead of
    the others (an embed request: a Stop's engagement, a bulk import; a table refresh); the worker runs those
    waiting at the head, of one kind (up to `cap` units, at least one caller), as one call of `run`, which returns
    one result (or exception) per payload."""

    def __init__(self, name: str, run: Callable[[list], list], *, size: Callable[[Any], int] = len, cap: int = 64):
        self.name = name
        self._run, self._size, self._cap = run, size, cap
        self._cond = threading.Condition(threading.Lock())
        self._waiting: deque[_Job] = deque()
        self._running = 0
        self._worker: threading.Thread | None = None
        self.calls = 0  # model calls made
        self.served = 0  # callers served
        self.missed = 0  # callers whose turn did not come in time
        self.widest = 0  # most callers in one call

    def submit(self, payload: Any, *, start_by: float | None = None, urgent: bool = False) -> Any:
        """run(...)'s result for `payload`, waiting for the turn until `start_by` (epoch seconds) at most; an
        `urgent` caller goes behind the urgent ones already waiting, ahead of the others."""
        job = _Job(payload, urgent)
        t0 = time.time()
        with self._cond:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=f"cairn-{self.name}", daemon=True)
                self._worker.start()
            if urgent:
                at = next((i for i, other in enumerate(self._waiting) if not other.urgent), len(self._waiting))
                self._waiting.insert(at, job)
            else:
                self._waiting.append(job)
            ahead = self._waiting.index(job) + self._running
            self._cond.notify_all()
            while not job.running:
                left = None if start_by is None else start_by - time.time()
                if left is not None and left <= 0:
                    self._waiting.remove(job)
                    self.missed += 1
                    raise Missed(time.time() - t0, ahead)
                self._cond.wait(left)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def stats(self) -> dict:
        with self._cond:
            return {
                "waiting": len(self._waiting),
                "calls": self.calls,
                "served": self.served,
                "missed": self.missed,
                "widest": self.widest,
            }

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._cond.wait()
                batch = [self._waiting.popleft()]
                units = self._size(batch[0].payload)
                while (
                    self._waiting
                    and self._waiting[0].urgent == batch[0].urgent  # a prompt never waits for a bulk embedding
                    and units + self._size(self._waiting[0].payload) <= self._cap
                ):
                    units += self._size(self._waiting[0].payload)
                    batch.append(self._waiting.popleft())
                for job in batch:
                    job.running = True
                self._running = len(batch)
                self._cond.notify_all()  # those started stop watching their start_by
            try:
                results = self._run([job.payload for job in batch])
            except BaseException as exc:  # the call as a whole failed: each of its callers hears why
                results = [exc] * len(batch)
            with self._cond:
                self._running = 0
                self.calls += 1
                self.served += len(batch)
                self.widest = max(self.widest, len(batch))
            for job, result in zip(batch, results):
                if isinstance(result, BaseException):
                    job.error = result
                else:
                    job.result = result
                job.done.set()


EMBED, RERANK = "embed", "rerank"


def _units(payload: tuple) -> int:
    return len(payload[1]) if payload[0] == EMBED else len(payload[5])


def model_queue(encoder) -> ModelQueue:
    """The daemon's one queue for its models: the embedder's and the cross-encoder's calls share one worker, so
    they never run at once (each spreads a call over torch's threads: two at once took each other's cores on two,
    and the rerank plan's margin, learnt from the stage's forward passes, learnt the embedder's time instead). The
    callers waiting together make one call of each model: their texts encoded together, and the pairs of their
    rankings scored in one forward pass per (reranker, precision, max length) among them (a swap may leave two
    rerankers in the queue for a moment), and the texts of each embedder in one call (`encoder`: the one of a
    payload that names none; a learned embedder's background re-embed, or a swap, may queue two)."""
    import numpy as np

    def run(payloads: list[tuple]) -> list:
        out: list = [None] * len(payloads)
        by_encoder: dict[int, list[int]] = {}  # (EMBED, texts[, encoder]): the daemon's, or a re-embed's
        for i, p in enumerate(payloads):
            if p[0] == EMBED:
                by_encoder.setdefault(id(p[2]) if len(p) > 2 else 0, []).append(i)
        for embeds in by_encoder.values():
            model = payloads[embeds[0]][2] if len(payloads[embeds[0]]) > 2 else encoder
            try:
                vecs = model.encode([t for i in embeds for t in payloads[i][1]])
            except Exception as exc:
                vecs = exc
            start = 0
            for i in embeds:
                n = len(payloads[i][1])
                out[i] = vecs if isinstance(vecs, Exception) else np.asarray(vecs[start : start + n])
                start += n
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(payloads):
            if p[0] == RERANK:
                groups.setdefault((id(p[1]), p[2], p[3]), []).append(i)
        for members in groups.values():
            reranker, precision, max_length = payloads[members[0]][1:4]
            asks = [payloads[i][4:] for i in members]
            try:
                if hasattr(reranker, "logits_many"):
                    got = reranker.logits_many(asks, precision=precision, max_length=max_length)
                else:
                    got = [reranker.logits(query, texts, prompt=prompt) for query, texts, prompt in asks]
            except Exception as exc:
                got = [exc] * len(members)
            for i, value in zip(members, got):
                out[i] = value
        return out

    return ModelQueue("models", run, size=_units, cap=MODEL_CAP)


class QueuedEncoder:
    """`encoder` as one request sees it: its calls go through `queue`, and wait for their turn until `start_by`."""

    def __init__(self, encoder, queue: ModelQueue, *, start_by: float | None = None, urgent: bool = False):
        self.encoder, self.queue, self.start_by, self.urgent = encoder, queue, start_by, urgent
        self.name, self.dim = encoder.name, encoder.dim

    def encode(self, texts: list[str], *, progress: bool = False):
        import numpy as np

        parts = []
        for start in range(0, len(texts), EMBED_SLICE):
            try:
                texts_slice = list(texts[start : start + EMBED_SLICE])
                job = (EMBED, texts_slice, self.encoder)  # its own model: a swap or a re-embed may be under way
                parts.append(self.queue.submit(job, start_by=self.start_by, urgent=self.urgent))
            except Missed as exc:
                raise DeadlineExceeded(f"no turn at the embedder before the client's deadline ({exc})") from None
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


class QueuedReranker:
    """`reranker` as one request sees it: the plan in force when the request started (what its deliveries record),
    and a turn at the cross-encoder that must come within RERANK_WAIT_BUDGETS of the budget and early enough to
    answer by `deadline` (epoch seconds; None: no client waiting), else RerankSkipped."""

    def __init__(self, reranker, queue: ModelQueue, *, budget_ms: float, deadline: float | None = None):
        self.inner, self.queue, self.deadline = reranker, queue, deadline
        self.name, self.floor = reranker.name, reranker.floor
        self.plan = getattr(reranker, "plan", None)
        self.budget_ms = float((self.plan or {}).get("budget_ms") or budget_ms)

    def start_by(self, now: float) -> float | None:
        """The latest start of this request's stage: within the budget, and early enough to answer in time."""
        latest = now + RERANK_WAIT_BUDGETS * self.budget_ms / 1000.0 if self.budget_ms > 0 else None
        if self.deadline is not None:
            expected = float((self.plan or {}).get("expected_ms") or self.budget_ms or 0.0) / 1000.0
            by_deadline = self.deadline - expected - ANSWER_RESERVE_S
            latest = by_deadline if latest is None else min(latest, by_deadline)
        return latest

    def logits(self, query: str, texts: list[str], *, prompt: str | None = None) -> list[float]:
        plan = self.plan or {}
        payload = (RERANK, self.inner, plan.get("precision"), plan.get("max_length"), query, list(texts), prompt)
        try:
            return self.queue.submit(payload, start_by=self.start_by(time.time()), urgent=True)
        except Missed as exc:
            raise RerankSkipped(f"rerank skipped under load: no turn at the cross-encoder in time ({exc})") from None

    def score_from_logits(self, raw: list[float]) -> list[float]:
        return self.inner.score_from_logits(raw)
