"""Statistics over the delivery log: grades and engagement per generation version and reranker model, label volume
over time, and the share of load-bearing (grade-3) memories each model's floor drops; over the memory store: the
write-side dedup rate per generation version. More in docs/learning.md."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

from cairn_cli.config import Settings
from cairn_cli.core.metrics import wilson
from cairn_cli.errors import InvalidInput

GRADES = (0, 1, 2, 3)
METHODS = ("lexical", "semantic", "semantic-backfill")  # the known tags (engagement.METHODS), listed first; any
# other tag gets its own rate too
POOLED = ("all", "any", "pooled", "both", "*")
NO_VERSION = "(none)"
UNTAGGED = "untagged"
ALARM_SHARE = 0.10  # a floor dropping more than this share of grade-3 deliveries is flagged
BUCKETS = ("day", "week", "month")
_CHUNK = 500  # ids per IN (...) query: under SQLite's bound-variable limit


def parse_since(text: str | None) -> dt.datetime | None:
    """An ISO date or datetime as naive UTC (what the log stores); an aware value is converted to UTC."""
    if text is None:
        return None
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"--since {text!r} is not an ISO date or datetime", "write --since 2024-05-01 or --since 2024-05-01T12:00"
        ) from None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def methods_asked(text: str | None) -> list[str] | None:
    """The engagement bases a `--method` asks for (a comma list: each gets its own rate); None: all. A rate across
    bases is refused: the lexical overlap and the cosines live on different scales, and the backfill's cosine is
    measured on a response recovered later, so one pooled rate would mean nothing (invariant 5)."""
    if text is None:
        return None
    asked = [m.strip() for m in text.split(",") if m.strip()]
    pooled = [m for m in asked if "+" in m or m.lower() in POOLED]
    if pooled:
        raise InvalidInput(
            f"--method {pooled[0]!r} asks for one engagement rate across measurement bases, which cairn never "
            f"computes: {', '.join(METHODS)} score on different scales and populations",
            "ask for one basis, or a comma list to see each apart: --method lexical,semantic",
        )
    unknown = [m for m in asked if m not in METHODS and m != UNTAGGED]
    if unknown or not asked:
        raise InvalidInput(
            f"unknown engagement method {unknown[0] if unknown else text!r}",
            f"pass one or more of {', '.join(METHODS)} (comma separated)",
        )
    return asked


def method_order(methods) -> list[str]:
    """Known tags first (lexical, semantic), then any other tag alphabetically."""
    methods = set(methods)
    return [m for m in METHODS if m in methods] + sorted(methods - set(METHODS))


def _rate_cell(engaged: int, n: int) -> dict:
    low, high = wilson(engaged, n)
    return {"n": n, "engaged": engaged, "rate": engaged / n if n else None, "ci_low": low, "ci_high": high}


def _deliveries(since: dt.datetime | None, session: str | None, *fields, instance: str | None = None):
    from cairn_cli.db.tables import MemoryDelivery

    query = MemoryDelivery.select(*fields).order_by(MemoryDelivery.id)
    if since is not None:
        query = query.where(MemoryDelivery.delivered_at >= since)
    if session:
        query = query.where(MemoryDelivery.session_id == session)
    if instance:
        query = query.where(MemoryDelivery.instance == instance)
    return list(query)


def _memories(ids) -> dict[int, tuple[str, str]]:
    """memory id -> (generation version, writing session); the memory store is another database: no join."""
    from cairn_cli.db.tables import Memory

    ids, out = sorted(set(ids)), {}
    for i in range(0, len(ids), _CHUNK):
        for m in Memory.select(Memory.id, Memory.source_ref, Memory.session_id).where(
            Memory.id.in_(ids[i : i + _CHUNK])
        ):
            out[m.id] = (m.source_ref or NO_VERSION, m.session_id or f"memory-{m.id}")
    return out


# -- deliveries ---------------------------------------------------------------------------------------------------


@dataclass
class GroupStats:
    version: str
    reranker_model: str
    deliveries: int = 0
    sessions: int = 0
    graded: int = 0
    graded_share: float | None = None  # of the deliveries whose turn asked for grades (teacher demotion)
    not_asked: int = 0  # deliveries of turns that asked for no grades: never counted as missing a grade
    mean_grade: float | None = None
    grade_hist: dict[int, int] = field(default_factory=lambda: dict.fromkeys(GRADES, 0))
    hard_negatives: int = 0
    engagement: dict[str, dict] = field(default_factory=dict)  # method -> {n, engaged, rate, ci_low, ci_high}
    untagged: dict[str, int] = field(default_factory=lambda: {"n": 0, "undecided": 0})

    def as_dict(self) -> dict:
        return asdict(self)


def delivery_stats(
    settings: Settings, *, since: dt.datetime | None = None, session: str | None = None, instance: str | None = None
) -> list[GroupStats]:
    """One group per (generation version of the delivered memory, reranker model), sorted by both; `instance`:
    only the deliveries that instance made (default: every instance sharing the store, pooled)."""
    from cairn_cli.db.tables import MemoryDelivery as D

    rows = _deliveries(
        since,
        session,
        D.session_id,
        D.memory_id,
        D.reranker_model,
        D.grade,
        D.hard_negative,
        D.engaged,
        D.engaged_method,
        D.grade_asked,
        instance=instance,
    )
    versions = _memories(r.memory_id for r in rows)
    groups: dict[tuple[str, str], GroupStats] = {}
    sessions: dict[tuple[str, str], set] = {}
    grades: dict[tuple[str, str], list[int]] = {}
    asked_graded: dict[tuple[str, str], int] = {}
    tallies: dict[tuple[str, str], dict[str, list[int]]] = {}
    for r in rows:
        key = (versions.get(r.memory_id, (NO_VERSION,))[0], r.reranker_model)
        g = groups.setdefault(key, GroupStats(*key))
        g.deliveries += 1
        if r.grade_asked is False:
            g.not_asked += 1
        elif r.grade is not None:
            asked_graded[key] = asked_graded.get(key, 0) + 1
        sessions.setdefault(key, set()).add(r.session_id)
        if r.grade is not None:
            grades.setdefault(key, []).append(r.grade)
            if r.grade in g.grade_hist:
                g.grade_hist[r.grade] += 1
        g.hard_negatives += bool(r.hard_negative)
        if r.engaged is None:
            g.untagged["undecided"] += 1
        elif r.engaged_method is None:
            g.untagged["n"] += 1  # decided but untagged: reported apart, never in a rate
        else:
            cell = tallies.setdefault(key, {}).setdefault(r.engaged_method, [0, 0])
            cell[0] += bool(r.engaged)
            cell[1] += 1
    for key, g in groups.items():
        g.sessions = len(sessions[key])
        got = grades.get(key, [])
        asked = g.deliveries - g.not_asked
        g.graded, g.graded_share = len(got), (asked_graded.get(key, 0) / asked if asked else None)
        g.mean_grade = sum(got) / len(got) if got else None
        tally = tallies.get(key, {})
        g.engagement = {m: _rate_cell(*tally[m]) for m in method_order(tally)}
    return [groups[k] for k in sorted(groups)]


# -- engagement by generation version (the A/B's view) ----------------------------------------------------------


@dataclass
class ArmEngagement:
    arm: str | None  # version_arms[version], None when the version is in no arm
    version: str
    method: str  # an engaged_method tag, or "untagged" (counted, never rated)
    n: int
    engaged: int | None
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    sessions: int  # distinct writing sessions of the delivered memories: the A/B's unit
    session_rate: float | None  # mean over those sessions of each one's rate (invariant 8)


def arm_engagement(
    settings: Settings,
    *,
    since: dt.datetime | None = None,
    session: str | None = None,
    version_arms: dict[str, str] | None = None,
) -> list[ArmEngagement]:
    """Engagement per (version the memory was written under, method), with the arm that version belongs to."""
    from cairn_cli.db.tables import MemoryDelivery as D

    version_arms = version_arms or {}
    rows = [r for r in _deliveries(since, session, D.memory_id, D.engaged, D.engaged_method) if r.engaged is not None]
    memories = _memories(r.memory_id for r in rows)
    cells: dict[tuple[str, str], dict[str, list[int]]] = {}  # (version, method) -> writing session -> [e, n]
    for r in rows:
        version, writer = memories.get(r.memory_id, (NO_VERSION, f"memory-{r.memory_id}"))
        cell = cells.setdefault((version, r.engaged_method or UNTAGGED), {}).setdefault(writer, [0, 0])
        cell[0] += bool(r.engaged)
        cell[1] += 1
    out = []
    for version in sorted({v for v, _ in cells}):
        methods = [m for v, m in cells if v == version]
        for method in method_order(set(methods) - {UNTAGGED}) + ([UNTAGGED] if UNTAGGED in methods else []):
            per_session = cells[(version, method)]
            n = sum(c[1] for c in per_session.values())
            if method == UNTAGGED:
                out.append(
                    ArmEngagement(
                        version_arms.get(version), version, method, n, None, None, None, None, len(per_session), None
                    )
                )
                continue
            engaged = sum(c[0] for c in per_session.values())
            rate = _rate_cell(engaged, n)
            out.append(
                ArmEngagement(
                    version_arms.get(version),
                    version,
                    method,
                    n,
                    engaged,
                    rate["rate"],
                    rate["ci_low"],
                    rate["ci_high"],
                    len(per_session),
                    sum(e / k for e, k in per_session.values()) / len(per_session),
                )
            )
    return out


# -- label volume -------------------------------------------------------------------------------------------------


def _period(when: dt.datetime, bucket: str) -> str:
    if bucket == "week":
        year, week, _ = when.isocalendar()
        return f"{year}-W{week:02d}"
    return when.strftime("%Y-%m" if bucket == "month" else "%Y-%m-%d")


def label_volume(
    settings: Settings,
    *,
    since: dt.datetime | None = None,
    session: str | None = None,
    bucket: str = "day",
    instance: str | None = None,
) -> list[dict]:
    """Labels made per period and per source: agent grades, engagement per method, untagged engagement.

    A label is dated by its own timestamp (graded_at, engaged_at), else by the delivery's; `since` applies to it.
    """
    from cairn_cli.db.tables import MemoryDelivery as D

    if bucket not in BUCKETS:
        raise InvalidInput(f"unknown bucket {bucket!r}", f"pass one of {', '.join(BUCKETS)}")
    query = D.select(D.delivered_at, D.grade, D.graded_at, D.engaged, D.engaged_method, D.engaged_at).where(
        D.grade.is_null(False) | D.engaged.is_null(False)
    )
    if session:
        query = query.where(D.session_id == session)
    if instance:
        query = query.where(D.instance == instance)
    counts: dict[str, dict[str, int]] = {}
    methods = set(METHODS)
    for r in query:
        labels = []
        if r.grade is not None:
            labels.append(("grades", r.graded_at or r.delivered_at))
        if r.engaged is not None:
            methods.add(r.engaged_method or UNTAGGED)
            labels.append((f"engagement_{r.engaged_method or UNTAGGED}", r.engaged_at or r.delivered_at))
        for source, when in labels:
            if since is None or when >= since:
                period = counts.setdefault(_period(when, bucket), {})
                period[source] = period.get(source, 0) + 1
    ordered = ["grades", *(f"engagement_{m}" for m in method_order(methods - {UNTAGGED})), f"engagement_{UNTAGGED}"]
    return [{"period": p, **{s: counts[p].get(s, 0) for s in ordered}} for p in sorted(counts)]


# -- instances sharing a store ------------------------------------------------------------------------------------


def instance_stats(settings: Settings, *, since: dt.datetime | None = None) -> list[dict]:
    """Per writing instance (the machines sharing this store; rows from before instance ids: "(unknown)"):
    memories written, prompts ranked, deliveries, sessions, graded deliveries and their mean grade, and engagement
    per method (each its own rate, never pooled)."""
    from cairn_cli.db.tables import HookState, Memory
    from cairn_cli.db.tables import MemoryDelivery as D

    unknown = "(unknown)"
    out: dict[str, dict] = {}

    def row(instance: str | None) -> dict:
        return out.setdefault(
            instance or unknown,
            {
                "instance": instance or unknown,
                "memories": 0,
                "prompts": 0,
                "deliveries": 0,
                "sessions": set(),
                "grades": [],
                "engagement": {},
            },
        )

    memories = Memory.select(Memory.instance)
    prompts = HookState.select(HookState.instance).where(HookState.is_subagent == False)  # noqa: E712
    if since is not None:
        memories = memories.where(Memory.created_at >= since)
        prompts = prompts.where(HookState.created_at >= since)
    for m in memories:
        row(m.instance)["memories"] += 1
    for h in prompts:
        row(h.instance)["prompts"] += 1
    for r in _deliveries(since, None, D.instance, D.session_id, D.grade, D.engaged, D.engaged_method):
        cell = row(r.instance)
        cell["deliveries"] += 1
        cell["sessions"].add(r.session_id)
        if r.grade is not None:
            cell["grades"].append(r.grade)
        if r.engaged is not None and r.engaged_method is not None:
            tally = cell["engagement"].setdefault(r.engaged_method, [0, 0])
            tally[0] += bool(r.engaged)
            tally[1] += 1
    result = []
    for key in sorted(out):
        cell = out[key]
        grades = cell.pop("grades")
        tallies = cell.pop("engagement")
        cell["sessions"] = len(cell["sessions"])
        cell["graded"] = len(grades)
        cell["mean_grade"] = round(sum(grades) / len(grades), 3) if grades else None
        cell["engagement"] = {m: _rate_cell(*tallies[m]) for m in method_order(tallies)}
        result.append(cell)
    return result


# -- prompts and abstentions ---------------------------------------------------------------------------------------


def prompt_stats(
    settings: Settings,
    *,
    since: dt.datetime | None = None,
    session: str | None = None,
    bucket: str = "day",
    instance: str | None = None,
) -> list[dict]:
    """Per period: the prompts cairn ranked (each turn's hook_state), how many got memories, how many abstained
    (nothing reached the composite floor, or nothing in scope), and the abstention rate with its Wilson interval."""
    from cairn_cli.db.tables import HookState

    if bucket not in BUCKETS:
        raise InvalidInput(f"unknown bucket {bucket!r}", f"pass one of {', '.join(BUCKETS)}")
    query = HookState.select(HookState.created_at, HookState.data, HookState.is_subagent)
    if since is not None:
        query = query.where(HookState.created_at >= since)
    if session:
        query = query.where(HookState.session_id == session)
    if instance:
        query = query.where(HookState.instance == instance)
    counts: dict[str, list[int]] = {}
    for row in query:
        data = row.data or {}
        if "delivered" not in data:  # a turn recorded by something else than a ranking (ab assign)
            continue
        cell = counts.setdefault(_period(row.created_at, bucket), [0, 0])
        cell[0] += 1
        cell[1] += bool(data.get("abstained"))
    out = []
    for period in sorted(counts):
        n, abstained = counts[period]
        low, high = wilson(abstained, n)
        out.append(
            {
                "period": period,
                "prompts": n,
                "injected": n - abstained,
                "abstained": abstained,
                "abstention_rate": round(abstained / n, 4),
                "ci_low": low,
                "ci_high": high,
            }
        )
    return out


# -- write-side dedup ---------------------------------------------------------------------------------------------

MERGE_METHODS = ("exact", "normalised", "semantic")


def dedup_stats(settings: Settings, *, since: dt.datetime | None = None, session: str | None = None) -> list[dict]:
    """Per generation version (the written memory's `source_ref`): memory writes, how many were stored and how many
    merged into an existing memory (per method: exact, normalised, semantic), the dedup rate (merged / writes) with
    its Wilson interval, and the in-session part (merged into a memory the same session wrote): the seed's
    in-session duplicate suppression. Reads the memory store only (memories and memory_merges)."""
    from cairn_cli.db.tables import Memory, MemoryMerge

    stored = Memory.select(Memory.source_ref, Memory.session_id)
    merges = MemoryMerge.select(MemoryMerge.source_ref, MemoryMerge.method, MemoryMerge.session_id, Memory.session_id)
    merges = merges.join(Memory, on=(MemoryMerge.memory_id == Memory.id), attr="target")
    if since is not None:
        stored = stored.where(Memory.created_at >= since)
        merges = merges.where(MemoryMerge.merged_at >= since)
    if session:
        stored = stored.where(Memory.session_id == session)
        merges = merges.where(MemoryMerge.session_id == session)
    counts: dict[str, dict] = {}

    def cell(version: str | None) -> dict:
        return counts.setdefault(
            version or NO_VERSION, {"stored": 0, **dict.fromkeys(MERGE_METHODS, 0), "in_session": 0, "other": 0}
        )

    for version, _ in cast(Iterable[tuple[str | None, str | None]], stored.tuples()):
        cell(version)["stored"] += 1
    for version, method, writer, target in cast(
        Iterable[tuple[str | None, str, str | None, str | None]], merges.tuples()
    ):
        row = cell(version)
        row[method if method in MERGE_METHODS else "other"] += 1
        row["in_session"] += writer is not None and writer == target
    out = []
    for version in sorted(counts):
        c = counts[version]
        merged = sum(c[m] for m in MERGE_METHODS) + c["other"]
        writes = c["stored"] + merged
        low, high = wilson(merged, writes)
        out.append(
            {
                "version": version,
                "writes": writes,
                "stored": c["stored"],
                "merged": merged,
                "merged_by": {m: c[m] for m in MERGE_METHODS} | ({"other": c["other"]} if c["other"] else {}),
                "dedup_rate": round(merged / writes, 4) if writes else None,
                "ci_low": low,
                "ci_high": high,
                "in_session_merged": c["in_session"],
                "in_session_rate": round(c["in_session"] / writes, 4) if writes else None,
            }
        )
    return out


# -- floors -------------------------------------------------------------------------------------------------------


@dataclass
class FloorStats:
    model: str
    floor: float | None  # None: the model has no floor, nothing is under it
    grade3: int
    grade3_under: int
    share_under: float | None
    by_grade: dict[int, dict]  # grade -> {n, under}
    alarm: bool


def floor_stats(
    settings: Settings,
    *,
    since: dt.datetime | None = None,
    session: str | None = None,
    alarm_share: float = ALARM_SHARE,
    instance: str | None = None,
) -> list[FloorStats]:
    """Per reranker model with graded deliveries carrying a reranker_score: how many of each grade score under the
    floor in force now; `alarm` when more than `alarm_share` of the grade-3 ones do."""
    from cairn_cli.core.learning.calibration import current_floor, drop_table
    from cairn_cli.db.tables import MemoryDelivery as D

    scores: dict[str, dict[int, list[float]]] = {}
    for r in _deliveries(since, session, D.reranker_model, D.grade, D.score_components, instance=instance):
        score = (r.score_components or {}).get("reranker_score")
        if r.grade in GRADES and isinstance(score, (int, float)) and not isinstance(score, bool):
            scores.setdefault(r.reranker_model, {g: [] for g in GRADES})[r.grade].append(float(score))
    out = []
    for model in sorted(scores):
        floor = current_floor(model, settings)
        table = drop_table(scores[model], floor)
        top = table[3]
        out.append(
            FloorStats(
                model,
                floor,
                top["n"],
                top["dropped"],
                top["share"],
                {g: {"n": row["n"], "under": row["dropped"]} for g, row in table.items()},
                top["share"] is not None and top["share"] > alarm_share,
            )
        )
    return out


# -- plot ---------------------------------------------------------------------------------------------------------


def plot(path: Path, groups: list[GroupStats], engagement: list[ArmEngagement]) -> Path:
    """PNG, two panels: the grade histogram per generation version (all models), and the engagement rate per
    version (and arm) and method with Wilson error bars. Untagged rows have no rate and are not drawn."""
    import numpy as np

    from cairn_cli.core.plotting import figure

    fig, path = figure(path, (9, 8))
    hists: dict[str, np.ndarray] = {}
    for g in groups:
        hists[g.version] = hists.get(g.version, np.zeros(len(GRADES))) + [g.grade_hist[k] for k in GRADES]
    rated = [e for e in engagement if e.rate is not None]

    top, bottom = fig.subplots(2, 1)
    width = 0.8 / max(1, len(hists))
    for i, (version, counts) in enumerate(sorted(hists.items())):
        top.bar(np.arange(len(GRADES)) + i * width, counts, width, label=f"{version} (n={int(counts.sum())})")
    top.set_xticks(np.arange(len(GRADES)) + width * (len(hists) - 1) / 2, [f"grade {g}" for g in GRADES])
    top.set_ylabel("graded deliveries")
    top.set_title("grade histogram per generation version")
    if hists:
        top.legend(loc="upper left")
    for i, e in enumerate(rated):
        rate, low, high = e.rate or 0.0, e.ci_low or 0.0, e.ci_high or 0.0  # rated rows have all three
        err = [[rate - low], [high - rate]]
        bottom.errorbar(
            [i], [e.rate], yerr=err, fmt="o", capsize=4, color="tab:blue" if e.method == "lexical" else "tab:orange"
        )
    bottom.set_xticks(
        range(len(rated)),
        [f"{e.arm + ': ' if e.arm else ''}{e.version}\n{e.method} (n={e.n})" for e in rated],
        fontsize=8,
    )
    bottom.set_xlim(-0.5, max(1, len(rated)) - 0.5)
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("engagement rate (Wilson 95%)")
    bottom.set_title("engagement per version and method (methods never pooled)")
    fig.savefig(path, format="png", dpi=100)
    return path


def deliveries_report(
    settings: Settings,
    *,
    since: str | None,
    session: str | None,
    instance: str | None,
    asked: list[str] | None,
    plot_to: Path | None,
) -> list[GroupStats]:
    """`cairn stats deliveries`: the groups (engagement only of the `asked` methods, None: all), and their plot
    (engagement per arm beside it) when `plot_to`."""
    start = parse_since(since)
    groups = delivery_stats(settings, since=start, session=session, instance=instance)
    if asked is not None:
        for g in groups:
            g.engagement = {m: cell for m, cell in g.engagement.items() if m in asked}
    if plot_to is not None:
        from cairn_cli.core.experiment.ab import arms

        version_arms = {v: arm for arm, v in arms(settings).versions.items() if v}
        plot(plot_to, groups, arm_engagement(settings, since=start, session=session, version_arms=version_arms))
    return groups
