"""`cairn replay run`: real sessions replayed through two generation rules, judged blind, position-swapped and
pairwise. An analysis tool, never the live experiment: its verdicts inform, they never promote. More in
docs/learning.md."""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from cairn_cli.clock import iso_now, utcnow
from cairn_cli.config import Settings
from cairn_cli.core.replay.sessions import ReplaySession, ReplayTurn
from cairn_cli.errors import CairnError, InvalidInput, NotFound

ROLES = ("writer", "judge", "coldread")
PROMPTS = {"writer": "writer-v1", "judge": "judge-pairwise-v1", "coldread": "coldread-v1"}
MAX_TOKENS = {"writer": 1200, "judge": 300, "coldread": 120}
EXPECTED_OUTPUT = {"writer": 300, "judge": 120, "coldread": 60}  # tokens a dry run's estimate assumes
# USD per million tokens (input, output), by model-name prefix; anything else needs --price-in / --price-out
PRICES = {
    "claude-opus": (15.0, 75.0),
    "claude-sonnet": (3.0, 15.0),
    "claude-haiku": (1.0, 5.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4o": (2.5, 10.0),
}
RETRY_SUFFIX = "\n\nYour previous answer was not one valid JSON object. Answer again with the JSON object only."
NONE_WRITTEN = "(none)"
_JSON = re.compile(r"\{.*\}", re.DOTALL)


class CapReached(CairnError):
    """A call would pass --max-calls or --max-cost-usd: the run stops cleanly with a partial report."""


@dataclass
class ArmSpec:
    arm: str  # A | B
    version: str
    rules: str  # the rules text the arm's writer gets (rendered, with B's instruction)


@dataclass
class ReplayConfig:
    transcripts: str | None
    limit: int | None
    since: str | None
    backend: str
    cmd: str | None
    base_url: str | None
    writer_model: str
    judge_model: str
    a: dict
    b: dict
    seed: int = 13
    concurrency: int = 1
    redact: bool = True
    max_calls: int | None = None
    max_cost_usd: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    k: int = 5
    prompts: dict = field(default_factory=lambda: dict(PROMPTS))

    def as_dict(self) -> dict:
        return asdict(self)


# -- the arms --------------------------------------------------------------------------------------------------


def resolve_arms(
    settings: Settings, a: str | None, b: str | None, b_instruction: str | None
) -> tuple[ArmSpec, ArmSpec]:
    """A: `a` (a version cairn knows), default the live rules. B: `b_instruction` (an ad-hoc candidate on A's
    rules), else `b`, default the live experiment's B, else the first queued candidate."""
    from cairn_cli.core.experiment import ab
    from cairn_cli.core.experiment import rules as generation_rules

    live = generation_rules.live(settings)
    current = ab.arms(settings, live)
    known: dict[str, tuple[generation_rules.Rules, str | None]] = {live.version: (live, None)}
    if generation_rules.SHIPPED_VERSION not in known:
        known[generation_rules.SHIPPED_VERSION] = (
            generation_rules.Rules(generation_rules.SHIPPED_VERSION, generation_rules.shipped_text()),
            None,
        )
    candidates = ([current.b_instruction] if current.b_instruction else []) + list(current.queue)
    for text in candidates:
        known.setdefault(ab.b_version(live.version, text), (live, text))
    if a is not None and a not in known:
        raise InvalidInput(f"unknown generation-rule version {a!r}", f"pass --a one of: {', '.join(known)}")
    base, extra = known[a or live.version]
    if extra is not None:
        raise InvalidInput(f"--a {a} is a candidate, not a set of rules", "pass --a with the live or shipped version")
    arm_a = ArmSpec("A", base.version, generation_rules.render(base, "app"))
    if b_instruction:
        text = " ".join(b_instruction.split())
        return arm_a, ArmSpec("B", ab.b_version(base.version, text), generation_rules.render(base, "app", text))
    if b is None:
        if not candidates:
            raise InvalidInput(
                "there is no arm B: no live candidate and an empty queue",
                'pass --b-instruction "..." or queue one with cairn ab queue add',
            )
        b = ab.b_version(live.version, candidates[0])
    if b not in known:
        raise InvalidInput(f"unknown generation-rule version {b!r}", f"pass --b one of: {', '.join(known)}")
    rules_b, extra_b = known[b]
    return arm_a, ArmSpec("B", b, generation_rules.render(rules_b, "app", extra_b))


# -- prompts ---------------------------------------------------------------------------------------------------


def template(name: str) -> str:
    return resources.files("cairn_cli").joinpath(f"data/replay/{name}.md").read_text(encoding="utf-8")


def fill(text: str, **values: str) -> str:
    """Replace `{name}` for the given names only (the templates hold literal JSON braces)."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def render_memories(memories: list) -> str:
    if not memories:
        return NONE_WRITTEN
    return "\n".join(
        f"- [{m.kind}] {m.content}" + (f" (keywords: {', '.join(m.keywords)})" if m.keywords else "") for m in memories
    )


def parse_json(answer: str) -> dict | None:
    """The one JSON object of an answer (a code fence or a sentence around it is tolerated), or None."""
    match = _JSON.search(answer or "")
    if not match:
        return None
    try:
        value = json.loads(match.group(0))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- calls -----------------------------------------------------------------------------------------------------


def price(model: str, cfg: ReplayConfig) -> tuple[float, float] | None:
    """USD per million (input, output) tokens: --price-in/--price-out, else 0 for the command backend (a local
    program: its tokens are estimates and what it bills, if anything, is its own), else the table by model prefix,
    else unknown."""
    if cfg.price_in is not None or cfg.price_out is not None:
        return (cfg.price_in or 0.0, cfg.price_out or 0.0)
    if cfg.backend == "command":
        return (0.0, 0.0)
    for prefix, pair in PRICES.items():
        if model.startswith(prefix):
            return pair
    return None


def call_key(backend: str, model: str, prompt: str) -> str:
    return hashlib.sha256(f"{backend}\0{model}\0{prompt}".encode()).hexdigest()


class Caller:
    """Every model call of a run: redact, look up the cache, respect the caps, call, store, account."""

    def __init__(self, backend, cfg: ReplayConfig, run_id: str):
        self.backend, self.cfg, self.run_id = backend, cfg, run_id
        self.lock = threading.Lock()
        self.calls = 0  # made (paid) by this run
        self.cost = 0.0
        self.sent: dict = {
            "backend": cfg.backend,
            "base_url": cfg.base_url,
            "cmd": cfg.cmd,
            "redacted": {},
            "roles": {r: {"calls": 0, "cached": 0, "input_tokens": 0, "output_tokens": 0, "chars": 0} for r in ROLES},
        }

    def call(self, role: str, model: str, prompt: str) -> str:
        from cairn_cli.core.redact import redact, scrub
        from cairn_cli.db.tables import ReplayCall

        if self.cfg.redact:
            prompt, found = redact(prompt)
        else:
            found = {}
        key = call_key(self.cfg.backend, model, prompt)
        with self.lock:
            for kind, n in found.items():
                self.sent["redacted"][kind] = self.sent["redacted"].get(kind, 0) + n
            cached = ReplayCall.get_or_none(ReplayCall.key == key)
            if cached is not None:
                self.sent["roles"][role]["cached"] += 1
                return cached.answer
            self._reserve(role, model, prompt)
        try:
            answer = self.backend.complete(prompt, model=model, max_tokens=MAX_TOKENS[role])
        except BaseException:
            with self.lock:
                self.calls -= 1  # not paid for: the slot is free again
            raise
        with self.lock:
            ReplayCall.insert(
                key=key,
                backend=self.cfg.backend,
                model=model,
                role=role,
                answer=scrub(answer.text),  # what the model wrote is kept redacted, as everything cairn stores
                input_tokens=answer.input_tokens,
                output_tokens=answer.output_tokens,
                run_id=self.run_id,
                created_at=utcnow(),
            ).on_conflict_ignore().execute()
            rates = price(model, self.cfg) or (0.0, 0.0)
            self.cost += (answer.input_tokens * rates[0] + answer.output_tokens * rates[1]) / 1e6
            sent = self.sent["roles"][role]
            sent["calls"] += 1
            sent["input_tokens"] += answer.input_tokens
            sent["output_tokens"] += answer.output_tokens
            sent["chars"] += len(prompt)
        return scrub(answer.text)

    def _reserve(self, role: str, model: str, prompt: str) -> None:
        """Claim one call under the caps (the lock held): a call that would pass one is never made."""
        cfg = self.cfg
        if cfg.max_calls is not None and self.calls >= cfg.max_calls:
            raise CapReached(f"--max-calls {cfg.max_calls} reached", "rerun with --resume and a higher cap")
        if cfg.max_cost_usd is not None:
            rates = price(model, cfg)
            if rates is None:
                raise InvalidInput(
                    f"no price known for {model}: --max-cost-usd cannot be kept", "pass --price-in and --price-out"
                )
            worst = (len(prompt) / 4 * rates[0] + MAX_TOKENS[role] * rates[1]) / 1e6  # the most this call can cost
            if self.cost + worst > cfg.max_cost_usd:
                raise CapReached(
                    f"--max-cost-usd {cfg.max_cost_usd:g} reached (spent {self.cost:.4f})",
                    "rerun with --resume and a higher cap",
                )
        self.calls += 1


# -- one session -----------------------------------------------------------------------------------------------


@dataclass
class Written:
    arm: str
    turn: int
    content: str
    keywords: list[str]
    kind: str
    coldread: int | None = None


@dataclass
class SessionResult:
    session: str
    turns: int
    written: list[Written] = field(default_factory=list)
    pairs: list = field(default_factory=list)  # analysis.JudgedPair
    mappings: list[dict] = field(default_factory=list)  # per judged turn: {turn, x_is_b}
    writer_problems: dict = field(default_factory=dict)  # arm -> answers with no or a broken [cm] block
    judge_unparsed: int = 0
    coldread_unparsed: int = 0


def x_is_b(seed: int, session: str, turn: int) -> bool:
    """The blinding draw of one pair, reproducible from the run's seed (and stored with the result)."""
    return random.Random(f"{seed}:{session}:{turn}").random() < 0.5


def _same(a: list, b: list) -> bool:
    """The arms wrote the same memories (text, keywords and kind, up to case and spacing): nothing to judge."""
    from cairn_cli.core.text import normalise

    def key(memories: list) -> list:
        return sorted((normalise(m.content), sorted(normalise(k) for k in m.keywords), m.kind) for m in memories)

    return key(a) == key(b)


def replay_session(session: ReplaySession, arms: tuple[ArmSpec, ArmSpec], caller: Caller, cfg: ReplayConfig):
    from cairn_cli.core.labels.cm import parse_cm
    from cairn_cli.core.replay.analysis import CRITERIA, JudgedPair

    result = SessionResult(session.id, len(session.turns))
    written: dict[str, list] = {"A": [], "B": []}
    writer, judge = template(cfg.prompts["writer"]), template(cfg.prompts["judge"])
    for turn in session.turns:
        outs = {}
        for arm in arms:
            prompt = fill(
                writer,
                rules=arm.rules,
                written=render_memories(written[arm.arm]),
                prompt=turn.prompt,
                response=turn.response,
            )
            cm = parse_cm(
                caller.call("writer", cfg.writer_model, prompt), source_ref=arm.version, session_id=session.id
            )
            if not cm.found or cm.problems:
                result.writer_problems[arm.arm] = result.writer_problems.get(arm.arm, 0) + 1
            outs[arm.arm] = cm.memories
            written[arm.arm].extend(cm.memories)
            result.written.extend(
                Written(arm.arm, turn.index, m.content, list(m.keywords), m.kind) for m in cm.memories
            )
        if _same(outs["A"], outs["B"]):
            continue
        flip = x_is_b(cfg.seed, session.id, turn.index)
        x, y = (outs["B"], outs["A"]) if flip else (outs["A"], outs["B"])
        verdicts = [
            _judge(caller, cfg, judge, turn, first, second, labels, result)
            for first, second, labels in ((x, y, ("X", "Y")), (y, x, ("Y", "X")))
        ]
        result.mappings.append({"turn": turn.index, "x_is_b": flip})
        for criterion in CRITERIA:
            one, two = (v.get(criterion) if v else None for v in verdicts)
            result.pairs.append(JudgedPair(session.id, turn.index, criterion, flip, one, two))
    coldread = template(cfg.prompts["coldread"])
    for w in result.written:
        prompt = fill(coldread, kind=w.kind, keywords=", ".join(w.keywords), content=w.content)
        w.coldread = _score(caller, cfg, prompt, result)
    return result


def _judge(caller, cfg, judge, turn: ReplayTurn, first, second, labels, result) -> dict | None:
    """One judge call (asked again once when its answer is not the JSON asked for): criterion -> first|second|tie."""
    from cairn_cli.core.replay.analysis import CRITERIA

    prompt = fill(
        judge,
        prompt=turn.prompt,
        response=turn.response,
        first=render_memories(first),
        second=render_memories(second),
        first_label=labels[0],
        second_label=labels[1],
    )
    for attempt in (prompt, prompt + RETRY_SUFFIX):
        data = parse_json(caller.call("judge", cfg.judge_model, attempt))
        if data and all(data.get(c) in ("first", "second", "tie") for c in CRITERIA):
            return {c: data[c] for c in CRITERIA}
    result.judge_unparsed += 1
    return None


def _score(caller, cfg, prompt: str, result) -> int | None:
    for attempt in (prompt, prompt + RETRY_SUFFIX):
        data = parse_json(caller.call("coldread", cfg.judge_model, attempt))
        score = data.get("score") if data else None
        if isinstance(score, int) and not isinstance(score, bool) and 0 <= score <= 3:
            return score
    result.coldread_unparsed += 1
    return None


# -- metrics beside the judge ----------------------------------------------------------------------------------


def arm_metrics(sessions: list[ReplaySession], results: list[SessionResult], settings: Settings, embed) -> dict:
    """Per arm: memories written, dedup rate, findability backtest, cold-read mean (each with its n)."""
    from cairn_cli.core.labels.engagement import MemoryText, cosine, engagement_decisions
    from cairn_cli.core.metrics import mean_interval
    from cairn_cli.core.text import normalise

    by_id = {s.id: s for s in sessions}
    out = {}
    for arm in ("A", "B"):
        memories = dups = hits = eligible = 0
        scores: list[float] = []
        for r in results:
            mine = [w for w in r.written if w.arm == arm]
            memories += len(mine)
            scores += [float(w.coldread) for w in mine if w.coldread is not None]
            if not mine:
                continue
            vectors = embed([_memory_text(w) for w in mine])
            for i, w in enumerate(mine):
                earlier = range(i)
                same_text = any(normalise(mine[j].content) == normalise(w.content) for j in earlier)
                close = any(cosine(vectors[i], vectors[j]) >= settings.DEDUP_SEMANTIC_MIN for j in earlier)
                dups += same_text or close
            session = by_id[r.session]
            for turn in session.turns:
                before = [(w, v) for w, v in zip(mine, vectors) if w.turn < turn.index]
                if not before:
                    continue
                texts = [MemoryText(i, w.content, w.keywords) for i, (w, _) in enumerate(before)]
                decisions, _ = engagement_decisions(texts, turn.response, turn.prompt, settings, embed)
                used = [d.memory_id for d in decisions if d.engaged]
                if not used:
                    continue
                top = _top_k(before, turn.prompt, settings, embed, k=5)
                eligible += len(used)
                hits += sum(i in top for i in used)
        mean, low, high = mean_interval(scores)
        out[arm] = {
            "memories": memories,
            "dedup_rate": dups / memories if memories else None,
            "duplicates": dups,
            "findability": hits / eligible if eligible else None,
            "findability_hits": hits,
            "findability_n": eligible,
            "coldread_mean": mean,
            "coldread_ci": [low, high],
            "coldread_n": len(scores),
        }
    return out


def _memory_text(w: Written) -> str:
    return " ".join([w.content, *w.keywords])


def _top_k(before: list, prompt: str, settings: Settings, embed, *, k: int) -> set[int]:
    """The positions of `before` (memory, vector) in cairn's top k for `prompt`: the composite pipeline over the
    arm's session-local store, no floor, no reranker."""
    import numpy as np

    from cairn_cli.core.ids import GLOBAL_SCOPE
    from cairn_cli.core.ranking.pipeline import select
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=len(before[0][1]))
    now = utcnow()
    for i, (w, vec) in enumerate(before):
        table.upsert(Candidate(i, w.content, list(w.keywords), GLOBAL_SCOPE, w.kind, 0.75, now), np.asarray(vec))
    sims = table.similarities(np.asarray(embed([prompt])[0]))
    chosen = select(table, prompt, sims, scope=None, k=k, settings=settings, reranker=None, ranker="replay").chosen
    return {s.candidate.id for s in chosen}


# -- the run ---------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    sessions: int
    turns: int
    calls: dict
    input_tokens: dict
    output_tokens: dict
    cost_usd: float | None
    notes: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def plan(sessions: list[ReplaySession], arms: tuple[ArmSpec, ArmSpec], cfg: ReplayConfig) -> Plan:
    """What a run would call, without calling: writer calls are exact (2 per turn); judge calls are at most 2 per
    turn (only turns where the arms differ are judged, + a retry each when an answer is unparseable); cold reads
    assume one memory per turn per arm. Input tokens from the rendered prompts (4 characters a token), output
    tokens at EXPECTED_OUTPUT per call."""
    writer, judge, coldread = (template(cfg.prompts[r]) for r in ROLES)
    turns = [t for s in sessions for t in s.turns]
    chars = {"writer": 0, "judge": 0, "coldread": 0}
    for t in turns:
        for arm in arms:
            chars["writer"] += len(
                fill(writer, rules=arm.rules, written=NONE_WRITTEN, prompt=t.prompt, response=t.response)
            )
        chars["judge"] += 2 * len(fill(judge, prompt=t.prompt, response=t.response)) + 2 * 600
        chars["coldread"] += 2 * (len(coldread) + 300)
    calls = {"writer": 2 * len(turns), "judge": 2 * len(turns), "coldread": 2 * len(turns)}
    input_tokens = {r: chars[r] // 4 for r in ROLES}
    output_tokens = {r: calls[r] * EXPECTED_OUTPUT[r] for r in ROLES}
    cost: float | None = 0.0
    notes: list[str] = []
    for role in ROLES:
        model = cfg.writer_model if role == "writer" else cfg.judge_model
        rates = price(model, cfg)
        if rates is None:
            notes.append(f"no price known for {model}: pass --price-in / --price-out for a cost")
            cost = None
            break
        cost = (cost or 0.0) + (input_tokens[role] * rates[0] + output_tokens[role] * rates[1]) / 1e6
    notes.append("judge and cold-read calls are upper bounds: only turns where the arms differ are judged")
    return Plan(len(sessions), len(turns), calls, input_tokens, output_tokens, cost, notes)


def new_run_id() -> str:
    return "replay-" + iso_now().replace(":", "").replace("-", "")


def execute(
    sessions: list[ReplaySession],
    arms: tuple[ArmSpec, ArmSpec],
    cfg: ReplayConfig,
    settings: Settings,
    *,
    backend,
    embed,
    run_id: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Replay `sessions`, judge, measure, analyse; store the run (its config, what was sent, the report) and return
    the report. A cap reached stops the run cleanly: the sessions finished are analysed, the report is partial."""
    from cairn_cli.core.redact import scrub_tree
    from cairn_cli.core.replay.analysis import compare, session_scores
    from cairn_cli.db.tables import ReplayRun

    run_id = run_id or new_run_id()
    now = utcnow()
    config = scrub_tree(cfg.as_dict())  # a credential in --cmd or --base-url is not kept (pass it in the environment)
    ReplayRun.insert(
        id=run_id, status="running", config=config, sent={}, report=None, created_at=now, updated_at=now
    ).on_conflict(
        conflict_target=[ReplayRun.id], update={ReplayRun.status: "running", ReplayRun.updated_at: now}
    ).execute()
    caller = Caller(backend, cfg, run_id)
    results: list[SessionResult] = []
    stopped: str | None = None

    def one(session: ReplaySession) -> SessionResult | None:
        nonlocal stopped
        if stopped:
            return None
        try:
            return replay_session(session, arms, caller, cfg)
        except CapReached as exc:
            stopped = exc.message
            return None
        finally:
            if progress:
                progress(1)

    with ThreadPoolExecutor(max_workers=max(1, cfg.concurrency)) as pool:
        for res in pool.map(one, sessions):
            if res is not None:
                results.append(res)
    done = {r.session for r in results}
    finished = [s for s in sessions if s.id in done]
    pairs = [p for r in results for p in r.pairs]
    comparisons = compare(pairs, seed=cfg.seed)
    report = {
        "run": run_id,
        "status": "partial" if stopped else "complete",
        "stopped": stopped,
        "arms": {"A": asdict(arms[0]) | {"rules": None}, "B": asdict(arms[1]) | {"rules": None}},
        "b_instruction": cfg.b.get("instruction"),
        "models": {"writer": cfg.writer_model, "judge": cfg.judge_model, "backend": cfg.backend},
        "prompts": cfg.prompts,
        "sessions": len(finished),
        "sessions_planned": len(sessions),
        "turns": sum(r.turns for r in results),
        "judged_turns": sum(len(r.mappings) for r in results),
        "criteria": {c: v.as_dict() for c, v in comparisons.items()},
        "per_session": {
            session: {c: score.as_dict() for c, score in by.items()} for session, by in session_scores(pairs).items()
        },
        "arms_metrics": arm_metrics(finished, results, settings, embed),
        "writer_problems": {arm: sum(r.writer_problems.get(arm, 0) for r in results) for arm in ("A", "B")},
        "judge_unparsed": sum(r.judge_unparsed for r in results),
        "coldread_unparsed": sum(r.coldread_unparsed for r in results),
        "calls": {"made": caller.calls, "cost_usd": round(caller.cost, 6), "sent": caller.sent},
        "mappings": {r.session: r.mappings for r in results},
        "offline": "an analysis of replayed transcripts, not the live experiment: it never promotes",
        "finished_at": iso_now(),
    }
    ReplayRun.update(status=report["status"], sent=caller.sent, report=scrub_tree(report), updated_at=utcnow()).where(
        ReplayRun.id == run_id
    ).execute()
    return report


def get_run(run_id: str):
    from cairn_cli.db.tables import ReplayRun

    row = ReplayRun.get_or_none(ReplayRun.id == run_id)
    if row is None:
        raise NotFound(f"no replay run {run_id!r}", "list them with cairn replay list")
    return row


def list_runs() -> list[dict]:
    from cairn_cli.db.tables import ReplayRun

    out = []
    for row in ReplayRun.select().order_by(ReplayRun.created_at.desc()):
        report = row.report or {}
        out.append(
            {
                "run": row.id,
                "status": row.status,
                "created_at": row.created_at.isoformat(timespec="seconds"),
                "a": (row.config.get("a") or {}).get("version"),
                "b": (row.config.get("b") or {}).get("version"),
                "sessions": report.get("sessions"),
                "verdicts": {c: v.get("verdict") for c, v in (report.get("criteria") or {}).items()},
            }
        )
    return out


def latest_verdict(b_version: str | None) -> dict | None:
    """The newest finished replay of candidate `b_version` (`cairn ab status`, `ab queue list`), or None."""
    for run in list_runs() if b_version else []:
        if run["b"] == b_version and run["status"] in ("complete", "partial"):
            return run
    return None


def verdict_line(run: dict | None) -> str:
    """One line for beside a candidate's live data, labelled as offline."""
    if run is None:
        return "offline replay: none yet (cairn replay run)"
    verdicts = ", ".join(f"{c} {v}" for c, v in run["verdicts"].items())
    return f"offline replay {run['run']} ({run['status']}, {run['sessions']} sessions; not the live experiment): {verdicts}"


def plot(report: dict, path: Path) -> Path:
    """B's win rate per criterion with its bootstrap interval, 0.5 marked; PNG."""
    from cairn_cli.core.plotting import figure

    fig, path = figure(path, (7, 4))
    ax = fig.add_subplot(1, 1, 1)
    names, rates, lows, highs = [], [], [], []
    for criterion, c in report["criteria"].items():
        if c.get("win_rate") is None:
            continue
        names.append(criterion)
        rates.append(c["win_rate"])
        low = c["win_rate"] if c.get("low") is None else c["low"]
        high = c["win_rate"] if c.get("high") is None else c["high"]
        lows.append(c["win_rate"] - low)
        highs.append(high - c["win_rate"])
    ax.errorbar(range(len(names)), rates, yerr=[lows, highs], fmt="o", capsize=5)
    ax.axhline(0.5, linestyle="--", color="grey")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("B's win rate over A (sessions)")
    ax.set_title(f"{report['run']}: B {report['arms']['B']['version']} vs A {report['arms']['A']['version']}")
    fig.savefig(path)
    return path
