"""Does the hook's context window cost recall? (#26, point 5)

The hook ranks the prompt plus the session's last turns. Two sets, each ranked three ways through the product's
own `rank()` (core/ranking/rank.py: the engine's table, the ranking profile, the pipeline; no cross-encoder):
the prompt alone, the hook's window as it is ranked now (the prompt the query, the earlier turns context:
core/ranking/query.py), and the window as one text as it was ranked before (one vector, every term at weight 1).

- replay: the loop benchmark's replay (scripts/bench_loop.py): LoCoMo dev questions asked in sessions of 8, each
  after the session's earlier questions and their answers, so the earlier turns are unrelated questions; the
  window is built by the hook's build_context_window over the transcript written as Claude Code writes it.
- follow-ups: the frozen set of scripts/followups.py (902 pronoun follow-ups that need the earlier turn), the
  window built by build_context_window over each item's session turns; beside it the question with the name
  (`named`: what a perfect reading of the pronoun would rank).
- vague: a diagnostic built after the frozen set showed no room for the window to add (the named question ranks no
  better than the pronoun): each question, a short reply, then a prompt that says nothing by itself ("Tell me more
  about that."). Not frozen; used on dev only to choose among the weights that meet the targets.

Two stores of LoCoMo dev read in place (../shared/data, never copied), one scope per conversation: its
observations (bench_loop's store; detected as notes) and its dialog turns "Speaker: text" (bench_ranking's;
detected as dialog). A memory is relevant when its turn ids meet the question's evidence. R@5 is the share of the
relevant memories in the top 5, per question; every difference comes with a paired bootstrap 95% interval.
The engines: the daemon's (all-MiniLM-L6-v2 + BM25, the composite) and the lexical fallback (the store's full-text
index, no model). The composite floor is off (the ranking itself) unless --floor auto.

Split: fit on the dev conversations (all but scripts/locomo.py HELD_OUT), report on HELD_OUT (conv-43, 44, 47).
`--grid` sweeps, on dev only and at each composite floor (off, auto), how the two cosines are fused (`margin`,
the product's: max(prompt, window - CAIRN_CONTEXT_SIMILARITY_MARGIN); `scaled`: max(prompt, g x window); `mean`;
`sum`) x CAIRN_CONTEXT_TERM_WEIGHT, and the fallback's term weight (window_grid.json). The rule the shipped values
were chosen by (`choose`): every replay and follow-up cell (store x engine x floor) loses at most 0.005 against the
prompt alone; among those points, the best vague gain at the shipped floor.

    .venv/bin/python scripts/bench_window.py --grid          # the dev grid -> bench/window_grid.json
    .venv/bin/python scripts/bench_window.py                 # the evaluation -> bench/window.json, window.md
    .venv/bin/python scripts/bench_window.py --report        # window.md again from the json
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_loop  # noqa: E402
import followups  # noqa: E402
import locomo  # noqa: E402
import loopdata  # noqa: E402
from bench_ranking import paired_interval  # noqa: E402

SESSION_SIZE = 8  # bench_loop's replay: prompts per session
K = 5
STORES = ("observations", "turns")
SETS = ("replay", "followups", "vague")
GRID_SETS = SETS
FORMS = ("prompt", "window", "window_before")
LOOP_HELD_OUT = ("conv-30", "conv-41", "conv-47")  # bench_loop.py's held-out conversations (the issue's numbers)
GRID_TERMS = (0.1, 0.2, 0.3, 0.5)
TOLERANCE = 0.005  # the most a replay or follow-up cell may lose on dev for a grid point to be chosen


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def part_of(conv: str) -> str:
    return "held-out" if conv in locomo.HELD_OUT else "dev"


# -- the stores -------------------------------------------------------------------------------------------------


def memory_lines(kind: str) -> list[tuple[dict, set[str]]]:
    """(a `memory import` line, the turn ids it stands for) of every dev conversation, one scope each."""
    out = []
    if kind == "observations":
        for conv in loopdata.conversations():
            out += [(line, ids) for line, (_, ids) in zip(loopdata.memory_lines(conv), conv.observations)]
        return out
    for conv in locomo.conversations():
        turns, index = locomo.turns_and_index(conv)
        by_turn = {i: dia for dia, i in index.items()}
        for i, text in enumerate(turns):
            ids = {by_turn[i]} if i in by_turn else set()
            out.append(({"content": text, "scope": conv["sample_id"], "kind": "fact"}, ids))
    return out


def build_store(work: Path, kind: str) -> dict[int, tuple[str, set[str]]]:
    """The store of `kind` under work/<kind> (built once, embedded in process); memory id -> (scope, turn ids)."""
    import cairn_cli

    home = work / kind
    mapping = home / "memories.json"
    loopdata.use_home(home)
    if mapping.is_file():
        cairn_cli.open_store(create=None)
        return {int(k): (v[0], set(v[1])) for k, v in json.loads(mapping.read_text()).items()}
    home.mkdir(parents=True, exist_ok=True)
    store = cairn_cli.open_store(create=None)
    lines = memory_lines(kind)
    log(f"{kind}: importing {len(lines)} memories")
    out: dict[int, tuple[str, set[str]]] = {}
    for start in range(0, len(lines), 500):
        chunk = lines[start : start + 500]
        for (line, ids), r in zip(chunk, store.add_many([line for line, _ in chunk])):
            out.setdefault(r.id, (line["scope"], set()))[1].update(ids)
    mapping.write_text(json.dumps({k: [v[0], sorted(v[1])] for k, v in out.items()}))
    return out


# -- the queries ------------------------------------------------------------------------------------------------


def _window(prompt: str, path: Path | None):
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.context import build_context_window

    s = Settings()
    return build_context_window(prompt, path, max_turns=s.CONTEXT_MAX_TURNS, max_chars=s.CONTEXT_MAX_CHARS)


def replay_queries(work: Path) -> list[dict]:
    """bench_loop's replay: every dev question, asked in sessions of SESSION_SIZE after the session's earlier
    questions and their (gold) answers; the hook's window over the transcript as it is written."""
    convs = loopdata.conversations()
    windows = bench_loop.session_windows(work / "replay-transcripts", convs, SESSION_SIZE)
    return [
        {
            "set": "replay",
            "id": f"{conv.sample_id}/{q.index}",
            "conv": conv.sample_id,
            "window": windows[conv.sample_id, q.index],
            "prompt": _window(q.text, None),
            "evidence": set(q.evidence),
            "first": q.index % SESSION_SIZE == 0,  # a session's first prompt has no earlier turn
        }
        for conv in convs
        for q in conv.questions
    ]


def followup_queries(work: Path) -> list[dict]:
    """The frozen follow-up set, each window built by the hook's code over the item's session; `named`: the
    question as LoCoMo asks it, with the name (what a perfect reading of the pronoun would rank: the ceiling of
    what the earlier turn can add)."""
    out = []
    root = work / "followup-transcripts"
    root.mkdir(parents=True, exist_ok=True)
    for i, it in enumerate(followups.load()):
        path = root / f"{i}.jsonl"
        path.unlink(missing_ok=True)
        writer = loopdata.TranscriptWriter(path, f"followup-{i}", f"/locomo/{it['sample_id']}")
        (_, earlier), (_, reply), (_, followup) = it["turns"]
        writer.user(earlier)
        writer.assistant([reply])
        writer.user(followup)
        window = _window(followup, path)
        if window.text != it["window"]:
            raise SystemExit(f"{it['id']}: the hook's window is not the frozen set's (the window changed shape)")
        out.append(
            {
                "set": "followups",
                "id": it["id"],
                "conv": it["sample_id"],
                "window": window,
                "prompt": _window(followup, None),
                "named": _window(it["question"], None),
                "evidence": set(it["evidence"]),
                "first": False,
            }
        )
    return out


# a prompt that says nothing by itself: what it asks is in the turn before it
VAGUE = (
    "Tell me more about that.",
    "What else do you know about it?",
    "Can you check your notes on that?",
    "And what about that one?",
)
VAGUE_REPLY = "Let me check."


def vague_queries(work: Path) -> list[dict]:
    """A diagnostic built after the frozen follow-ups showed no room (see bench/window.md), never frozen: every
    dev question asked, the agent answering VAGUE_REPLY, then a prompt from VAGUE (by a hash of the question's id)
    that needs the question to be understood; `named`: the question alone (the ceiling)."""
    out = []
    root = work / "vague-transcripts"
    for conv in loopdata.conversations():
        for q in conv.questions:
            item_id = f"{conv.sample_id}/{q.index}"
            prompt = VAGUE[int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % len(VAGUE)]
            path = root / f"{conv.sample_id}-{q.index}.jsonl"
            path.unlink(missing_ok=True)
            writer = loopdata.TranscriptWriter(path, f"vague-{item_id}", conv.cwd)
            writer.user(q.text)
            writer.assistant([VAGUE_REPLY])
            writer.user(prompt)
            out.append(
                {
                    "set": "vague",
                    "id": item_id,
                    "conv": conv.sample_id,
                    "window": _window(prompt, path),
                    "prompt": _window(prompt, None),
                    "named": _window(q.text, None),
                    "evidence": set(q.evidence),
                    "first": False,
                }
            )
    return out


def before(window):
    """The window as one text, as it was ranked before #26 point 5: the whole text is the prompt (one vector,
    every term at 1), no earlier turns apart."""
    from cairn_cli.core.ranking.context import ContextWindow

    return ContextWindow(text=window.text, key=window.key, prompt=window.text, turns_used=window.turns_used)


# -- ranking ----------------------------------------------------------------------------------------------------


class CachedEncoder:
    """The bundled encoder with a cache of the texts it embedded (on disk under --work): the grid re-ranks the
    same prompts and windows many times."""

    def __init__(self, inner, path: Path):
        self.inner, self.name, self.dim, self.path = inner, inner.name, inner.dim, path
        self.cache: dict[str, np.ndarray] = {}
        if path.is_file():
            data = np.load(path)
            self.cache = dict(zip(data["keys"].tolist(), data["vecs"]))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def encode(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self.cache}.items())
        if missing:
            for (k, _), vec in zip(missing, self.inner.encode([t for _, t in missing], progress=progress)):
                self.cache[k] = vec
        return np.stack([self.cache[k] for k in keys]) if keys else np.zeros((0, self.dim), dtype=np.float32)

    def save(self) -> None:
        keys = sorted(self.cache)
        np.savez(self.path, keys=np.array(keys), vecs=np.stack([self.cache[k] for k in keys]))


def engines(work: Path) -> dict:
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.ml.models import get_encoder

    os.environ["HF_HUB_OFFLINE"] = "1"
    encoder = CachedEncoder(get_encoder("all-MiniLM-L6-v2", Settings().EMBED_DTYPE), work / "query-vectors.npz")
    return {"composite": RankEngine(encoder, None), "fallback": RankEngine.lexical_fallback("bench_window")}


def prefetch(engine, queries: list[dict]) -> None:
    """Embed every text the ranking will ask for in one pass (prompts, windows), cached."""
    contexts = [c for q in queries for c in (q["window"], q["prompt"], q.get("named")) if c is not None]
    texts = sorted({t for c in contexts for t in (c.prompt, c.text)})
    missing = [t for t in texts if CachedEncoder.key(t) not in engine.encoder.cache]
    if missing:
        log(f"embedding {len(missing)} query texts")
        engine.encoder.encode(missing, progress=True)
        engine.encoder.save()


def ranked(engine, context, conv: str, settings) -> list[int]:
    from cairn_cli.core.ranking.rank import RankQuery, rank

    return [m.id for m in rank(RankQuery(context, K, conv), settings, engine).items]


def recall(ids: list[int], relevant: set[int]) -> float:
    return len(relevant & set(ids[:K])) / len(relevant)


def run(engine, queries: list[dict], relevant: dict, settings, forms=FORMS) -> dict[str, np.ndarray]:
    """Per form, R@5 of every query, in the order of `queries` (each has relevant memories)."""
    contexts = {
        "prompt": lambda q: q["prompt"],
        "window": lambda q: q["window"],
        "window_before": lambda q: before(q["window"]),
        "named": lambda q: q["named"],
    }
    out: dict[str, list[float]] = {f: [] for f in forms}
    for q in queries:
        rel = relevant[q["set"], q["id"]]
        for form in forms:
            out[form].append(recall(ranked(engine, contexts[form](q), q["conv"], settings), rel))
    return {f: np.array(v) for f, v in out.items()}


def relevance(queries: list[dict], memories: dict[int, tuple[str, set[str]]]) -> dict:
    by_scope: dict[str, list[tuple[int, set[str]]]] = {}
    for mid, (scope, ids) in memories.items():
        by_scope.setdefault(scope, []).append((mid, ids))
    return {
        (q["set"], q["id"]): {mid for mid, ids in by_scope.get(q["conv"], []) if ids & q["evidence"]} for q in queries
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def summary(values: dict[str, np.ndarray], keep: np.ndarray) -> dict:
    """Means per form over the kept queries, and each other form against the prompt alone (paired)."""
    out: dict = {"n": int(keep.sum())}
    for form, v in values.items():
        out[form] = _r(float(v[keep].mean())) if keep.any() else None
    for form in values:
        if form != "prompt":
            iv = paired_interval(values[form][keep] - values["prompt"][keep])
            out[f"{form}_vs_prompt"] = {k: (_r(x) if isinstance(x, float) else x) for k, x in iv.items()}
    return out


def settings_for(floor: str, similarity: float | None = None, terms: float | None = None):
    from cairn_cli.config import Settings

    overrides: dict[str, object] = {"COMPOSITE_FLOOR": floor}
    if similarity is not None:
        overrides["CONTEXT_SIMILARITY_MARGIN"] = similarity
    if terms is not None:
        overrides["CONTEXT_TERM_WEIGHT"] = terms
    return Settings(**overrides)


def set_queries(queries: list[dict], set_name: str, rel: dict, part: str | None = None) -> list[dict]:
    return [
        q
        for q in queries
        if q["set"] == set_name and rel[q["set"], q["id"]] and (part is None or part_of(q["conv"]) == part)
    ]


def stores(args, work: Path, queries: list[dict], eng: dict):
    """Per store kind asked for: (the kind, each query's relevant memories), the store built and the queries'
    vectors fetched first."""
    for kind in args.stores.split(","):
        rel = relevance(queries, build_store(work, kind))
        prefetch(eng["composite"], queries)
        yield kind, rel


def evaluate(args, work: Path, queries: list[dict]) -> dict:
    """Every (floor, store, engine, set): R@5 per form, per part (dev, held-out, bench_loop's held-out, all)."""
    eng = engines(work)
    result: dict = {}
    for kind, rel in stores(args, work, queries, eng):
        for floor in args.floors.split(","):
            for name in args.engines.split(","):
                for set_name in SETS:
                    qs = set_queries(queries, set_name, rel)
                    forms = FORMS + (("named",) if set_name != "replay" else ())
                    t0 = time.time()
                    values = run(eng[name], qs, rel, settings_for(floor), forms)
                    convs = np.array([q["conv"] for q in qs])
                    parts = {
                        "dev": ~np.isin(convs, locomo.HELD_OUT),
                        "held-out": np.isin(convs, locomo.HELD_OUT),
                        "loop held-out": np.isin(convs, LOOP_HELD_OUT),
                        "all": np.ones(len(qs), dtype=bool),
                    }
                    if set_name == "replay":
                        first = np.array([q["first"] for q in qs])
                        parts["held-out, with earlier turns"] = parts["held-out"] & ~first
                    entry = {part: summary(values, keep) for part, keep in parts.items()}
                    result.setdefault(f"floor {floor}", {}).setdefault(kind, {}).setdefault(name, {})[set_name] = entry
                    ho = entry["held-out"]
                    log(
                        f"floor {floor} / {kind} / {name} / {set_name}: held-out prompt {ho['prompt']:.3f} "
                        f"window {ho['window']:.3f} before {ho['window_before']:.3f} ({time.time() - t0:.0f} s)"
                    )
    return result


# how the prompt's and the window's cosines may be fused, each with the values its parameter is swept over (the
# product's is `margin`: scoring.fuse_similarities, max(prompt, window - m); the others were tried and not kept)
FUSIONS = {
    "margin": (lambda p, w, m: np.maximum(p, w - np.float32(m)), (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)),
    "scaled": (lambda p, w, g: np.maximum(p, np.float32(g) * w), (0.25, 0.5, 0.75, 1.0)),
    "mean": (lambda p, w, g: (p + np.float32(g) * w) / np.float32(1 + g), (0.25, 0.5, 0.75, 1.0)),
    "sum": (lambda p, w, g: p + np.float32(g) * w, (0.25, 0.5, 0.75, 1.0)),
}


def grid(args, work: Path, queries: list[dict]) -> dict:
    """On the dev conversations only, at each composite floor: window R@5 minus the prompt's, per fusion x its
    parameter x term weight (the daemon's engine) and per term weight (the fallback's), per store and set."""
    from cairn_cli.core.ranking import scoring

    eng = engines(work)
    shipped = scoring.fuse_similarities
    out: dict = {}
    for kind, rel in stores(args, work, queries, eng):
        for floor in args.floors.split(","):
            for set_name in GRID_SETS:
                qs = set_queries(queries, set_name, rel, "dev")
                cell = out.setdefault(f"floor {floor}", {}).setdefault(kind, {}).setdefault(set_name, {"n": len(qs)})
                base = {name: run(eng[name], qs, rel, settings_for(floor), ("prompt",))["prompt"] for name in eng}
                for name, values in base.items():
                    cell[f"{name}/prompt"] = _r(float(values.mean()))
                try:
                    for fusion in args.fusions.split(","):
                        scoring.fuse_similarities, values = FUSIONS[fusion]
                        for x in values:
                            for terms in GRID_TERMS:
                                v = run(eng["composite"], qs, rel, settings_for(floor, x, terms), ("window",))["window"]
                                cell[f"composite/{fusion}/{x}/t{terms}"] = _r(float((v - base["composite"]).mean()))
                finally:
                    scoring.fuse_similarities = shipped
                for terms in GRID_TERMS:  # the fallback has no similarity
                    v = run(eng["fallback"], qs, rel, settings_for(floor, 0.0, terms), ("window",))["window"]
                    cell[f"fallback/t{terms}"] = _r(float((v - base["fallback"]).mean()))
                log(f"grid floor {floor} / {kind} / {set_name} done")
    return out


def choose(grid_result: dict) -> list[tuple]:
    """The rule the shipped weights were chosen by, on dev: at every floor, every replay and follow-up cell (store x
    engine) loses at most TOLERANCE against the prompt alone; among those points, the best mean vague R@5 gain at
    the shipped floor (auto). Returns (vague gain, variant) best first."""
    floors = list(grid_result)
    first = grid_result[floors[0]]
    variants = [k for k in first[next(iter(first))]["replay"] if k.startswith("composite/") and k != "composite/prompt"]
    out = []
    for key in variants:
        fallback = "fallback/" + key.rsplit("/", 1)[1]
        worst = min(
            cells[set_name][k]
            for stores in grid_result.values()
            for cells in stores.values()
            for set_name in ("replay", "followups")
            for k in (key, fallback)
        )
        if worst >= -TOLERANCE:
            shipped_floor = grid_result.get("floor auto", first)
            gain = float(np.mean([cells["vague"][key] for cells in shipped_floor.values()]))
            out.append((round(gain, 4), key))
    return sorted(out, reverse=True)


# -- the report -------------------------------------------------------------------------------------------------


def _iv(d: dict) -> str:
    if d.get("low") is None:
        return f"{d['diff']:+.3f}"
    return f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def report(result: dict, grid_result: dict | None) -> str:
    """bench/window.md from window.json (and the dev grid)."""
    names = {"replay": "replay (unrelated earlier turns)", "followups": "follow-ups (frozen set)", "vague": "vague"}
    lines = [
        "# The hook's context window and recall (#26, point 5)",
        "",
        f"`{result['command']}` — {result['date']}, {result['cores']} cores; CPU flags: {result['cpu_flags']}.",
        "",
        f"R@{K} of the composite (all-MiniLM-L6-v2 + BM25, no cross-encoder) and of the lexical fallback, ranked "
        "through `rank()`; paired bootstrap 95% intervals (2,000 resamples, seed 13) of each form minus the prompt "
        f"alone. Weights in force: {result['weights']}; window bounds {result['context']}. Held out: "
        f"{', '.join(result['held_out'])} (scripts/locomo.py HELD_OUT); fitted on the other four.",
        "",
        "Forms: **prompt** = the prompt alone; **window** = the hook's window as ranked now (the prompt the query, "
        "the earlier turns context); **before** = the same window ranked as one text (how it was ranked before); "
        "**named** = the question with the subject named (follow-ups, vague: the ceiling of what the earlier turn "
        "can tell).",
        "",
    ]
    findings = Path(__file__).resolve().parents[1] / "bench" / "window_findings.md"
    if findings.is_file():
        lines += [findings.read_text().strip(), ""]
    for floor, stores in result["results"].items():
        for part in ("held-out", "dev", "loop held-out"):
            lines += [
                f"## {part}, composite {floor}",
                "",
                "| store | engine | set | n | prompt | window | before | named | window − prompt | before − prompt |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for kind, engines_ in stores.items():
                for name, sets in engines_.items():
                    for set_name, entry in sets.items():
                        e = entry[part]
                        named = f"{e['named']:.3f}" if e.get("named") is not None else "–"
                        lines.append(
                            f"| {kind} | {name} | {names[set_name]} | {e['n']} | {e['prompt']:.3f} | "
                            f"{e['window']:.3f} | {e['window_before']:.3f} | {named} | "
                            f"{_iv(e['window_vs_prompt'])} | {_iv(e['window_before_vs_prompt'])} |"
                        )
            lines.append("")
    if grid_result:
        lines += [
            "## The dev grid (window R@5 minus the prompt's, dev conversations only)",
            "",
            "The daemon's engine per fusion of the cosines (`margin`: max(prompt, window - m), shipped; `scaled`: "
            "max(prompt, g x window); `mean`: (prompt + g x window) / (1 + g); `sum`: prompt + g x window) and term "
            f"weight t; the fallback per t. Chosen by the rule in scripts/bench_window.py (every replay and follow-up "
            f"cell loses at most {TOLERANCE}; then the best vague gain at the shipped floor): "
            + "; ".join(f"{key} (vague {gain:+.3f})" for gain, key in grid_result["chosen"][:3])
            + ".",
            "",
        ]
        for floor, g in grid_result["grid"].items():
            cols = [(kind, set_name) for kind in g for set_name in g[kind]]
            lines += [
                f"### composite {floor}",
                "",
                "| variant | " + " | ".join(f"{k} / {s}" for k, s in cols) + " |",
                "|---|" + "---|" * len(cols),
                "| R@5 of the prompt alone, composite | "
                + " | ".join(f"{g[k][s]['composite/prompt']:.3f}" for k, s in cols)
                + " |",
                "| R@5 of the prompt alone, fallback | "
                + " | ".join(f"{g[k][s]['fallback/prompt']:.3f}" for k, s in cols)
                + " |",
            ]
            keys = [k for k in g[cols[0][0]][cols[0][1]] if k.count("/") >= 1 and not k.endswith("/prompt")]
            for key in keys:
                lines.append(f"| {key} | " + " | ".join(f"{g[k][s][key]:+.4f}" for k, s in cols) + " |")
            lines.append("")
    return "\n".join(lines)


def main() -> int:
    from cairn_cli.config import Settings
    from cairn_cli.ml.device import simd_summary

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/cairn-window")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--engines", default="composite,fallback")
    ap.add_argument("--floors", default="off,auto", help="CAIRN_COMPOSITE_FLOOR values (off: the ranking itself)")
    ap.add_argument("--grid", action="store_true", help="sweep the fusion and the two weights on dev (grid.json)")
    ap.add_argument("--fusions", default=",".join(FUSIONS))
    ap.add_argument("--report", action="store_true", help="only write window.md from window.json (+ window_grid.json)")
    args = ap.parse_args()
    out = Path(args.out)
    grid_path = out / "window_grid.json"
    if args.report:
        result = json.loads((out / "window.json").read_text())
        g = json.loads(grid_path.read_text()) if grid_path.is_file() else None
        (out / "window.md").write_text(report(result, g) + "\n")
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries = replay_queries(work) + followup_queries(work) + vague_queries(work)
    log(", ".join(f"{n} {sum(q['set'] == n for q in queries)}" for n in SETS) + " queries")
    s = Settings()
    meta = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "cpu_flags": simd_summary(),
        "cores": os.cpu_count(),
        "k": K,
        "held_out": list(locomo.HELD_OUT),
        "weights": {
            "CONTEXT_SIMILARITY_MARGIN": s.CONTEXT_SIMILARITY_MARGIN,
            "CONTEXT_TERM_WEIGHT": s.CONTEXT_TERM_WEIGHT,
        },
        "context": {"CONTEXT_MAX_TURNS": s.CONTEXT_MAX_TURNS, "CONTEXT_MAX_CHARS": s.CONTEXT_MAX_CHARS},
    }
    if args.grid:
        result = {**meta, "grid": grid(args, work, queries)}
        result["chosen"] = choose(result["grid"])[:10]
        grid_path.write_text(json.dumps(result, indent=1) + "\n")
        log(f"the rule's choice: {result['chosen'][:3]}")
        return 0
    result = {**meta, "results": evaluate(args, work, queries)}
    (out / "window.json").write_text(json.dumps(result, indent=1) + "\n")
    g = json.loads(grid_path.read_text()) if grid_path.is_file() else None
    (out / "window.md").write_text(report(result, g) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
