"""The daemon serves many prompts at once, in this process (hashing encoder, fake cross-encoders, no daemon
process): the model queues, the shared warm table and its refresh, the stores shared by requests naming the same
databases, the heartbeat's rule, and a turn logged once and never past its deadline. Every wait is for an event
(a thread blocked, a caller queued), never for a time."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from cairn_cli.config import Settings
from cairn_cli.core.hooks.prompt import prompt_turn
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ranking.engine import RankEngine, SharedLock
from cairn_cli.daemon.batching import Missed, ModelQueue, QueuedEncoder, QueuedReranker, model_queue
from cairn_cli.errors import DeadlineExceeded
from cairn_cli.ml.models import get_encoder
from tests.conftest import EXAMPLES


def wait_until(predicate, what: str, timeout: float = 60.0):
    """Poll for an event another thread makes happen (an upper bound, not a wait)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(0.005)


class Held:
    """A model call that blocks its queue's worker until released (the first call only)."""

    def __init__(self):
        self.inside, self.release = threading.Event(), threading.Event()
        self.calls: list[list] = []

    def __call__(self, payloads):
        self.calls.append(list(payloads))
        if len(self.calls) == 1:
            self.inside.set()
            assert self.release.wait(60)
        return [f"done:{p}" for p in payloads]


def _in_thread(fn, *args, **kw):
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_the_callers_waiting_together_are_served_by_one_model_call():
    held = Held()
    queue = ModelQueue("test", held, size=lambda p: 1, cap=8)
    first, got_first = _in_thread(queue.submit, "a")
    assert held.inside.wait(60)
    later = [_in_thread(queue.submit, p) for p in ("b", "c", "d")]
    wait_until(lambda: queue.stats()["waiting"] == 3, "three callers queued behind the running call")
    held.release.set()
    for t, _ in [(first, got_first), *later]:
        t.join(60)
    assert got_first["value"] == "done:a" and [out["value"] for _, out in later] == ["done:b", "done:c", "done:d"]
    assert held.calls == [["a"], ["b", "c", "d"]], "the three waiting together made one call, in arrival order"
    assert queue.stats() == {"waiting": 0, "calls": 2, "served": 4, "missed": 0, "widest": 3}


def test_one_call_takes_no_more_than_its_cap_and_never_splits_a_caller():
    held = Held()
    queue = ModelQueue("test", held, size=len, cap=4)
    first, _ = _in_thread(queue.submit, ["a"])
    assert held.inside.wait(60)
    later = [_in_thread(queue.submit, p) for p in (["b", "c", "d"], ["e", "f"], ["g"])]
    wait_until(lambda: queue.stats()["waiting"] == 3, "three callers queued")
    held.release.set()
    for t, _ in [(first, None), *later]:
        t.join(60)
    # arrival order decides who is first in each call: the threads above may reach the queue in any order
    sizes = [sum(len(p) for p in call) for call in held.calls[1:]]
    assert all(size <= 4 for size in sizes) and sum(sizes) == 6


def test_a_prompts_call_goes_ahead_of_a_bulk_embedding_and_never_in_its_turn():
    held = Held()
    queue = ModelQueue("test", held, size=lambda p: 1, cap=8)
    first, _ = _in_thread(queue.submit, "a")
    assert held.inside.wait(60)
    bulk = [_in_thread(queue.submit, p) for p in ("stop-1", "stop-2")]
    wait_until(lambda: queue.stats()["waiting"] == 2, "a Stop's embedding slices queued")
    prompt, got = _in_thread(queue.submit, "prompt", urgent=True)
    wait_until(lambda: queue.stats()["waiting"] == 3, "a prompt queued")
    held.release.set()
    for t, _ in [(first, None), *bulk, (prompt, got)]:
        t.join(60)
    assert got["value"] == "done:prompt"
    assert held.calls[1] == ["prompt"] and sorted(held.calls[2]) == ["stop-1", "stop-2"]


def test_a_caller_whose_turn_does_not_come_in_time_leaves_the_queue():
    held = Held()
    queue = ModelQueue("test", held, size=lambda p: 1)
    first, _ = _in_thread(queue.submit, "a")
    assert held.inside.wait(60)
    with pytest.raises(Missed) as missed:
        queue.submit("late", start_by=time.time() - 1)  # its client's deadline has passed
    assert missed.value.ahead == 1
    held.release.set()
    first.join(60)
    assert queue.submit("next") == "done:next"
    assert held.calls == [["a"], ["next"]], "the caller that left was never scored"
    assert queue.stats()["missed"] == 1


def test_an_embedding_with_no_turn_before_the_deadline_abandons_the_request():
    encoder = get_encoder("hashing")
    held = Held()
    queue = ModelQueue("embed", held, size=len)
    first, _ = _in_thread(queue.submit, ["a"])
    assert held.inside.wait(60)
    late = QueuedEncoder(encoder, queue, start_by=time.time() - 1)
    with pytest.raises(DeadlineExceeded, match="no turn at the embedder"):
        late.encode(["the tests fail"])
    held.release.set()
    first.join(60)


class PlannedReranker:
    """A cross-encoder with a plan, scoring by text length, counting its calls and their requests."""

    name, floor = "fake-ce", -100.0

    def __init__(self, budget_ms: float = 150.0):
        self.plan = {"precision": "fp32", "candidates": 8, "max_length": 64, "budget_ms": budget_ms, "skipped": False}
        self.batches: list[int] = []

    def logits_many(self, requests, *, precision=None, max_length=None, cache=True):
        self.batches.append(len(requests))
        return [[float(len(t)) for t in texts] for _, texts, _ in requests]

    def score_from_logits(self, raw):
        return raw


def _engine_with(reranker, queue, *, deadline=None):
    base = RankEngine(get_encoder("hashing"))
    return base.view(
        encoder=base.encoder,
        reranker=QueuedReranker(reranker, queue, budget_ms=0.0, deadline=deadline) if reranker else None,
    )


def test_a_prompt_whose_cross_encoder_turn_does_not_come_in_time_skips_the_stage_and_says_so(cli):
    from cairn_cli.core.store import deliveries

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    ce = PlannedReranker()
    queue = model_queue(None)
    engine = _engine_with(ce, queue, deadline=time.time() - 1)  # no time left for the stage
    result = prompt_turn(
        PromptRequest(prompt="how do we release to production?", session_id="late", k=3), Settings(), engine
    )
    assert result.ranker == "cairn" and result.reranker_model == "none" and result.items
    assert any(n.startswith("rerank skipped under load: no turn at the cross-encoder in time") for n in result.notes)
    assert ce.batches == [] and queue.stats()["missed"] == 1
    row = deliveries.list_deliveries(Settings(), session_id="late")[0]
    assert row.reranker_model == "none" and row.score_components["reranker"] == "none"
    assert row.score_components["rerank_plan"]["skipped"] is True
    # with time for its turn, the same reranker reorders, and every delivery records its plan as not skipped
    on_time = prompt_turn(
        PromptRequest(prompt="how do we release to production?", session_id="on-time", k=3),
        Settings(),
        _engine_with(ce, queue, deadline=time.time() + 60),
    )
    assert on_time.reranker_model == "fake-ce" and ce.batches == [1]
    assert on_time.items[0].components["rerank_plan"]["skipped"] is False


def test_concurrent_prompts_share_one_cross_encoder_pass(cli):
    """Two prompts waiting for the cross-encoder together are scored in one call (logits_many of both)."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    ce = PlannedReranker(budget_ms=0.0)  # no budget, no client: each waits for its turn as long as it takes
    held = threading.Event()
    release = threading.Event()
    real = ce.logits_many

    def first_call_held(requests, **kw):
        if not held.is_set():
            held.set()
            assert release.wait(60)
        return real(requests, **kw)

    ce.logits_many = first_call_held
    queue = model_queue(None)
    s = Settings()
    prompts = ["how do we release?", "how are prices stored?", "the tests fail, what now?"]

    def one(i):
        return prompt_turn(PromptRequest(prompt=prompts[i], session_id=f"c{i}", k=3), s, _engine_with(ce, queue))

    runs = [_in_thread(one, 0)]
    assert held.wait(60)
    runs += [_in_thread(one, 1), _in_thread(one, 2)]
    wait_until(lambda: queue.stats()["waiting"] == 2, "two prompts queued behind the running pass")
    release.set()
    for t, _ in runs:
        t.join(60)
    assert all(out["value"].reranker_model == "fake-ce" for _, out in runs), [out.get("error") for _, out in runs]
    assert ce.batches == [1, 2]


def test_the_embedder_and_the_cross_encoder_take_turns_on_one_worker():
    """Never both at once (each spreads its call over torch's threads); those waiting together go in one turn."""
    encoder = get_encoder("hashing")
    ce = PlannedReranker()
    running: list[str] = []
    overlaps: list[list[str]] = []
    inside, release = threading.Event(), threading.Event()

    class Encoder:
        name, dim = encoder.name, encoder.dim

        def encode(self, texts):
            running.append("embed")
            overlaps.append(list(running))
            if not inside.is_set():
                inside.set()
                assert release.wait(60)
            running.remove("embed")
            return encoder.encode(texts)

    real = ce.logits_many

    def logits_many(requests, **kw):
        running.append("rerank")
        overlaps.append(list(running))
        running.remove("rerank")
        return real(requests, **kw)

    ce.logits_many = logits_many
    queue = model_queue(Encoder())
    first, _ = _in_thread(QueuedEncoder(Encoder(), queue).encode, ["the tests fail"])
    assert inside.wait(60)
    prompt_encoder = QueuedEncoder(Encoder(), queue, urgent=True)  # a prompt's own embedding
    embed, got_embed = _in_thread(prompt_encoder.encode, ["prices are in cents", "deploy"])
    rerank, got_rerank = _in_thread(QueuedReranker(ce, queue, budget_ms=0.0).logits, "q", ["a", "bb"])
    wait_until(lambda: queue.stats()["waiting"] == 2, "an embedding and a rerank waiting")
    release.set()
    for t in (first, embed, rerank):
        t.join(60)
    assert got_embed["value"].shape == (2, encoder.dim) and got_rerank["value"] == [1.0, 2.0]
    assert all(len(now) == 1 for now in overlaps), overlaps
    assert queue.stats()["calls"] == 2, "the two waiting together were served in one turn"


def test_a_refresh_waits_for_the_readers_of_a_table_and_holds_back_new_ones(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    s = Settings()
    engine = RankEngine(get_encoder("hashing"))
    entry = engine.table(s)
    before = len(entry.table)
    assert cli("memory", "add", "Gift cards are redeemed with shop giftcard redeem CODE").exit_code == 0
    seen: list[int] = []

    def late_reader():
        with engine.reading(entry):
            seen.append(len(entry.table))

    with engine.reading(entry):  # a ranking reading the composite
        refresh, _ = _in_thread(engine.table, s)
        wait_until(lambda: entry.lock._writers_waiting == 1, "the refresh waiting for the reader")
        assert len(entry.table) == before, "nothing is applied under a reader"
        meanwhile, got = _in_thread(engine.table, s)  # another prompt does not wait for the refresh...
        meanwhile.join(60)
        assert got["value"] is entry, "...it ranks with the table as it is"
        late, _ = _in_thread(late_reader)  # arrives while the refresh waits: held back until it is done
    refresh.join(60)
    late.join(60)
    assert seen == [before + 1], "the reader that came after the refresh sees it"
    assert len(entry.table) == before + 1 and engine.table(s) is entry, "refreshed in place"


def _hold(cm, order: list, name: str, until: threading.Event):
    """Enter `cm` in a thread of its own, note `name` in `order`, and stay in until `until` is set."""

    def run():
        with cm:
            order.append(name)
            assert until.wait(60)

    return _in_thread(run)[0]


def test_the_shared_lock_lets_readers_in_together_and_a_writer_alone():
    lock = SharedLock()
    order: list[str] = []
    go = threading.Event()
    with lock.shared(), lock.shared():  # two readers at once
        writer = _hold(lock.exclusive(), order, "writer", go)
        wait_until(lambda: lock._writers_waiting == 1, "the writer waiting")
        reader = _hold(lock.shared(), order, "reader", go)
        assert order == []
    wait_until(lambda: order, "the writer in")
    assert order == ["writer"], "the reader that came while the writer waited is held back"
    go.set()
    writer.join(60)
    reader.join(60)
    assert order == ["writer", "reader"]


def test_requests_naming_the_same_stores_share_them_and_others_wait_their_turn():
    from cairn_cli.daemon.server import _Busy, _Stores

    stores = _Stores()
    bound: list[str] = []
    inside: list[str] = []
    a_done, b_done = threading.Event(), threading.Event()
    first_a = _hold(stores.using(("a",), lambda: bound.append("a"), None), inside, "a", a_done)
    wait_until(lambda: inside == ["a"], "the first request in")
    with stores.using(("a",), lambda: bound.append("a"), None):  # the same databases: in at once
        pass
    too_late = stores.using(("b",), lambda: bound.append("b"), time.time() - 1)  # its client's deadline has passed
    with pytest.raises(_Busy, match="other databases were in use"), too_late:
        pass
    b = _hold(stores.using(("b",), lambda: bound.append("b"), None), inside, "b", b_done)
    wait_until(lambda: stores._switching == 1 and stores._waiting == 1, "b waiting for the room")
    late_a = _hold(stores.using(("a",), lambda: bound.append("a again"), None), inside, "late a", threading.Event())
    wait_until(lambda: stores._waiting == 2, "a newcomer for the bound stores waiting too")
    assert inside == ["a"], "it waits behind the one waiting to switch, which is not starved"
    a_done.set()
    first_a.join(60)
    wait_until(lambda: inside == ["a", "b"], "b in, with its own stores bound")
    assert stores.key == ("b",) and bound == ["a", "a", "b"]
    b_done.set()
    b.join(60)
    wait_until(lambda: inside == ["a", "b", "late a"], "a bound again for the newcomer")
    assert stores.key == ("a",) and bound[-1] == "a again" and late_a.is_alive()


def test_the_daemon_ranks_a_prompt_while_another_is_held_inside(cli, cairn_home, monkeypatch):
    """The old daemon served one request at a time: the second waited for the first's whole turn, then "busy"."""
    from cairn_cli.core.hooks import prompt as prompt_module
    from cairn_cli.daemon import client
    from cairn_cli.daemon.server import Daemon

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    monkeypatch.setattr(gc, "freeze", lambda: None)  # the daemon's, not this test process's
    daemon = Daemon(cairn_home, Settings(), lambda msg: None)
    daemon.load()
    inside, release = threading.Event(), threading.Event()
    real_rank = prompt_module.prompt_turn

    def held_rank(request, settings, engine):
        if request.session_id == "held":
            inside.set()
            assert release.wait(60)
        return real_rank(request, settings, engine)

    monkeypatch.setattr(prompt_module, "prompt_turn", held_rank)

    def ask(session):
        fields = {"prompt": "how do we release to production?", "session_id": session}
        env = client.client_environ()
        return daemon.serve_request({"op": "rank", "request": fields, "env": env, "deadline": time.time() + 60})

    held, got_held = _in_thread(ask, "held")
    assert inside.wait(60)
    assert daemon.health()["in_flight"] == 1
    other = ask("other")
    assert other["ok"] and other["result"]["ranker"] == "cairn" and other["result"]["memories"]
    assert held.is_alive(), "the first is still held inside"
    release.set()
    held.join(60)
    assert got_held["value"]["ok"] and got_held["value"]["result"]["ranker"] == "cairn"
    assert daemon.health()["in_flight"] == 0


def test_memories_a_refresh_embeds_are_the_stores_work_not_bound_by_the_prompts_deadline(cli, cairn_home, monkeypatch):
    """A prompt past its deadline is abandoned, but the memories its refresh embedded (written while no embedder
    answered) are embedded and stored all the same: the next prompt does not start that work over."""
    from cairn_cli.core.store import dedup, memories
    from cairn_cli.daemon import client
    from cairn_cli.daemon.server import Daemon
    from cairn_cli.db.tables import Memory

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    monkeypatch.setattr(gc, "freeze", lambda: None)
    daemon = Daemon(cairn_home, Settings(), lambda msg: None)
    daemon.load()
    entry = memories.validate_entry({"content": "Gift cards are redeemed with shop giftcard redeem CODE"})
    added = dedup.add_memories([entry], Settings(), embed=lambda texts: None)  # a Stop hook, no daemon answering
    assert Memory.get_by_id(added[0].id).embedding is None
    fields = {"prompt": "how do I redeem a gift card?", "session_id": "late"}
    with pytest.raises(DeadlineExceeded, match="no turn at the embedder"):
        daemon.handle({"op": "rank", "request": fields, "env": client.client_environ(), "deadline": time.time() - 1})
    stored = Memory.get_by_id(added[0].id)
    assert stored.embedding is not None and stored.embedding_model == "hashing"


def test_no_heartbeat_while_requests_are_stuck():
    from cairn_cli.daemon.server import STUCK_AFTER_S, Daemon

    daemon = Daemon(None, Settings(), lambda msg: None)
    assert daemon.progressing(), "idle"
    now = time.monotonic()
    daemon._running = {1: now - STUCK_AFTER_S - 1}
    daemon.last_done = now - STUCK_AFTER_S - 1
    assert not daemon.progressing(), "one request in for too long, none finished since"
    daemon.last_done = now
    assert daemon.progressing(), "others finish: the daemon works, slowly"
    daemon._running = {1: now - STUCK_AFTER_S - 1, 2: now}
    daemon.last_done = now - STUCK_AFTER_S - 1
    assert not daemon.progressing(), "new arrivals are no progress"


def test_a_turn_is_never_committed_past_its_deadline(cli, monkeypatch):
    """The deadline passes while the rows are written: the transaction is rolled back, nothing is logged (the
    client has fallen back and logs the turn itself)."""
    from cairn_cli.core.hooks import prompt as prompt_module
    from cairn_cli.core.store import deliveries

    assert cli("memory", "import", EXAMPLES).exit_code == 0
    s = Settings()
    deadline = time.time() + 60
    req = PromptRequest(prompt="how do we release to production?", session_id="late", k=3, commit_deadline=deadline)
    result = prompt_turn(
        PromptRequest(prompt=req.prompt, session_id="late", k=3, log=False), s, RankEngine.in_process(s)
    )

    class Clock:
        calls = 0

        @staticmethod
        def time():
            Clock.calls += 1
            return deadline - 1 if Clock.calls == 1 else deadline + 1  # in time to start, late to commit

    monkeypatch.setattr(prompt_module, "time", Clock)
    with pytest.raises(DeadlineExceeded, match="before the turn was committed"):
        prompt_module.log_turn(req, result, "global", s)
    assert deliveries.list_deliveries(s, session_id="late") == []
    # and a turn waiting behind another past its deadline gives up without writing
    monkeypatch.setattr(prompt_module, "time", time)
    with prompt_module._LOGGING:
        late = PromptRequest(prompt=req.prompt, session_id="late", k=3, commit_deadline=time.time() - 1)
        with pytest.raises(DeadlineExceeded, match="while another turn was being logged"):
            prompt_module.log_turn(late, result, "global", s)
    assert deliveries.list_deliveries(s, session_id="late") == []


def test_turns_logged_from_many_threads_at_once_are_all_logged_once(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    from cairn_cli.core.store import deliveries

    s = Settings()
    engine = RankEngine(get_encoder("hashing"))
    start = threading.Barrier(8)

    def one(i):
        start.wait(60)
        return prompt_turn(
            PromptRequest(prompt=f"how do we release to production? ({i})", session_id=f"t{i}", k=3), s, engine
        )

    runs = [_in_thread(one, i) for i in range(8)]
    for t, _ in runs:
        t.join(120)
    assert all("value" in out for _, out in runs), [out.get("error") for _, out in runs]
    for i in range(8):
        rows = deliveries.list_deliveries(s, session_id=f"t{i}")
        shown = len(runs[i][1]["value"].items)
        assert shown and len(rows) == shown and len({(r.turn, r.rank) for r in rows}) == shown


@pytest.mark.slow
def test_many_prompts_at_once_are_all_ranked_by_the_daemon_and_each_turn_logged_once(tmp_path):
    """N hooks of N sessions at once against a real daemon: every rank request is held inside the daemon until all N
    are in (a daemon serving one request at a time never gets there), then all are answered by the daemon
    (ranker cairn, not the fallback), and each turn is logged exactly once."""
    import json
    import sqlite3

    from tests.test_daemon import (
        Gates,
        deliveries,
        hook_lines,
        hook_payload,
        make_home,
        prompt_processes,
        run,
        start,
        wait_for,
    )

    n = 8
    home = make_home(tmp_path)
    gates = Gates(tmp_path)
    start(home, **gates.env)
    try:
        gates.close("rank")
        procs = prompt_processes(home, n)
        for i, proc in enumerate(procs):
            proc.stdin.write(hook_payload(f"how do I deploy to production? ({i})", session=f"s{i}"))
            proc.stdin.close()
        wait_for(lambda: gates.inside() == n, f"all {n} prompts inside the daemon at once")
        gates.open("rank")
        for proc in procs:
            assert proc.wait(timeout=120) == 0, proc.stderr.read()
            assert "<memory" in proc.stdout.read()
    finally:
        gates.open("rank")
        run(home, "daemon", "stop", "--force")
    lines = hook_lines(home)
    assert len(lines) == n and all(" ranker=cairn " in line for line in lines), lines
    rows = [d for d in deliveries(home) if d["session_id"].startswith("s")]
    assert {d["session_id"] for d in rows} == {f"s{i}" for i in range(n)}
    assert all(d["ranker"] == "cairn" for d in rows)
    keys = [(d["session_id"], d["turn"], d["rank"]) for d in rows]
    assert len(keys) == len(set(keys)), "no delivery logged twice"
    with sqlite3.connect(home / "ephemeral.db") as conn:
        turns = conn.execute("SELECT session_id, COUNT(*) FROM hook_state GROUP BY session_id").fetchall()
    assert sorted(turns) == sorted((f"s{i}", 1) for i in range(n)), "each session's turn logged once"
    assert json.loads(run(home, "daemon", "status", "--json").stdout)["state"] == "stopped"
