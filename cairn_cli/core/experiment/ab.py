"""The write-side live A/B: does one speculative instruction make the agent write memories that get USED more?
Each main-agent prompt draws arm A (the live rules) or B (plus one instruction); the analysis is per writing session,
a one-sided sequential probability ratio test with a grade guard (docs/ab-test.md has the pre-registered design)."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import random
from dataclasses import asdict, dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.experiment import rules as generation_rules
from cairn_cli.core.metrics import wilson
from cairn_cli.core.store import state
from cairn_cli.errors import InvalidInput

VERSIONS_KEY = "ab_arm_versions"
B_KEY = "ab_b_instruction"
QUEUE_KEY = "ab_queue"
AB_TAG = "cairn-ab"
SHIPPED_B = (
    "When a memory records a fix, put the symptom a future session will search for (the exact error "
    "message or failing command) in its keywords."
)


def b_version(a_version: str, instruction: str) -> str:
    return f"{a_version}+b{hashlib.sha256(instruction.encode()).hexdigest()[:6]}"


@dataclass
class Arms:
    versions: dict  # {"A": version, "B": version or None}
    b_instruction: str | None
    queue: list


KEYS = (B_KEY, VERSIONS_KEY, QUEUE_KEY)  # the machine-managed state the arms are read from


def arms(settings: Settings, live: generation_rules.Rules | None = None) -> Arms:
    """The arms in force: machine-managed state, else A = the live rules' version (`live`, when the caller has
    read them already) and B = the shipped candidate."""
    return arms_from(state.get_many(KEYS, settings), settings, live)


def arms_from(values: dict, settings: Settings, live: generation_rules.Rules | None = None) -> Arms:
    """The arms of machine-managed `values` (state.get_many of at least KEYS)."""
    instruction = values.get(B_KEY, SHIPPED_B)
    versions = values.get(VERSIONS_KEY)
    if versions is None:
        a_version = (live or generation_rules.live(settings)).version
        versions = {"A": a_version, "B": b_version(a_version, instruction) if instruction else None}
    return Arms(dict(versions), instruction, list(values.get(QUEUE_KEY, [])))


def assign(
    session_id: str, turn: int, *, is_subagent: bool, settings: Settings, live: generation_rules.Rules | None = None
) -> tuple[str | None, str, str | None]:
    """(arm or None, the version that stamps the turn's memories, arm B's instruction when B). Seeded per prompt
    with AB_SEED (tests, simulations), else truly random."""
    return draw(arms(settings, live), session_id, turn, is_subagent=is_subagent, settings=settings)


def draw(
    current: Arms, session_id: str, turn: int, *, is_subagent: bool, settings: Settings
) -> tuple[str | None, str, str | None]:
    """assign() with the arms in force already read."""
    if not settings.AB_TEST_ENABLED or is_subagent or not current.b_instruction or not current.versions.get("B"):
        return None, current.versions["A"], None
    seed = settings.AB_SEED
    rng = random.Random(f"{seed}:{session_id}:{turn}") if seed else random.SystemRandom()
    arm = "B" if rng.random() < 0.5 else "A"
    return arm, current.versions[arm], current.b_instruction if arm == "B" else None


def assign_turn(session_id: str, turn: int | None, *, is_subagent: bool, settings: Settings) -> dict:
    """Draw one prompt's arm and record it in the turn's hook_state (what the prompt hook does for every prompt).
    `turn` None: the session's next."""
    from cairn_cli.core.store import deliveries, hookstate
    from cairn_cli.db.tables import ephemeral_proxy

    turn = deliveries.next_turn(session_id, settings) if turn is None else turn
    arm, version, instruction = assign(session_id, turn, is_subagent=is_subagent, settings=settings)
    with ephemeral_proxy.atomic():
        hookstate.record_turn(
            session_id, turn, context_key="", hook={"arm": arm, "is_subagent": is_subagent, "source_ref": version}
        )
    return {"session_id": session_id, "turn": turn, "arm": arm, "version": version, "b_instruction": instruction}


def render_b(instruction: str, version: str) -> str:
    return f'<{AB_TAG} arm="B" version="{version}">\n- {instruction.strip()}\n</{AB_TAG}>'


# -- analysis ---------------------------------------------------------------------------------------------------


@dataclass
class ArmStats:
    arm: str
    version: str | None
    memories: int = 0
    sessions: int = 0
    memories_delivered: int = 0
    deliveries: int = 0
    graded: int = 0
    mean_grade: float | None = None
    engagement: dict = field(default_factory=dict)  # method -> {n, engaged, rate, ci}; never pooled
    untagged: int = 0


@dataclass
class Verdict:
    """The pre-registered A/B gate's verdict on the data so far, with the numbers behind it."""

    decision: str  # promote | retire | continue | off
    reason: str
    wins: int = 0
    losses: int = 0
    ties: int = 0
    llr: float = 0.0
    upper: float = 0.0
    lower: float = 0.0
    guard: str = ""
    arms: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def session_outcomes(settings: Settings, versions: dict, now: dt.datetime | None = None) -> tuple[dict, list[ArmStats]]:
    """Per MATURE writing session: {arm: [lexical engaged, lexical decided]} from the deliveries inside each
    memory's window; and each arm's descriptive stats (all deliveries).

    A session enters the test only once its newest memory is AB_MATURE_DAYS old, and only deliveries within that
    many days of a memory's creation count: a session's outcome is then fixed when it is first counted, which is
    what keeps the likelihood ratio a martingale under cron's repeated looks (re-scoring sessions as deliveries
    trickle in measured 5.3% false promotions at alpha 5% in scripts/sim_ab.py; the fixed window 4.0%, and more
    power: 85% against 74% at +0.10 engagement)."""
    from cairn_cli.db.tables import Memory, MemoryDelivery

    now = now or utcnow()
    window = dt.timedelta(days=settings.AB_MATURE_DAYS)
    by_version = {v: arm for arm, v in versions.items() if v}
    mems = list(
        Memory.select(Memory.id, Memory.session_id, Memory.source_ref, Memory.created_at).where(
            Memory.source_ref.in_(list(by_version))
        )
    )
    arm_of = {m.id: by_version[m.source_ref] for m in mems}
    session_of = {m.id: m.session_id or f"memory-{m.id}" for m in mems}
    closes = {m.id: m.created_at + window for m in mems}
    newest: dict[str, dt.datetime] = {}
    for m in mems:
        newest[session_of[m.id]] = max(newest.get(session_of[m.id], m.created_at), m.created_at)
    mature = {sess for sess, created in newest.items() if created + window <= now}
    stats = {arm: ArmStats(arm, versions.get(arm)) for arm in ("A", "B")}
    for m in mems:
        stats[arm_of[m.id]].memories += 1
    for arm in stats:
        stats[arm].sessions = len({session_of[i] for i, a in arm_of.items() if a == arm})
    per_session: dict[str, dict[str, list[int]]] = {}
    delivered: dict[str, set[int]] = {"A": set(), "B": set()}
    grades: dict[str, list[int]] = {"A": [], "B": []}
    methods: dict[str, dict[str, list[int]]] = {"A": {}, "B": {}}
    rows = (
        MemoryDelivery.select(
            MemoryDelivery.memory_id,
            MemoryDelivery.grade,
            MemoryDelivery.engaged,
            MemoryDelivery.engaged_method,
            MemoryDelivery.delivered_at,
        ).where(MemoryDelivery.memory_id.in_(list(arm_of)) & (MemoryDelivery.layer != "subagent"))
        if arm_of
        else []
    )
    for r in rows:
        arm = arm_of[r.memory_id]
        s = stats[arm]
        s.deliveries += 1
        delivered[arm].add(r.memory_id)
        if r.grade is not None:
            grades[arm].append(r.grade)
        if r.engaged is not None:
            if r.engaged_method is None:
                s.untagged += 1
                continue
            counts = methods[arm].setdefault(r.engaged_method, [0, 0])
            counts[0] += int(bool(r.engaged))
            counts[1] += 1
            if (
                r.engaged_method == "lexical"
                and session_of[r.memory_id] in mature
                and r.delivered_at <= closes[r.memory_id]
            ):
                cell = per_session.setdefault(session_of[r.memory_id], {}).setdefault(arm, [0, 0])
                cell[0] += int(bool(r.engaged))
                cell[1] += 1
    for arm, s in stats.items():
        s.memories_delivered = len(delivered[arm])
        s.graded = len(grades[arm])
        s.mean_grade = round(sum(grades[arm]) / len(grades[arm]), 4) if grades[arm] else None
        s.engagement = {
            m: {
                "n": n,
                "engaged": e,
                "rate": round(e / n, 4) if n else None,
                "ci": tuple(None if x is None else round(x, 4) for x in wilson(e, n)),
            }
            for m, (e, n) in sorted(methods[arm].items())
        }
    return per_session, [stats["A"], stats["B"]]


def sprt(wins: int, losses: int, *, p1: float, alpha: float, beta: float, min_sessions: int) -> tuple[str, float, str]:
    """(promote | retire | continue, log likelihood ratio, why) for H1: P(B wins a session) = p1 vs H0: 0.5.
    Promote needs LR >= 1/alpha (Ville: P_H0(ever) <= alpha, whatever the number of looks) and min_sessions."""
    llr = wins * math.log(p1 / 0.5) + losses * math.log((1 - p1) / 0.5)
    upper, lower = math.log(1 / alpha), math.log(beta)
    tally = f"B won {wins}, lost {losses} sessions"
    if wins + losses < min_sessions:
        return (
            "continue",
            llr,
            f"thin data: {wins + losses} sessions decided < AB_MIN_SESSIONS {min_sessions} ({tally})",
        )
    if llr >= upper:
        return "promote", llr, f"B wins: log LR {llr:.2f} >= {upper:.2f} ({tally})"
    if llr <= lower:
        return "retire", llr, f"B is not better: log LR {llr:.2f} <= {lower:.2f} ({tally})"
    return "continue", llr, f"not yet decided: log LR {llr:.2f} in ({lower:.2f}, {upper:.2f}) ({tally})"


def evaluate(settings: Settings) -> Verdict:
    """The pre-registered gate on the data so far (pure read: safe to run as often as cron likes)."""
    current = arms(settings)
    if not current.versions.get("B"):
        return Verdict("off", "no arm B: queue a candidate with `cairn ab queue add`")
    per_session, arm_stats = session_outcomes(settings, current.versions)
    wins = losses = ties = 0
    for cells in per_session.values():
        if "A" in cells and "B" in cells:
            rate_a, rate_b = cells["A"][0] / cells["A"][1], cells["B"][0] / cells["B"][1]
            wins, losses, ties = wins + (rate_b > rate_a), losses + (rate_b < rate_a), ties + (rate_b == rate_a)
    verdict, llr, why = sprt(
        wins,
        losses,
        p1=settings.AB_SPRT_P1,
        alpha=settings.AB_ALPHA,
        beta=settings.AB_BETA,
        min_sessions=settings.AB_MIN_SESSIONS,
    )
    d = Verdict(
        "continue",
        why,
        wins,
        losses,
        ties,
        round(llr, 4),
        round(math.log(1 / settings.AB_ALPHA), 4),
        round(math.log(settings.AB_BETA), 4),
        arms=[asdict(s) for s in arm_stats],
    )
    if verdict != "promote":
        d.decision = verdict
        return d
    a, b = arm_stats
    if a.graded < settings.AB_MIN_GRADES or b.graded < settings.AB_MIN_GRADES:
        d.guard = f"too few grades for the guard (A {a.graded}, B {b.graded} < {settings.AB_MIN_GRADES})"
        d.reason = f"{why}, but {d.guard}"
        return d
    if b.mean_grade < a.mean_grade - settings.AB_GRADE_TOLERANCE:
        d.guard = f"B's mean grade {b.mean_grade:.2f} < A's {a.mean_grade:.2f} - {settings.AB_GRADE_TOLERANCE}"
        d.reason = f"B engages more but the grade guard fails: {d.guard}"
        return d
    d.guard = f"B's mean grade {b.mean_grade:.2f} vs A's {a.mean_grade:.2f}: holds"
    d.decision, d.reason = "promote", f"{why}; {d.guard}"
    return d


def _bump(version: str) -> str:
    head, _, tail = version.rpartition("-")
    return f"{head}-{int(tail) + 1}" if head and tail.isdigit() else f"{version}-2"


def apply_decision(d: Verdict, settings: Settings, *, by: str) -> dict:
    """Promote (A's rules + B's instruction become the live rules, the version is bumped) or retire B; either way
    the next queued candidate becomes B. One transaction, every key audited with the numbers."""
    from cairn_cli.db.tables import memory_proxy

    if d.decision not in ("promote", "retire"):
        raise InvalidInput(f"nothing to apply: the decision is {d.decision} ({d.reason})", "wait for more sessions")
    current = arms(settings)
    live = generation_rules.live(settings)
    evidence = {k: v for k, v in d.as_dict().items() if k != "arms"}
    evidence["arms"] = [
        {k: s[k] for k in ("arm", "version", "memories", "sessions", "deliveries", "mean_grade", "engagement")}
        for s in d.arms
    ]
    with memory_proxy.atomic():
        version = live.version
        if d.decision == "promote":
            version = _bump(live.version)
            state.put(
                generation_rules.RULES_KEY,
                f"{live.text}\n- {(current.b_instruction or '').strip()}",
                settings,
                by=by,
                reason=f"promoted B ({current.versions['B']}): {d.reason}",
                evidence=evidence,
            )
            state.put(
                generation_rules.VERSION_KEY, version, settings, by=by, reason=f"promotion of {current.versions['B']}"
            )
        queue = list(current.queue)
        nxt = queue.pop(0) if queue else None
        state.put(
            QUEUE_KEY, queue, settings, by=by, reason=f"{d.decision}: next candidate taken" if nxt else d.decision
        )
        state.put(B_KEY, nxt, settings, by=by, reason=f"{d.decision} of {current.versions['B']}", evidence=evidence)
        versions = {"A": version, "B": b_version(version, nxt) if nxt else None}
        state.put(VERSIONS_KEY, versions, settings, by=by, reason=f"{d.decision}: {d.reason}", evidence=evidence)
    return {"decision": d.decision, "versions": versions, "b_instruction": nxt, "generation_version": version}


def queue_add(instruction: str, settings: Settings) -> list:
    from cairn_cli.core.redact import scrub

    text = " ".join(scrub(instruction).split())  # an instruction is injected into every B prompt: never a secret
    if not text:
        raise InvalidInput("the instruction is empty", 'pass the candidate: cairn ab queue add "..."')
    current = arms(settings)
    if text in current.queue or text == current.b_instruction:
        return current.queue
    if not current.b_instruction:  # no experiment running: the candidate becomes B at once
        versions = {"A": current.versions["A"], "B": b_version(current.versions["A"], text)}
        state.put(B_KEY, text, settings, by="cairn ab queue add", reason="new arm B (the queue was empty)")
        state.put(VERSIONS_KEY, versions, settings, by="cairn ab queue add", reason="new arm B")
        return current.queue
    queue = current.queue + [text]
    state.put(QUEUE_KEY, queue, settings, by="cairn ab queue add", reason="candidate queued")
    return queue


def selfmod_lock():
    """One promotion at a time per CAIRN_HOME and, on a shared PostgreSQL store, for every machine sharing it (cron
    and an operator, or two machines' cron, may overlap): yields False when held. Under it the decision is taken
    on the arms as they are now, so a second holder finds the promoted arms and promotes nothing again."""
    from cairn_cli.core.job_locks import store_lock

    return store_lock("ab-selfmod")


@dataclass
class Decided:
    """What `cairn ab promote|selfmod` did: nothing when another run held the lock (`locked` False), else the
    decision and what was applied (None: nothing, or a dry run)."""

    locked: bool
    dry_run: bool
    decision: Verdict | None = None
    applied: dict | None = None


def decide(settings: Settings, *, dry_run: bool, by: str) -> Decided:
    """Evaluate the A/B and, unless a dry run, apply a promotion or retirement; one run at a time (a lock)."""
    with selfmod_lock() as locked:
        if not locked:
            return Decided(False, dry_run)
        decision = evaluate(settings)
        applied = None
        if decision.decision in ("promote", "retire") and not dry_run:
            applied = apply_decision(decision, settings, by=by)
    return Decided(True, dry_run, decision, applied)
