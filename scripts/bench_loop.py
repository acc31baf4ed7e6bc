"""Does the loop learn? LoCoMo dev replayed as Claude Code sessions through the real hooks (see `loop`), and the
levers of the student reranker measured on the replayed conversations only (see `levers`).

    .venv/bin/python scripts/bench_loop.py levers [--work /tmp/cairn-loop]
    .venv/bin/python scripts/bench_loop.py loop [--every 500] [--regimes oracle,noisy]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loopdata  # noqa: E402

if TYPE_CHECKING:
    from cairn_cli.core.ranking.context import ContextWindow

HELD_OUT = ("conv-30", "conv-41", "conv-47")  # bench_student.py's seeded held-out conversations: never replayed
SEED = 13


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bench_env(args) -> dict[str, str]:
    """Settings every cairn of the loop shares (the hooks, cron's train-reranker, this process's evaluation).
    CAIRN_RERANK_BUDGET_MS=0 by default: the rerank stage as configured (20 candidates, fp32), so what is measured
    is the ranking's quality and not this shared machine's speed; the composite floor is main's (auto)."""
    env = {"CAIRN_RERANK_BUDGET_MS": str(args.budget_ms), "CAIRN_COMPOSITE_FLOOR": args.floor}
    if getattr(args, "grade_rate", ""):  # teacher demotion forced (#27 point 4); unset: auto, as shipped
        env["CAIRN_GRADE_RATE"] = args.grade_rate
    return env


RULES = re.compile(r"<cairn-rules\b.*?</cairn-rules>", re.S)
CM_BLOCK = re.compile(r"\[cm\].*?\[/cm\]", re.S)
TOKEN = re.compile(r"\w+|[^\w\s]")  # a word-piece proxy: words and punctuation marks


def tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def build_store(home: Path, convs: list[loopdata.Conversation]) -> dict[int, tuple[str, set[str]]]:
    """Import every conversation's observations into `home`'s store (embedded in process); memory id ->
    (conversation, the turn ids it stands for)."""
    import cairn_cli

    loopdata.use_home(home)
    store = cairn_cli.open_store(create=None)
    out: dict[int, tuple[str, set[str]]] = {}
    for conv in convs:
        results = store.add_many(loopdata.memory_lines(conv))
        for (_, ids), r in zip(conv.observations, results):
            out.setdefault(r.id, (conv.sample_id, set()))[1].update(ids)
    return out


def session_windows(root: Path, convs: list[loopdata.Conversation], size: int) -> dict[tuple[str, int], ContextWindow]:
    """The context window each prompt gets from `cairn hook prompt` (the prompt + the session's last turns from
    its transcript), with transcripts written as the session goes (the [cm] block is stripped from the window, so
    its content does not matter here)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.context import build_context_window

    s = Settings()
    out = {}
    for conv in convs:
        for sid, questions in conv.sessions(size):
            path = loopdata.transcript_path(root, conv, sid)
            path.unlink(missing_ok=True)
            writer = loopdata.TranscriptWriter(path, sid, conv.cwd)
            for q in questions:
                writer.user(q.text)
                window = build_context_window(
                    q.text, path, max_turns=s.CONTEXT_MAX_TURNS, max_chars=s.CONTEXT_MAX_CHARS
                )
                out[conv.sample_id, q.index] = window
                writer.assistant(loopdata.response_blocks(q, {}))
    return out


# -- levers ------------------------------------------------------------------------------------------------------


def candidates(queries: list[dict], depth: int) -> None:
    """Each query's composite top `depth` in its conversation's scope, as production scores it (in place)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.engine import RankEngine

    s = Settings()
    engine = RankEngine.in_process(s, with_reranker=False)
    entry = engine.table(s)
    vecs = engine.embed([q["query"] for q in queries])
    for q, v in zip(queries, vecs):
        scored = entry.table.score(
            q["query"],
            entry.table.similarities(v),
            scope=q["conv"],
            weights=s.weights(),
            half_life_days=s.RECENCY_HALF_LIFE_DAYS,
            top=depth,
        )
        q["cands"] = [(sc.candidate.id, sc.candidate.content, float(sc.score)) for sc in scored]


def recall_table(queries: list[dict], rel: dict, ks=(5, 10, 20, 30, 50)) -> dict:
    out = {}
    for k in ks:
        vals = []
        for q in queries:
            relevant = rel[q["conv"], q["index"]]
            if relevant:
                vals.append(len(relevant & {c[0] for c in q["cands"][:k]}) / len(relevant))
        out[f"R@{k}"] = round(sum(vals) / len(vals), 4)
    return out


def evaluate(queries, rel, student: dict | None, *, blend: float, depth: int) -> dict:
    """R@5 and nDCG@10 (binary, every relevant memory of the store counts) of the rerank stage as the pipeline
    does it: the composite's top `depth` reranked by the min-max blend, the rest after them in composite order."""
    from cairn_cli.core.metrics import ndcg
    from cairn_cli.core.ranking.pipeline import _minmax

    r5, nd = [], []
    for q in queries:
        relevant = rel[q["conv"], q["index"]]
        if not relevant:
            continue
        ids = [c[0] for c in q["cands"]]
        if student is not None:
            head = q["cands"][:depth]
            scores = student[q["conv"], q["index"]][:depth]
            final = [(1 - blend) * c + blend * r for c, r in zip(_minmax([c[2] for c in head]), _minmax(list(scores)))]
            order = sorted(range(len(head)), key=lambda i: (-final[i], -head[i][0]))
            ids = [head[i][0] for i in order] + ids[depth:]
        r5.append(len(relevant & set(ids[:5])) / len(relevant))
        nd.append(ndcg([3 if i in relevant else 0 for i in ids[:10]], [3] * len(relevant), 10) or 0.0)
    return {"R@5": round(sum(r5) / len(r5), 4), "nDCG@10": round(sum(nd) / len(nd), 4), "n": len(r5)}


def triples_for(queries, rel, how: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """Training triples (query, relevant, irrelevant) from the training conversations' candidates.

    data-top10: every relevant memory vs the composite's other top 10 (what `--data` was fed before);
    top20 / top50: negatives from the composite's top 20 / 50 (the served depth and beyond);
    delivered: only what the hook delivers and the agent grades, the composite's top 5;
    delivered-k10: the top 10 delivered and graded."""
    out = []
    for q in queries:
        relevant = rel[q["conv"], q["index"]]
        if not relevant:
            continue
        if how.startswith("delivered"):
            k = 10 if how == "delivered-k10" else 5
            shown = q["cands"][:k]
            pos = [t for i, t, _ in shown if i in relevant]
            neg = [t for i, t, _ in shown if i not in relevant]
        else:
            depth = {"data-top10": 10, "top20": 20, "top50": 50}[how]
            pos = [t for i, t, _ in q["cands"] if i in relevant] + q.get("missed", [])
            neg = [t for i, t, _ in q["cands"][:depth] if i not in relevant][:depth]
        out.extend((q["query"], p, n) for p in pos for n in neg)
    rng.shuffle(out)
    return out


def levers(args) -> dict:
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    convs = [c for c in loopdata.conversations() if c.sample_id not in HELD_OUT]
    cache = work / "levers-candidates.json"
    if cache.is_file():
        data = json.loads(cache.read_text())
        queries, rel = data["queries"], {tuple(k.split("|")): set(v) for k, v in data["rel"].items()}
        rel = {(c, int(i)): v for (c, i), v in rel.items()}
    else:
        home = work / "levers-home"
        if home.exists():
            import shutil

            shutil.rmtree(home)
        t0 = time.time()
        mem = build_store(home, convs)
        windows = session_windows(work / "levers-transcripts", convs, args.session_size)
        log(f"store: {len(mem)} memories, {len(windows)} windows in {time.time() - t0:.0f} s")
        queries, rel = [], {}
        for conv in convs:
            for q in conv.questions:
                rel[conv.sample_id, q.index] = {
                    mid for mid, (c, ids) in mem.items() if c == conv.sample_id and ids & q.evidence
                }
                for form in ("window", "question"):
                    text = windows[conv.sample_id, q.index].text if form == "window" else q.text
                    queries.append({"conv": conv.sample_id, "index": q.index, "form": form, "query": text})
        candidates(queries, 50)
        # relevant memories the composite's top 50 missed (the data-top10 rows included every evidence row)
        texts = dict.fromkeys(mem)
        from cairn_cli.db.tables import Memory

        for m in Memory.select(Memory.id, Memory.content):
            texts[m.id] = m.content
        for q in queries:
            seen = {c[0] for c in q["cands"]}
            q["missed"] = [texts[i] for i in sorted(rel[q["conv"], q["index"]] - seen)]
        cache.write_text(json.dumps({"queries": queries, "rel": {f"{c}|{i}": sorted(v) for (c, i), v in rel.items()}}))
    result: dict = {"recall": {}, "runs": []}
    for form in ("question", "window"):
        qs = [q for q in queries if q["form"] == form]
        result["recall"][form] = recall_table(qs, rel)
        log(f"{form}: composite recall {result['recall'][form]}")
    if args.recall_only:
        return result
    # train on 3 of the 4 replayed conversations, validate on the 4th (the held-out three are never touched)
    valid_conv = args.valid_conv
    for spec in args.runs.split(","):
        form, how, epochs, lr, max_pairs = spec.split(":")
        qs = [q for q in queries if q["form"] == form]
        train_q = [q for q in qs if q["conv"] != valid_conv]
        valid_q = [q for q in qs if q["conv"] == valid_conv]
        triples = triples_for(train_q, rel, how, random.Random(SEED))[: int(max_pairs)]
        log(f"run {spec}: {len(triples)} triples")
        model = CrossEncoderModel(bundled_base(), max_length=128)
        stats = model.train_pairwise(triples, epochs=int(epochs), batch_size=16, lr=float(lr), margin=1.0, seed=SEED)
        model.serve_mode()
        student = {(q["conv"], q["index"]): model.score([(q["query"], t) for _, t, _ in q["cands"]]) for q in valid_q}
        run = {"spec": spec, "triples": len(triples), "train_s": stats.seconds, "grid": {}}
        run["composite"] = evaluate(valid_q, rel, None, blend=0, depth=20)
        for depth in (10, 20, 30, 50):
            for blend in (0.3, 0.5, 0.7, 0.85, 1.0):
                run["grid"][f"d{depth}/b{blend}"] = evaluate(valid_q, rel, student, blend=blend, depth=depth)
        log(f"run {spec}: composite {run['composite']} d20/b0.5 {run['grid']['d20/b0.5']}")
        best = max(run["grid"].items(), key=lambda kv: kv[1]["R@5"])
        log(f"run {spec}: best {best}")
        result["runs"].append(run)
        (work / "levers.json").write_text(json.dumps(result, indent=1))
    return result


def simulate(args) -> dict:
    """Why a student with good pairwise agreement barely moves R@5: on the replayed conversations' composite
    candidates (the `levers` cache), a simulated student whose held-out agreement (AUC of relevant over
    irrelevant candidates) is `auc` — relevant ~ N(mu, 1), irrelevant ~ N(0, 1), mu = sqrt(2) * probit(auc) —
    blended into the composite as the pipeline does, at each blend weight and candidate depth. No model: what
    the blend and the depth allow a student of that quality to do. Also what the hooks' labels cover: only the
    5 memories shown are graded."""
    from statistics import NormalDist

    data = json.loads((Path(args.work) / "levers-candidates.json").read_text())
    rel = {(c, int(i)): set(v) for c, i, v in ((*k.split("|"), v) for k, v in data["rel"].items())}
    out: dict = {"auc_runs": args.seeds, "forms": {}}
    for form in ("window", "question"):
        qs = [q for q in data["queries"] if q["form"] == form and rel[q["conv"], q["index"]]]
        entry: dict = {"queries": len(qs), "composite": recall_table(qs, rel, ks=(5, 10, 20, 50))}
        # what the hook's grades cover: pairs exist only when the top 5 shown mixes relevant and irrelevant
        shown_mixed = sum(0 < len(rel[q["conv"], q["index"]] & {c[0] for c in q["cands"][:5]}) < 5 for q in qs)
        missed_in_20 = sum(bool(rel[q["conv"], q["index"]] & {c[0] for c in q["cands"][5:20]}) for q in qs)
        entry["labels"] = {
            "queries_with_a_pair_among_the_5_shown": round(shown_mixed / len(qs), 3),
            "queries_with_a_relevant_memory_at_ranks_6_20": round(missed_in_20 / len(qs), 3),
        }
        grid = {}
        for auc in (0.6, 0.74, 0.85, 0.95, 1.0):
            mu = 2**0.5 * NormalDist().inv_cdf(min(auc, 0.9999))
            for depth in (10, 20, 50):
                for blend in (0.3, 0.5, 0.7, 1.0):
                    vals = []
                    for seed in range(args.seeds):
                        rng = random.Random(seed)
                        student = {
                            (q["conv"], q["index"]): [
                                rng.gauss(mu if c[0] in rel[q["conv"], q["index"]] else 0.0, 1.0) for c in q["cands"]
                            ]
                            for q in qs
                        }
                        vals.append(evaluate(qs, rel, student, blend=blend, depth=depth)["R@5"])
                    grid[f"auc{auc}/d{depth}/b{blend}"] = round(sum(vals) / len(vals), 4)
        entry["simulated_R@5"] = grid
        out["forms"][form] = entry
        log(f"{form}: {entry['composite']} {entry['labels']}")
    return out


# -- the loop through the real hooks -----------------------------------------------------------------------------

MEMORY_ID = re.compile(r'<memory id="(\d+)"')


class Cairn:
    """`python -m cairn_cli ...` as a subprocess against one CAIRN_HOME (what Claude Code and cron run)."""

    def __init__(self, home: Path, extra_env: dict[str, str]):
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")},
            "PYTHONPATH": str(ROOT),
            "CAIRN_HOME": str(home),
            "CAIRN_EMBED_MODEL": "all-MiniLM-L6-v2",
            "CAIRN_DAEMON": "auto",
            "CAIRN_DAEMON_TIMEOUT_MS": "120000",  # a shared 2-core machine: wait for the daemon, never fall back
            "CAIRN_AB_SEED": "bench-loop",
            "HF_HUB_OFFLINE": "1",
            **extra_env,
        }
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, "-m", "cairn_cli", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
        )
        name = " ".join(args[:2])
        self.seconds[name] = self.seconds.get(name, 0.0) + time.time() - t0
        self.calls[name] = self.calls.get(name, 0) + 1
        if check and proc.returncode != 0:
            raise RuntimeError(f"cairn {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc

    def status(self) -> dict:
        proc = self.run("daemon", "status", "--json", check=False)
        return json.loads(proc.stdout) if proc.stdout.strip() else {}


def oracle_grades(ids: list[int], question: loopdata.Question, mem: dict, noise: float, rng) -> dict[int, int]:
    """The agent's rg grades: 3 when the memory stands for a turn of the question's evidence, else 0; with
    `noise`, each grade is flipped (3 <-> 0) with that probability."""
    out = {}
    for mid in ids:
        grade = 3 if mem[mid][1] & question.evidence else 0
        if noise and rng.random() < noise:
            grade = 3 - grade
        out[mid] = grade
    return out


def held_out_queries(work: Path, held: list[loopdata.Conversation], mem: dict, size: int) -> list[dict]:
    """The held-out conversations' prompts with the context windows the hook would give them (their sessions'
    transcripts written the same way) and every relevant memory of the store (never replayed, never graded).
    Each query is ranked in two forms (#27): `window` (the hook's, the prompt with its session's earlier turns)
    and `prompt` (the bare question, as a new session or `cairn rank` would ask it)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.context import build_context_window

    s = Settings()
    windows = session_windows(work / "held-out-transcripts", held, size)
    out = []
    for conv in held:
        for q in conv.questions:
            relevant = {mid for mid, (c, ids) in mem.items() if c == conv.sample_id and ids & q.evidence}
            if relevant:
                window = windows[conv.sample_id, q.index]
                bare = build_context_window(q.text, None, max_turns=s.CONTEXT_MAX_TURNS, max_chars=s.CONTEXT_MAX_CHARS)
                out.append(
                    {
                        "conv": conv.sample_id,
                        "index": q.index,
                        "query": window.text,
                        "prompt": q.text,
                        "relevant": relevant,
                        "contexts": {"window": window, "prompt": bare},
                    }
                )
    return out


FORMS = ("window", "prompt")  # the hook's window, the bare question: a learner is judged on both (#27)


def evaluate_live(home: Path, queries: list[dict], *, composite: bool = False, reranker=None, encoder=None) -> dict:
    """R@5 / nDCG@10 of the live ranking on the held-out queries in both forms, each ranked by `cairn rank`'s own
    `rank()` (the query plan: the prompt primary and the earlier turns as context, the scope's ranking profile, the
    composite floor, the rerank stage, the near-duplicate skip), in this process, with the reranker that resolves
    now (composite=True: without one; `reranker`: this one instead). Top-level R@5 / nDCG@10 are the window
    form's (the loop's own measure); each form keeps its per-question values for paired intervals."""
    import cairn_cli
    from cairn_cli.core.metrics import ndcg
    from cairn_cli.core.ranking.rank import RankQuery, rank

    loopdata.use_home(home)
    store = cairn_cli.open_store(create=None)
    s = store.settings
    engine = store.engine(with_reranker=not composite and reranker is None)
    if reranker is not None:
        engine.reranker = reranker
    if encoder is not None:  # a learned embedder (bench_learners.py): the store's vectors are its own already
        engine.encoder = encoder
    out: dict = {}
    for form in FORMS:
        r5, nd = [], []
        for q in queries:
            ranking = rank(RankQuery(q["contexts"][form], k=10, scope=q["conv"]), s, engine)
            ids = [m.id for m in ranking.items]
            r5.append(len(q["relevant"] & set(ids[:5])) / len(q["relevant"]))
            nd.append(ndcg([3 if i in q["relevant"] else 0 for i in ids[:10]], [3] * len(q["relevant"]), 10) or 0.0)
        out[form] = {
            "R@5": round(sum(r5) / len(r5), 4),
            "nDCG@10": round(sum(nd) / len(nd), 4),
            "per_query": {"R@5": r5, "nDCG@10": nd},
        }
    name = engine.reranker.name if engine.reranker is not None else "none"
    return {"R@5": out["window"]["R@5"], "nDCG@10": out["window"]["nDCG@10"], "reranker": name, "forms": out}


def summary(live: dict) -> str:
    """One log line: each form's R@5 / nDCG@10 (and the difference to the composite when known)."""
    parts = []
    for form in FORMS:
        f = live["forms"][form]
        line = f"{form} R@5 {f['R@5']:.3f} nDCG@10 {f['nDCG@10']:.3f}"
        if "vs_composite" in live:
            d = live["vs_composite"][form]
            line += f" (Δ {d['R@5']['delta']:+.3f} {d['R@5']['ci95']}, {d['nDCG@10']['delta']:+.3f})"
        parts.append(line)
    return f"{live.get('reranker')}: " + "; ".join(parts)


def _interval(mine: list[float], base: list[float]) -> list[float]:
    """Paired 95% bootstrap interval of mean(mine - base) over the same questions (bench_ranking's)."""
    import numpy as np
    from bench_ranking import paired_interval

    ci = paired_interval(np.asarray(mine, dtype=float) - np.asarray(base, dtype=float))
    return [round(ci["low"], 4), round(ci["high"], 4)]


def versus(live: dict, composite: dict) -> dict:
    """Per form: the live ranking minus the composite, mean and paired 95% interval, R@5 and nDCG@10."""
    out = {}
    for form in FORMS:
        a, b = live["forms"][form]["per_query"], composite["forms"][form]["per_query"]
        out[form] = {
            m: {
                "delta": round(sum(a[m]) / len(a[m]) - sum(b[m]) / len(b[m]), 4),
                "ci95": _interval(a[m], b[m]),
            }
            for m in ("R@5", "nDCG@10")
        }
    return out


def wait_for_reranker(cairn: Cairn, name: str, conv: str, timeout_s: float = 900) -> None:
    """After a deploy: one ranking makes the daemon look at the student link (it loads the new one in the
    background); then wait until it serves it, so every later prompt is ranked by the new student."""
    cairn.run("rank", "warm up", "--scope", conv, "--no-log", "--json")
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cairn.status().get("reranker") == name:
            return
        time.sleep(1)  # polling another process's state (a benchmark, not a test)
        cairn.run("rank", "warm up", "--scope", conv, "--no-log", "--json")
    raise RuntimeError(f"the daemon did not load {name} within {timeout_s} s")


LEARNER_NAMES = ("fusion", "embedder", "student")


def wait_for_embedder(cairn: Cairn, name: str, conv: str, timeout_s: float = 900) -> None:
    """After an embedder deploy (the store re-embedded by `train-reranker` itself): one ranking makes the daemon
    look at the live embedder; then wait until it embeds prompts with it, so every later prompt is ranked by it."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        cairn.run("rank", "warm up", "--scope", conv, "--no-log", "--json")
        if cairn.status().get("embed_model") == name:
            return
        time.sleep(1)  # polling another process's state (a benchmark, not a test)
    raise RuntimeError(f"the daemon did not switch to {name} within {timeout_s} s")


def replay(args, regime: str, noise: float) -> dict:
    work = Path(args.work) / regime
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    home = work / "home"
    convs = loopdata.conversations()
    held_ids = args.held_out.split(",")
    replayed = [c for c in convs if c.sample_id not in HELD_OUT]
    if args.replay:
        replayed = [c for c in replayed if c.sample_id in args.replay.split(",")]
    for conv in replayed:
        conv.questions = conv.questions[: args.max_prompts] if args.max_prompts else conv.questions
    held = [c for c in convs if c.sample_id in held_ids]
    mem = build_store(home, convs)
    queries = held_out_queries(work, held, mem, args.session_size)
    cairn = Cairn(home, bench_env(args))
    cairn.run("daemon", "start", "--wait", "600")
    rng = random.Random(SEED)
    composite = evaluate_live(home, queries, composite=True)
    curve = [{"labels": 0, "prompts": 0, **composite}]
    decisions = []
    log(f"{regime}: held-out composite {summary(composite)}")
    if args.baseline_only:  # the composite as shipped, both forms: the numbers a learner is measured against
        cairn.run("daemon", "stop", check=False)
        return {
            "regime": regime,
            "noise": noise,
            "labels": 0,
            "prompts": 0,
            "held_out_queries": len(queries),
            "composite": composite,
            "curve": curve,
            "decisions": [],
            "deliveries_by_ranker": {},
        }
    # sessions of the replayed conversations, interleaved (a user working on four projects)
    sessions = [(conv, sid, qs) for conv in replayed for sid, qs in conv.sessions(args.session_size)]
    order = sorted(range(len(sessions)), key=lambda i: (sessions[i][2][0].index, sessions[i][0].sample_id))
    labels, prompts, last_train = 0, 0, 0
    spent = {"rule_tokens": 0, "cm_tokens": 0, "asked": 0}  # what grading costs the agent (point 4's measure)
    for i in order:
        conv, sid, questions = sessions[i]
        path = loopdata.transcript_path(work / "transcripts", conv, sid)
        writer = loopdata.TranscriptWriter(path, sid, conv.cwd)
        common = {"session_id": sid, "transcript_path": str(path), "cwd": conv.cwd, "permission_mode": "default"}
        for q in questions:
            writer.user(q.text)
            shown = cairn.run(
                "hook", "prompt", stdin=json.dumps({**common, "hook_event_name": "UserPromptSubmit", "prompt": q.text})
            )
            ids = [int(x) for x in MEMORY_ID.findall(shown.stdout)]
            asked = "rg: not asked" not in shown.stdout  # teacher demotion: this turn's rules leave rg out
            grades = oracle_grades(ids, q, mem, noise, rng) if asked else {}
            blocks = loopdata.response_blocks(q, grades) if grades else [q.answer]
            spent["rule_tokens"] += sum(tokens(m) for m in RULES.findall(shown.stdout))
            spent["cm_tokens"] += sum(tokens(m) for b in blocks for m in CM_BLOCK.findall(b))
            spent["asked"] += asked
            writer.assistant(blocks)
            cairn.run(
                "hook",
                "stop",
                stdin=json.dumps(
                    {
                        **common,
                        "hook_event_name": "Stop",
                        "stop_hook_active": False,
                        "last_assistant_message": "\n\n".join(blocks),
                    }
                ),
            )
            labels += len(grades)
            prompts += 1
            if labels - last_train >= args.every:
                last_train = labels
                decisions.append(retrain(cairn, args, home, queries, conv.sample_id, labels, prompts, curve))
    if labels > last_train:
        decisions.append(retrain(cairn, args, home, queries, replayed[0].sample_id, labels, prompts, curve, final=True))
    cairn.run("daemon", "stop", check=False)
    rankers = delivery_rankers(home)
    return {
        "regime": regime,
        "noise": noise,
        "labels": labels,
        "prompts": prompts,
        "held_out_queries": len(queries),
        "composite": composite,
        "curve": curve,
        "decisions": decisions,
        "deliveries_by_ranker": rankers,
        "grading_cost": {
            **spent,
            "per_100_prompts": {k: round(100 * v / max(1, prompts), 1) for k, v in spent.items()},
        },
        "subprocess_seconds": {k: round(v, 1) for k, v in cairn.seconds.items()},
        "subprocess_calls": cairn.calls,
    }


def delivery_rankers(home: Path) -> dict:
    import cairn_cli
    from cairn_cli.db.tables import MemoryDelivery

    loopdata.use_home(home)
    cairn_cli.open_store(create=None)
    out: dict = {}
    for d in MemoryDelivery.select(
        MemoryDelivery.ranker, MemoryDelivery.reranker_model, MemoryDelivery.score_components
    ):
        key = f"{d.ranker} / {'student' if d.reranker_model.startswith('student:') else d.reranker_model}"
        out[key] = out.get(key, 0) + 1
        if (d.score_components or {}).get("explored_from_rank"):
            out["explored (shown from below the top 5)"] = out.get("explored (shown from below the top 5)", 0) + 1
    return out


def retrain(cairn, args, home, queries, conv, labels, prompts, curve, final: bool = False) -> dict:
    """`cairn train-reranker --auto` as cron runs it; after a deploy, the held-out ranking of the live pipeline."""
    t0 = time.time()
    min_new = "1" if final else str(args.every)
    proc = cairn.run("train-reranker", "--auto", "--min-new-labels", min_new, "--json", *args.train_args, check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = {"outcome": "error", "reason": proc.stderr.strip()[-500:]}
    decision = {"labels": labels, "prompts": prompts, "seconds": round(time.time() - t0, 1), **report}
    decision.pop("train_stats", None)
    # --auto's learners (core/learning/trainer.py LEARNERS): the last one's report at the top, the others' by name
    top = report.get("learner") or ("student" if "student_dir" in report or "student_r5" in report else "error")
    learners = {top: report, **{k: report[k] for k in LEARNER_NAMES if isinstance(report.get(k), dict)}}
    for name, r in learners.items():
        log(f"train at {labels} labels: {name} {r.get('outcome')}: {r.get('reason')}")
    student, embedder = learners.get("student") or {}, learners.get("embedder") or {}
    if student.get("outcome") == "deployed":
        wait_for_reranker(cairn, "student:" + str(Path(student["student_dir"]).resolve()), conv)
    if embedder.get("outcome") == "deployed":
        wait_for_embedder(cairn, embedder["name"], conv)
    if any(r.get("outcome") == "deployed" for r in learners.values()):  # the fusion's weights: read per ranking
        live = evaluate_live(home, queries)
        live["profile"] = (learners.get("fusion") or {}).get("version") or curve[-1].get("profile")
        live["embedder"] = embedder.get("name") if embedder.get("outcome") == "deployed" else curve[-1].get("embedder")
    else:  # nothing changed live: the held-out ranking is the last one measured
        live = {k: curve[-1][k] for k in ("R@5", "nDCG@10", "reranker", "forms") if k in curve[-1]}
        live["profile"] = curve[-1].get("profile")
        live["embedder"] = curve[-1].get("embedder")
    live["vs_composite"] = versus(live, curve[0])
    outcome = ", ".join(f"{name} {r.get('outcome')}" for name, r in learners.items())
    curve.append({"labels": labels, "prompts": prompts, **live, "outcome": outcome})
    decision["held_out_live"] = live
    log(f"held-out live ranking at {labels} labels: {summary(live)}")
    return decision


def plot(results: list[dict], path: Path) -> None:
    """R@5 of the live ranking minus the composite's on the held-out queries, per grade regime, against labels;
    hollow: a shadow student (refused) measured as if it had been deployed (recheck)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for n, (r, colour) in enumerate(zip(results, ("tab:blue", "tab:orange", "tab:green"))):
        base = r["composite"]["R@5"]
        xs = [p["labels"] for p in r["curve"]]
        ax.plot(xs, [p["R@5"] - base for p in r["curve"]], marker="o", color=colour, label=f"{r['regime']} grades")
        for p in r["curve"][1:]:
            ax.annotate(
                p.get("outcome", ""),
                (p["labels"], p["R@5"] - base),
                fontsize=7,
                xytext=(0, 6 if n == 0 else -12),
                textcoords="offset points",
                ha="center",
            )
        check = r.get("recheck")
        shadows = [check["shadow"], *check.get("variants", [])] if check else []
        for m, v in enumerate(shadows):
            o = {"epochs": 2, "lr": 3e-5, "candidates": 20, **v.get("options", {})}
            for key in [k for k in v if k.startswith("blend")]:
                y = v[key]["R@5"] - check["composite"]["R@5"]
                first = m == 0 and key == next(k for k in v if k.startswith("blend"))
                ax.scatter(
                    [v["labels"]],
                    [y],
                    facecolors="none",
                    edgecolors=colour,
                    s=50,
                    label=f"{r['regime']}: a refused student, as if deployed" if first else None,
                )
                text = f"{o['epochs']} ep, lr {o['lr']:g}, top {o['candidates']}, blend {key.split()[1]}"
                ax.annotate(
                    text,
                    (v["labels"], y),
                    fontsize=6,
                    xytext=(-6, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                )
    ax.axhline(0, color="grey", linestyle="--", label="composite alone")
    ax.axhline(0.06, color="grey", linestyle=":", label="goal (#27): composite + 0.06")
    ax.set_xlabel("agent grades (rg labels)")
    ax.set_ylabel("held-out R@5, live ranking - composite")
    ax.set_title("LoCoMo dev, held-out conversations: what the loop's ranking adds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def store_map(home: Path, convs: list[loopdata.Conversation]) -> dict[int, tuple[str, set[str]]]:
    """build_store's memory id -> (conversation, turn ids), read back from `home`'s store."""
    import cairn_cli
    from cairn_cli.db.tables import Memory

    loopdata.use_home(home)
    cairn_cli.open_store(create=None)
    turns = {(c.sample_id, text): ids for c in convs for text, ids in c.observations}
    out = {}
    for m in Memory.select(Memory.id, Memory.content, Memory.scope):
        if (m.scope, m.content) in turns:
            out[m.id] = (m.scope, set(turns[m.scope, m.content]))
    return out


def shadow_student(home: Path, **options):
    """`cairn train-reranker` as cron runs it on `home` (never deploying): its report and the student it trained."""
    import cairn_cli
    from cairn_cli.core.learning import gate

    loopdata.use_home(home)
    store = cairn_cli.open_store(create=None)  # `home`'s stores, not the ones bound before
    trained = {}
    judge = gate.judge

    def keep(model, *a, **k):
        trained["model"] = model
        return judge(model, *a, **k)

    gate.judge = keep
    try:
        report = store.train(deploy=False, **options)
    finally:
        gate.judge = judge
    return report, trained["model"]


def shadow_variant(args, r: dict, work: Path, home: Path, queries: list[dict], options: dict, into: list) -> None:
    """Train a shadow student on a copy of `home` with `options` and measure it on `queries` at each blend."""
    from cairn_cli.config import Settings
    from cairn_cli.core.learning.gate import StudentReranker

    shadow = work / "shadow-home"
    if shadow.exists():
        shutil.rmtree(shadow)
    shutil.copytree(home, shadow, symlinks=True)
    t0 = time.time()
    report, model = shadow_student(shadow, **{k: v for k, v in options.items() if k != "candidates"})
    student = StudentReranker(model, Settings().CROSS_ENCODER_STUDENT_FLOOR)
    entry = {
        "labels": r["labels"],
        "options": {**options, "candidates": int(os.environ.get("CAIRN_RERANK_CANDIDATES", "20"))},
        "gate": report.outcome,
        "gate_reason": report.reason,
        "train_pairs": report.train_pairs,
        "agreement": report.student_agreement,
        "composite_agreement": report.incumbent_agreement,
        "train_s": round(time.time() - t0, 1),
    }
    for blend in args.blends.split(","):
        os.environ["CAIRN_RERANK_BLEND"] = blend
        entry[f"blend {blend}"] = evaluate_live(shadow, queries, reranker=student)
        log(f"{r['regime']}: shadow student {options}, blend {blend}: {entry[f'blend {blend}']}")
    os.environ.pop("CAIRN_RERANK_BLEND")
    into.append(entry)


def recheck(args) -> None:
    """After a loop run, for each regime: the held-out ranking of the composite and of every student the gate
    deployed, measured again with `cairn rank`'s whole pipeline (ranking profile, composite floor, the prompt
    kept in each pair), and the student the last cron run trained, measured as if it had been deployed whatever
    the gate said (blend 0.5 as served, and 1.0): does the gate refuse students that would help users?"""

    out = Path(args.out)
    result = json.loads((out / "loop.json").read_text())
    os.environ["HF_HUB_OFFLINE"] = "1"
    for key in ("CAIRN_RERANK_BUDGET_MS", "CAIRN_COMPOSITE_FLOOR"):
        os.environ[key] = str(result["settings"][key])
    if args.candidates:  # the composite alone does not rerank: only the shadow students see the depth
        os.environ["CAIRN_RERANK_CANDIDATES"] = str(args.candidates)
    convs = loopdata.conversations()
    held = [c for c in convs if c.sample_id in result["held_out_conversations"]]
    for r in result["regimes"]:
        if args.regimes and r["regime"] not in args.regimes.split(","):
            continue
        work = Path(args.work) / r["regime"]
        home = work / "home"
        mem = store_map(home, convs)
        queries = held_out_queries(work / "recheck", held, mem, result["session_size"])
        if args.max_queries and len(queries) > args.max_queries:  # a seeded sample: time on a shared machine
            queries = random.Random(SEED).sample(queries, args.max_queries)
        options = {"epochs": args.epochs, "lr": args.lr}
        if args.variant_only:  # another shadow student beside the one already measured
            check = r["recheck"]
            shadow_variant(args, r, work, home, queries, options, check.setdefault("variants", []))
            (out / "loop.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
            continue
        check = {"queries": len(queries), "composite": evaluate_live(home, queries, composite=True)}
        log(f"{r['regime']}: recheck composite {check['composite']}")
        check["deployed"] = []
        for d in r["decisions"]:
            if d.get("outcome") == "deployed":
                os.environ["CAIRN_CROSS_ENCODER_STUDENT_PATH"] = d["student_dir"]
                check["deployed"].append({"labels": d["labels"], **evaluate_live(home, queries)})
                os.environ.pop("CAIRN_CROSS_ENCODER_STUDENT_PATH")
                log(f"{r['regime']}: recheck deployed at {d['labels']}: {check['deployed'][-1]}")
        # the last cron run again, in a copy of the store, with its student kept whatever the gate says
        shadows: list = []
        shadow_variant(args, r, work, home, queries, options, shadows)
        check["shadow"] = shadows[0]
        r["recheck"] = check
        (out / "loop.json").write_text(json.dumps(result, indent=1, default=str) + "\n")


def cpu() -> dict:
    """The machine: model name, cores, and the CPU flags that decide the precisions (AVX2/AVX-512/BF16/AMX)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    wanted = [f for f in flags if f.startswith(("avx", "amx", "fma")) or f in ("sse4_2",)]
    return {"model": model, "cores": os.cpu_count(), "flags": sorted(wanted)}


def loop(args) -> dict:
    t_start = time.time()
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "cpu": cpu(),
        "settings": bench_env(args),
        "replayed": args.replay or "all but held out",
        "max_prompts": args.max_prompts,
        "held_out_conversations": args.held_out.split(","),
        "session_size": args.session_size,
        "every": args.every,
        "train_args": args.train_args,
        "regimes": [],
    }
    os.environ.update(bench_env(args))
    os.environ["HF_HUB_OFFLINE"] = "1"
    from cairn_cli.config import Settings

    s = Settings()
    for name in (
        "RERANK_CANDIDATES",
        "RERANK_BLEND",
        "RERANKER_MAX_LENGTH",
        "CONTEXT_MAX_TURNS",
        "RANK_K",
        "EXPLORE_RATE",
    ):
        result["settings"][f"CAIRN_{name}"] = getattr(s, name)
    for regime in args.regimes.split(","):
        noise = {"oracle": 0.0, "noisy": 0.2}[regime]
        t0 = time.time()
        r = replay(args, regime, noise)
        r["seconds"] = round(time.time() - t0, 1)
        result["regimes"].append(r)
        result["seconds"] = round(time.time() - t_start, 1)
        out = Path(args.out)
        out.mkdir(exist_ok=True)
        (out / "loop.json").write_text(json.dumps(without_per_query(result), indent=1, default=str) + "\n")
        plot(result["regimes"], out / "loop.png")
    return result


def without_per_query(result: dict):
    """The result as loop.json keeps it: the per-question values (kept in memory for the intervals) left out."""
    if isinstance(result, dict):
        return {k: without_per_query(v) for k, v in result.items() if k != "per_query"}
    if isinstance(result, list):
        return [without_per_query(v) for v in result]
    return result


def _pair(d: dict, a: str, b: str) -> str:
    return "–" if d.get(a) is None else f"{d[a]:.3f} / {d[b]:.3f}"


def forms_table(r: dict) -> list[str]:
    """The held-out conversations in both forms (#27): the hook's window and the bare question, each point of the
    curve against the composite with a paired 95% interval per question; and what grading cost the agent."""
    if "forms" not in r["composite"]:
        return []
    lines = [
        "",
        "Held-out conversations in both forms, the live ranking after each cron run (Δ: minus the composite, paired "
        "95% interval per question):",
        "",
        "| labels | outcome | window R@5 | Δ [95%] | window nDCG@10 | Δ | bare question R@5 | Δ [95%] "
        "| bare question nDCG@10 | Δ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for point in r["curve"]:
        cells = []
        for form in FORMS:
            f = point["forms"][form]
            d = point.get("vs_composite", {}).get(form)
            if d is None:
                cells += [f"{f['R@5']:.3f}", "–", f"{f['nDCG@10']:.3f}", "–"]
                continue
            r5, nd = d["R@5"], d["nDCG@10"]
            cells += [
                f"{f['R@5']:.3f}",
                f"{r5['delta']:+.3f} [{r5['ci95'][0]:+.3f}, {r5['ci95'][1]:+.3f}]",
                f"{f['nDCG@10']:.3f}",
                f"{nd['delta']:+.3f} [{nd['ci95'][0]:+.3f}, {nd['ci95'][1]:+.3f}]",
            ]
        lines.append(f"| {point['labels']} | {point.get('outcome', 'composite')} | " + " | ".join(cells) + " |")
    cost = r.get("grading_cost")
    if cost:
        per = cost["per_100_prompts"]
        lines += [
            "",
            f"Grading cost per 100 prompts: {per['asked']:.0f} turns asked for grades, {per['rule_tokens']:.0f} "
            f"rule tokens injected, {per['cm_tokens']:.0f} `[cm]` tokens written (words and marks).",
        ]
    return lines


def report(result: dict, out: Path) -> str:
    """bench/loop.md from loop.json: the learning curve of each grade regime and the gate's decisions."""
    c = result["cpu"]
    lines = [
        "# Does the loop learn? LoCoMo dev through the real hooks",
        "",
        f"`{result['command']}` — {result['date']}, {result.get('seconds', 0) / 60:.0f} min for "
        f"{len(result['regimes'])} regime(s) on a shared {c['cores']}-core {c['model']}.",
        "",
        f"CPU flags: {' '.join(c['flags'])}.",
        "",
        "Replayed: the dev conversations but the held-out ones "
        f"({result['replayed']}, "
        + (f"first {result['max_prompts']} questions each" if result["max_prompts"] else "all their questions")
        + "), sessions of "
        f"{result['session_size']} prompts interleaved across projects, each prompt through `cairn hook prompt` and "
        "its reply (gold answer + `[cm]` block of `rg` grades of what was shown) through `cairn hook stop`; "
        f"`cairn train-reranker --auto` every {result['every']} labels as cron runs it "
        f"(flags: {' '.join(result['train_args']) or 'defaults'}). Held out, never replayed or graded: "
        f"{', '.join(result['held_out_conversations'])}; each of their questions is ranked with the context window "
        "the hook would give it, over the whole store in its scope, by the live pipeline (`cairn rank`'s).",
        "",
        "Settings: " + ", ".join(f"{k}={v}" for k, v in result["settings"].items()) + ". "
        "CAIRN_RERANK_BUDGET_MS=0 means no latency budget: the rerank stage as configured, so the curve measures "
        "ranking quality, not this shared machine's speed (under the default 150 ms budget the plan may shrink "
        "or skip the stage).",
        "",
    ]
    findings = out / "loop_findings.md"  # hand-written: what the numbers below say, kept across `report` runs
    if findings.is_file():
        lines += [findings.read_text().strip(), ""]
    for r in result["regimes"]:
        base = r["composite"]
        lines += [
            f"## {r['regime']} grades (noise {r['noise']:.0%}) — {r['prompts']} prompts, {r['labels']} labels, "
            f"{r['seconds'] / 60:.0f} min",
            "",
            f"Held-out queries: {r['held_out_queries']}. Composite alone: R@5 {base['R@5']:.3f}, "
            f"nDCG@10 {base['nDCG@10']:.3f}.",
            "",
            "| labels | prompts | gate | train pairs | gate: student / live nDCG@10 | gate: student / live R@5 "
            "| agreement student / live | held-out R@5 (Δ composite) | held-out nDCG@10 | live reranker |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| 0 | 0 | – | – | – | – | – | {base['R@5']:.3f} | {base['nDCG@10']:.3f} | none |",
        ]
        for d in r["decisions"]:
            live = d["held_out_live"]

            reranker = live["reranker"]
            reranker = "student " + Path(reranker).name if reranker.startswith("student:") else reranker
            lines.append(
                f"| {d['labels']} | {d['prompts']} | {d.get('outcome')} | {d.get('train_pairs', '–')} "
                f"| {_pair(d, 'student_ndcg10', 'incumbent_ndcg10')} | {_pair(d, 'student_r5', 'incumbent_r5')} "
                f"| {_pair(d, 'student_agreement', 'incumbent_agreement')} "
                f"| {live['R@5']:.3f} ({live['R@5'] - base['R@5']:+.3f}) | {live['nDCG@10']:.3f} | {reranker} |"
            )
        lines += forms_table(r)
        for key in ("run", "stopped", "evaluation"):
            if r.get(key):
                lines += ["", f"*{key}:* {r[key]}"]
        check = r.get("recheck")
        if check:
            sh = check["shadow"]
            lines += [
                "",
                f"Recheck with `cairn rank`'s whole pipeline, {check['queries']} held-out queries:",
                "",
                "| ranking | R@5 | nDCG@10 |",
                "|---|---|---|",
                f"| composite alone | {check['composite']['R@5']:.3f} | {check['composite']['nDCG@10']:.3f} |",
            ]
            lines += [
                f"| deployed at {d['labels']} labels | {d['R@5']:.3f} | {d['nDCG@10']:.3f} |" for d in check["deployed"]
            ]
            for key in [k for k in sh if k.startswith("blend")]:
                lines.append(
                    f"| shadow student on {sh['labels']} labels ({sh['train_pairs']} training pairs), {key} "
                    f"| {sh[key]['R@5']:.3f} | {sh[key]['nDCG@10']:.3f} |"
                )
            for v in check.get("variants", []):
                opts = ", ".join(f"{k} {x}" for k, x in v["options"].items())
                for key in [k for k in v if k.startswith("blend")]:
                    lines.append(
                        f"| shadow student on {v['labels']} labels, {opts}, {key} "
                        f"| {v[key]['R@5']:.3f} | {v[key]['nDCG@10']:.3f} |"
                    )
            lines.append("")
            for v in [sh, *check.get("variants", [])]:
                opts = ", ".join(f"{k} {x}" for k, x in v.get("options", {"epochs": 2, "lr": 3e-5}).items())
                lines.append(
                    f"- shadow student ({opts}): its gate {v['gate']}: {v['gate_reason']}; held-out pairwise "
                    f"agreement {v['agreement']} vs the composite's {v['composite_agreement']}; trained in "
                    f"{v['train_s']:.0f} s."
                )
        lines += ["", "Gate reasons:", ""]
        lines += [f"- {d['labels']} labels: {d.get('outcome')}: {d.get('reason')}" for d in r["decisions"]]
        lines += [
            "",
            "Deliveries by ranker: " + ", ".join(f"{k}: {v}" for k, v in r["deliveries_by_ranker"].items()) + ".",
            "",
        ]
    lines += ["![learning curve](loop.png)", ""]
    levers = out / "loop_levers.json"
    if levers.is_file():
        sim = json.loads(levers.read_text())
        lines += [
            "## What blend and depth let a student do (`simulate`, `loop_levers.json`)",
            "",
            "The replayed conversations' composite candidates; a simulated student whose pairwise agreement (AUC of "
            "relevant over irrelevant candidates) is given, independent of the composite, blended in as the pipeline "
            f"does; mean of {sim['auc_runs']} draws. R@5:",
            "",
        ]
        for form, e in sim["forms"].items():
            comp = e["composite"]
            lines += [
                f"**{form}** as the query ({e['queries']} questions): composite R@5 {comp['R@5']:.3f}, "
                f"R@10 {comp['R@10']:.3f}, R@20 {comp['R@20']:.3f}, R@50 {comp['R@50']:.3f}; "
                f"a pair among the 5 shown for {e['labels']['queries_with_a_pair_among_the_5_shown']:.0%} of them, "
                f"a relevant memory at ranks 6-20 for {e['labels']['queries_with_a_relevant_memory_at_ranks_6_20']:.0%}.",
                "",
                "| agreement | depth 10, blend 0.3 / 0.5 / 0.7 / 1.0 | depth 20 | depth 50 |",
                "|---|---|---|---|",
            ]
            g = e["simulated_R@5"]
            for auc in (0.6, 0.74, 0.85, 0.95, 1.0):
                cells = [
                    " / ".join(f"{g[f'auc{auc}/d{d}/b{b}']:.3f}" for b in (0.3, 0.5, 0.7, 1.0)) for d in (10, 20, 50)
                ]
                lines.append(f"| {auc} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lv = sub.add_parser("levers")
    lv.add_argument("--work", default="/tmp/cairn-loop")
    lv.add_argument("--session-size", type=int, default=8)
    lv.add_argument("--valid-conv", default="conv-42")
    lv.add_argument("--recall-only", action="store_true")
    lv.add_argument("--runs", default="window:data-top10:2:3e-5:3000")
    lp = sub.add_parser("loop")
    lp.add_argument("--work", default="/tmp/cairn-loop")
    lp.add_argument("--out", default=str(ROOT / "bench"))
    lp.add_argument("--session-size", type=int, default=8)
    lp.add_argument("--every", type=int, default=500, help="labels between two cron runs of train-reranker --auto")
    lp.add_argument("--regimes", default="oracle,noisy")
    lp.add_argument("--replay", default="", help="comma list of the conversations replayed (default: all but held out)")
    lp.add_argument("--max-prompts", type=int, default=0, help="first N questions of each replayed conversation")
    lp.add_argument("--held-out", default=",".join(HELD_OUT), help="held-out conversations evaluated")
    lp.add_argument("--budget-ms", type=float, default=0.0, help="CAIRN_RERANK_BUDGET_MS of the loop (0: none)")
    lp.add_argument("--floor", default="auto", help="CAIRN_COMPOSITE_FLOOR of the loop")
    lp.add_argument("--grade-rate", default="", help="CAIRN_GRADE_RATE of the loop (unset: auto, as shipped)")
    lp.add_argument("--baseline-only", action="store_true", help="only the composite on the held-out queries")
    lp.add_argument("train_args", nargs="*", help="extra train-reranker flags (after --)")
    sm = sub.add_parser("simulate", help="what blend and depth allow a student of a given agreement to do")
    sm.add_argument("--work", default="/tmp/cairn-loop")
    sm.add_argument("--seeds", type=int, default=3)
    sm.add_argument("--out", default=str(ROOT / "bench"))
    rc = sub.add_parser(
        "recheck", help="after `loop`: the curve's points with rank's whole pipeline, and a shadow student"
    )
    rc.add_argument("--work", default="/tmp/cairn-loop")
    rc.add_argument("--out", default=str(ROOT / "bench"))
    rc.add_argument("--regimes", default="")
    rc.add_argument("--max-queries", type=int, default=0, help="a seeded sample of the held-out queries (0: all)")
    rc.add_argument("--blends", default="0.5,1.0", help="blend weights the shadow student is measured at")
    rc.add_argument("--epochs", type=int, default=2, help="the shadow student's epochs (cron's default: 2)")
    rc.add_argument("--lr", type=float, default=3e-5, help="the shadow student's learning rate (cron's default)")
    rc.add_argument("--candidates", type=int, default=0, help="CAIRN_RERANK_CANDIDATES for the shadow (0: 20)")
    rc.add_argument("--variant-only", action="store_true", help="only another shadow student, beside the first")
    rp = sub.add_parser("report", help="write loop.md (and loop.png) from loop.json")
    rp.add_argument("--out", default=str(ROOT / "bench"))
    args = ap.parse_args()
    if args.cmd == "loop":
        loop(args)
    if args.cmd == "recheck":
        recheck(args)
    if args.cmd in ("loop", "report", "recheck"):
        out = Path(args.out)
        result = json.loads((out / "loop.json").read_text())
        plot(result["regimes"], out / "loop.png")
        (out / "loop.md").write_text(report(result, out))
    if args.cmd == "simulate":
        sim = simulate(args)
        (Path(args.out) / "loop_levers.json").write_text(json.dumps(sim, indent=1) + "\n")
    if args.cmd == "levers":
        out = levers(args)
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
