"""How the learning and report commands show their results on a terminal: one helper per table shape (--json goes
through output.json_out as the core returns it)."""

from __future__ import annotations

from cairn_cli import output


def pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"


# -- train-reranker ---------------------------------------------------------------------------------------------


def training_outcome(outcome: dict) -> None:
    kind = outcome["outcome"]
    if kind == "rolled-back":
        what = {"fusion": "learned profile", "embedder": "embedder"}.get(outcome.get("learner") or "", "student")
        output.message(f"rolled back: the live {what} is {outcome['version']}")
        if outcome.get("reembedded"):
            output.message(outcome["reembedded"])
    elif kind == "exported":
        output.message(f"wrote {outcome['rows']} graded deliveries to {outcome['path']}")
    elif kind in ("locked", "skipped"):
        output.message(f"{kind}: {outcome['reason']}" if kind == "skipped" else outcome["reason"])
    else:
        output.key_values(
            {k: v for k, v in outcome.items() if k not in ("train_stats", "forms") and v is not None},
            title=f"train-reranker: {kind}",
        )
        if outcome.get("forms"):
            numbers = next(iter(outcome["forms"].values()))  # the learner's and the live ranking's, as it names them
            output.table(
                [{"form": form, **numbers} for form, numbers in outcome["forms"].items()],
                ["form", "queries", *sorted((k for k in numbers if k != "queries"), key=lambda k: (k[-2:], k))],
                title="held-out, per form",
            )
        if outcome.get("train_stats"):
            st = outcome["train_stats"]
            output.message(
                f"trained on {st['examples']} pairs in {st['seconds']} s ({st['device']}, "
                f"bf16 {st['bf16']}), peak RSS {st['peak_rss_mb']} MB"
            )


# -- calibrate-floor --------------------------------------------------------------------------------------------


def calibration(report, changed: bool | None, plot) -> None:
    output.table(
        [_calibration_row(g, report) for g in sorted(report.now, reverse=True)],
        ["grade", "n", "dropped now", "share now", "dropped proposed", "share proposed"],
        title=f"{report.key}: keep {report.keep:.0%} of grade 3",
    )
    current = "none" if report.current is None else f"{report.current:.6g}"
    output.message(f"{report.key}: current {current} -> proposed {report.proposal:.6g}")
    for note in report.notes:
        output.message(note)
    if plot is not None:
        output.message(f"plot written to {plot}")
    output.message(
        "dry run: pass --apply to write it"
        if changed is None
        else f"applied to machine state {report.key}"
        if changed
        else f"unchanged: {report.key} already set"
    )


def _calibration_row(grade: int, report) -> dict:
    now, new = report.now[grade], report.proposed[grade]
    return {
        "grade": grade,
        "n": now["n"],
        "dropped now": now["dropped"],
        "share now": pct(now["share"]),
        "dropped proposed": new["dropped"],
        "share proposed": pct(new["share"]),
    }


# -- replay -----------------------------------------------------------------------------------------------------


def replay_plan(p, arms, cfg) -> None:
    arm_a, arm_b = arms
    cost = "unknown" if p.cost_usd is None else f"${p.cost_usd:.2f}"
    output.key_values(
        {
            "arms": f"A {arm_a.version} vs B {arm_b.version}",
            "backend": cfg.backend + (f" ({cfg.cmd})" if cfg.cmd else ""),
            "models": f"writer {cfg.writer_model}, judge {cfg.judge_model}",
            "sessions": p.sessions,
            "turns": p.turns,
            **{
                f"{r} calls": f"{p.calls[r]} (~{p.input_tokens[r]:,} in / {p.output_tokens[r]:,} out tokens)"
                for r in p.calls
            },
            "estimated cost": cost,
        },
        title="replay plan (dry run: no call made)",
    )
    for note in p.notes:
        output.message(note)


def replay_report(report: dict) -> None:
    status = report["status"] + (f": {report['stopped']}" if report.get("stopped") else "")
    output.key_values(
        {
            "run": report["run"],
            "status": status.upper() if report["status"] == "partial" else status,
            "arms": f"A {report['arms']['A']['version']} vs B {report['arms']['B']['version']}",
            "models": f"writer {report['models']['writer']}, judge {report['models']['judge']} ({report['models']['backend']})",
            "prompts": ", ".join(f"{k} {v}" for k, v in report["prompts"].items()),
            "sessions": f"{report['sessions']} of {report['sessions_planned']}",
            "turns judged": f"{report['judged_turns']} of {report['turns']}",
            "calls made": f"{report['calls']['made']} (${report['calls']['cost_usd']:.4f})",
            "judge answers unparsed": report["judge_unparsed"],
        },
        title="replay (offline: never promotes)",
    )
    rows = []
    for criterion, c in report["criteria"].items():
        interval = "-" if c.get("low") is None else f"[{c['low']:.2f}, {c['high']:.2f}]"
        rows.append(
            {
                "criterion": criterion,
                "B wins / ties / A wins": f"{c['wins_b']} / {c['ties']} / {c['wins_a']}",
                "B win rate [95%]": f"{pct(c.get('win_rate'))} {interval}",
                "sign test p": "-" if c.get("p_value") is None else f"{c['p_value']:.3f}",
                "flip rate": pct(c.get("flip_rate")),
                "sessions": c.get("sessions"),
                "verdict": c.get("verdict"),
            }
        )
    output.table(rows, list(rows[0]) if rows else ["criterion"], title="judge, per criterion (unit: the session)")
    arm_rows = []
    for arm, m in report["arms_metrics"].items():
        cold = "-" if m["coldread_mean"] is None else f"{m['coldread_mean']:.2f}"
        arm_rows.append(
            {
                "arm": f"{arm} {report['arms'][arm]['version']}",
                "memories": m["memories"],
                "dedup rate": f"{pct(m['dedup_rate'])} ({m['duplicates']})",
                "findability": f"{pct(m['findability'])} (n {m['findability_n']})",
                "cold-read mean": f"{cold} (n {m['coldread_n']})",
            }
        )
    output.table(arm_rows, list(arm_rows[0]), title="per arm, beside the judge")


def replay_runs(runs: list[dict]) -> None:
    if not runs:
        output.message("no replay runs yet (cairn replay run)")
        return
    output.table(
        [{**r, "verdicts": "; ".join(f"{c}: {v}" for c, v in r["verdicts"].items())} for r in runs],
        ["run", "status", "created_at", "a", "b", "sessions", "verdicts"],
        title="replay runs (offline analyses: they never promote)",
    )


# -- stats ------------------------------------------------------------------------------------------------------


def delivery_groups(groups: list) -> None:
    from cairn_cli.core.stats import method_order

    if not groups:
        output.message("no deliveries match")
        return
    methods = method_order({m for g in groups for m in g.engagement})
    output.table(
        [_group_row(g, methods) for g in groups],
        [
            "version",
            "reranker_model",
            "deliveries",
            "sessions",
            "graded",
            "mean grade",
            "grades 0/1/2/3",
            "hard neg",
            *(f"{m} rate [CI] (n)" for m in methods),
            "untagged n",
            "undecided",
        ],
        title="deliveries by generation version and reranker model",
    )


def _group_row(g, methods: list[str]) -> dict:
    row = {
        "version": g.version,
        "reranker_model": g.reranker_model,
        "deliveries": g.deliveries,
        "sessions": g.sessions,
        # the share is of the deliveries whose turn asked for grades; those of turns that asked none are apart
        "graded": f"{g.graded} ({pct(g.graded_share)})" + (f", {g.not_asked} not asked" if g.not_asked else ""),
        "mean grade": "-" if g.mean_grade is None else f"{g.mean_grade:.2f}",
        "grades 0/1/2/3": "/".join(str(g.grade_hist[k]) for k in sorted(g.grade_hist)),
        "hard neg": g.hard_negatives,
        "untagged n": g.untagged["n"],
        "undecided": g.untagged["undecided"],
    }
    for m in methods:
        cell = g.engagement.get(m)
        row[f"{m} rate [CI] (n)"] = (
            "-" if cell is None else (f"{cell['rate']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}] ({cell['n']})")
        )
    return row


def grading_status(status: dict) -> None:
    """`cairn stats grading`: the rate and why, then the drift check."""
    why = {
        "env": f"CAIRN_GRADE_RATE={status['setting']}",
        "drift": "drift alarm: the live learner disagrees with fresh grades",
        "auto": "auto: an auto-promote-safe learner is deployed"
        if status["learner"]
        else "auto: no auto-promote-safe learner yet",
    }[status["reason"]]
    rows = {
        "grade rate": f"{status['grade_rate']:g} ({why})",
        "auto rate": f"{status['auto_rate']:g} ({status['auto_reason']})",
        "learner": status["learner"] or "-",
        "held-out agreement": "-" if status["held_agreement"] is None else f"{status['held_agreement']:.3f}",
        "drift alarm": "ON" if status["drift_alarm"] else "off",
    }
    now = status["drift_now"]
    if now is not None:
        agreement = "-" if now["agreement"] is None else f"{now['agreement']:.3f}"
        verdict = {True: "alarm", False: "ok", None: "too few pairs for a verdict"}[now["alarm"]]
        rows["fresh agreement"] = (
            f"{agreement} on {now['pairs']} pairs of the last {now['turns']} graded turns "
            f"(alarm < {now['threshold']:.3f}, clears at {now['clear_at']:.3f}): {verdict}"
        )
    output.key_values(rows, title="grading (teacher demotion)")


def label_volume(rows: list[dict], bucket: str) -> None:
    if not rows:
        output.message("no labels match")
    else:
        output.table(rows, list(rows[0]), title=f"labels per {bucket}")


def prompt_rows(rows: list[dict], bucket: str) -> None:
    if not rows:
        output.message("no ranked prompts match")
        return
    output.table(
        [{**r, "abstention_rate": f"{r['abstention_rate']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}]"} for r in rows],
        ["period", "prompts", "injected", "abstained", "abstention_rate"],
        title=f"prompts per {bucket}",
    )


def dedup_rows(rows: list[dict]) -> None:
    if not rows:
        output.message("no memory writes match")
        return
    output.table(
        [
            {
                **r,
                **{f"{m}": n for m, n in r["merged_by"].items()},
                "dedup_rate": f"{pct(r['dedup_rate'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]",
                "in_session": f"{r['in_session_merged']} ({pct(r['in_session_rate'])})",
            }
            for r in rows
        ],
        ["version", "writes", "stored", "merged", *rows[0]["merged_by"], "dedup_rate", "in_session"],
        title="memory writes by generation version: stored or merged into an existing memory",
    )


def floor_rows(rows: list) -> None:
    if not rows:
        output.message("no graded deliveries with a reranker_score match")
        return
    output.table(
        [
            {
                "model": r.model,
                "floor": "none" if r.floor is None else f"{r.floor:.6g}",
                "grade 3": r.grade3,
                "grade 3 under": r.grade3_under,
                "share under": pct(r.share_under),
                **{f"grade {g} under": f"{r.by_grade[g]['under']}/{r.by_grade[g]['n']}" for g in (2, 1, 0)},
                "alarm": "ALARM" if r.alarm else "",
            }
            for r in rows
        ],
        [
            "model",
            "floor",
            "grade 3",
            "grade 3 under",
            "share under",
            "grade 2 under",
            "grade 1 under",
            "grade 0 under",
            "alarm",
        ],
        title="grade-3 deliveries under each model's current floor",
    )
    for r in rows:
        if r.alarm:
            output.message(
                f"alarm: the floor of {r.model} drops {pct(r.share_under)} of grade-3 deliveries "
                f"(see `cairn calibrate-floor --model {r.model}`)"
            )


def instance_rows(rows: list[dict]) -> None:
    from cairn_cli.core.stats import method_order

    if not rows:
        output.message("nothing written yet")
        return
    methods = method_order({m for r in rows for m in r["engagement"]})
    table = []
    for r in rows:
        cells = {k: r[k] for k in ("instance", "memories", "prompts", "deliveries", "sessions", "graded")}
        cells["mean grade"] = "-" if r["mean_grade"] is None else f"{r['mean_grade']:.2f}"
        for m in methods:
            e = r["engagement"].get(m)
            cells[f"{m} rate (n)"] = "-" if not e else f"{e['rate']:.2f} ({e['n']})"
        table.append(cells)
    output.table(table, list(table[0]), title="instances sharing this store")


def store_sizes(report) -> None:
    rows = [
        {
            "store": s.store,
            "table": t.table,
            "rows": t.rows,
            "size": _bytes(t.bytes),
            "long text (chars)": "" if t.text_chars is None else f"{t.text_chars} ({t.long_text})",
        }
        for s in report.stores
        for t in s.tables
    ]
    for s in report.stores:
        output.message(f"{s.store}: {s.backend} {s.url}, {_bytes(s.bytes)} on disk, {s.rows} rows")
    output.table(rows, ["store", "table", "rows", "size", "long text (chars)"], title="stores")
    if report.logs:
        output.message(
            f"logs: {_bytes(sum(report.logs.values()))} in {len(report.logs)} files ("
            + ", ".join(f"{name} {_bytes(n)}" for name, n in report.logs.items())
            + ")"
        )


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


# -- ab ---------------------------------------------------------------------------------------------------------


def ab_status(enabled: bool, current, decision, offline: str | None) -> None:
    """`offline`: B's latest replay verdict as a line (None when there is no arm B)."""
    output.key_values(
        {
            "enabled": enabled,
            "arm A (live rules)": current.versions.get("A"),
            "arm B": current.versions.get("B") or "-",
            "B's instruction": current.b_instruction or "-",
            "queue": "; ".join(current.queue) or "-",
        },
        title="write-side A/B",
    )
    rows = []
    for arm in decision.arms or []:
        row = {
            "arm": arm["arm"],
            "version": arm["version"],
            "memories": arm["memories"],
            "sessions": arm["sessions"],
            "delivered later": f"{arm['memories_delivered']} ({arm['deliveries']} deliveries)",
            "graded": arm["graded"],
            "mean grade": arm["mean_grade"],
            "untagged": arm["untagged"],
        }
        for method in ("lexical", "semantic"):
            e = arm["engagement"].get(method)
            row[f"{method} engaged"] = (
                "-" if not e else f"{e['rate']:.2f} [{e['ci'][0]:.2f}, {e['ci'][1]:.2f}] n={e['n']}"
            )
        rows.append(row)
    if rows:
        output.table(rows, list(rows[0]), title="downstream quality of each arm's memories")
    output.message(f"decision: {decision.decision} — {decision.reason}")
    if offline is not None:
        output.message(f"B {offline}")


def ab_decision(outcome) -> None:
    if not outcome.locked:
        output.message("another `cairn ab` promotion holds the lock; nothing done")
        return
    decision, applied = outcome.decision, outcome.applied
    output.message(f"decision: {decision.decision} — {decision.reason}")
    if applied:
        output.message(f"applied: A is now {applied['versions']['A']}, B is {applied['versions']['B'] or 'none'}")
    elif outcome.dry_run and decision.decision in ("promote", "retire"):
        output.message("dry run: nothing changed")


# -- grade ------------------------------------------------------------------------------------------------------


def grade_report(report) -> None:
    output.text_out(
        f"session {report.session_id} turn {report.turn}: {len(report.applied)} graded, "
        f"{len(report.rejected)} rejected, {len(report.corroborated)} corroborated, "
        f"{len(report.contradicted)} contradicted"
    )
    for r in report.rejected:
        output.message(f"rejected {r['memory_id']}:{r['grade']}: {r['reason']}")
    for p in report.problems:
        output.message(f"skipped: {p}")
