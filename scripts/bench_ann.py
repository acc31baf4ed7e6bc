"""#30 point 2, the choice of an approximate index: usearch, hnswlib and faiss (HNSW) against the exact scan, on the
bundled model's vectors of real text, grown to 100k / 1M with mixtures of them (synthetic, said so).

    .venv/bin/python scripts/bench_ann.py vectors --out /tmp/ann        # embed the real texts once (the bundled model)
    python -m venv /tmp/annvenv && /tmp/annvenv/bin/pip install numpy usearch hnswlib faiss-cpu
    /tmp/annvenv/bin/python scripts/bench_ann.py measure --vectors /tmp/ann --sizes 100000,1000000

`vectors`: LoCoMo dev's dialogue turns and questions, TREC DL 2019's passages and queries, Cranfield's abstracts
and queries (read in place from ../shared/data), embedded as cairn embeds memories and queries; saved as .npy.
`measure`: for each size, the memories are the real vectors plus mixtures of two of them (a continuous spread;
copies of one source would sit in near ties, and the exact top 50 would be decided among them); the queries are the
real queries. For each library: build time (2 threads), the index's size on disk, the time to load it back,
recall@50 against the exact scan (a found memory counts when it is at least as near as the exact 50th), and
single-query latency p50 / p95 on one thread, at the search breadth (ef) that first reaches recall >= 0.99.
Results: bench/ann.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
K = 50


def real_texts() -> tuple[list[str], list[str]]:
    """(memories, queries) of real text."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import locomo

    memories: list[str] = []
    queries: list[str] = []
    for conv in locomo.conversations():
        turns, _ = locomo.turns_and_index(conv)
        memories += turns
        queries += [q["question"] for q in conv["qa"] if q.get("category") != 5]
    trec = DATA / "trec_dl" / "judged_pairs_dl19.jsonl"
    if trec.exists():
        rows = [json.loads(line) for line in trec.read_text().splitlines()]
        memories += list(dict.fromkeys(r["passage"] for r in rows))
        queries += list(dict.fromkeys(r["query"] for r in rows))
    cran = DATA / "cranfield" / "cran.all.1400"
    if cran.exists():
        memories += [d.split(".W", 1)[-1].strip() for d in cran.read_text(errors="replace").split(".I ")[1:]]
    return memories, queries


def make_vectors(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np

    from cairn_cli.ml.models import embed_here

    memories, queries = real_texts()
    out.mkdir(parents=True, exist_ok=True)
    for name, texts in (("memories", memories), ("queries", queries)):
        started = time.perf_counter()
        _, vecs = embed_here(texts, "all-MiniLM-L6-v2")
        vecs = np.asarray(vecs, dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        np.save(out / f"{name}.npy", vecs)
        print(f"{name}: {len(texts)} in {time.perf_counter() - started:.0f}s", file=sys.stderr)


def grown(real, n: int, seed: int = 7):
    """The real vectors, then mixtures of two of them (weights 0.5–1 and the rest, a little noise): a continuous
    spread like a larger store's, without the near ties that copies of one source would make."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if n <= len(real):
        return real[:n].copy()
    out = [real]
    for start in range(0, n - len(real), 100_000):
        m = min(100_000, n - len(real) - start)
        a, b = real[rng.integers(0, len(real), m)], real[rng.integers(0, len(real), m)]
        w = rng.uniform(0.5, 1.0, (m, 1)).astype(np.float32)
        mix = w * a + (1 - w) * b + rng.normal(0, 0.01, a.shape).astype(np.float32)
        out.append(mix / np.linalg.norm(mix, axis=1, keepdims=True))
    return np.vstack(out).astype(np.float32)


class Truth:
    """The exact top K of each query, and the K-th cosine: a found memory counts when it is at least as near as
    that (ties at the K-th place are not misses)."""

    def __init__(self, memories, queries):
        import numpy as np

        self.memories, self.queries = memories, queries
        kth = []
        for start in range(0, len(queries), 64):
            cos = queries[start : start + 64] @ memories.T
            kth.append(-np.partition(-cos, K - 1, axis=1)[:, K - 1])
        self.kth = np.concatenate(kth)

    def recall(self, found) -> float:
        import numpy as np

        hits = []
        for q, f, kth in zip(self.queries, found, self.kth):
            ids = np.asarray(f, dtype=np.int64)
            hits.append(float(np.sum(self.memories[ids] @ q >= kth - 1e-6)) / K)
        return statistics.fmean(hits)


def latencies(search, queries) -> tuple[float, float]:
    times = []
    for q in queries:
        started = time.perf_counter()
        search(q)
        times.append(1000 * (time.perf_counter() - started))
    times.sort()
    return round(times[len(times) // 2], 3), round(times[int(0.95 * (len(times) - 1))], 3)


def lib_usearch(memories, queries, truth, work: Path) -> dict:
    import numpy as np
    from usearch.index import Index

    index = Index(
        ndim=memories.shape[1], metric="cos", dtype=TUNING["dtype"], connectivity=TUNING["m"], expansion_add=128
    )
    started = time.perf_counter()
    index.add(np.arange(len(memories)), memories, threads=2)
    build = time.perf_counter() - started
    path = work / "usearch.index"
    index.save(str(path))
    started = time.perf_counter()
    loaded = Index.restore(str(path), view=True)  # memory-mapped: a restart reads no vector row by row
    load = time.perf_counter() - started
    out = {"build_s": round(build, 1), "disk_mb": round(path.stat().st_size / 2**20, 1), "load_s": round(load, 3)}
    out |= {"m": TUNING["m"], "dtype": TUNING["dtype"], "fetched": TUNING["fetch"]}
    fetch = max(K, TUNING["fetch"])

    def search(q, threads=1):
        """The `fetch` nearest by the index, the K nearest of them by the exact cosine (what cairn ranks with)."""
        keys = loaded.search(q, fetch, threads=threads).keys
        if fetch == K:
            return keys
        if keys.ndim == 1:
            return keys[np.argsort(-(memories[keys] @ q), kind="stable")[:K]]
        return [k[np.argsort(-(memories[k] @ v), kind="stable")[:K]] for k, v in zip(keys, q)]

    efs = TUNING["efs"]
    for ef in efs:
        loaded.expansion_search = ef
        r = truth.recall(search(queries, threads=2))
        print("  usearch ef", ef, "recall", round(r, 4), file=sys.stderr)
        if r >= 0.99 or ef == efs[-1]:
            p50, p95 = latencies(search, queries[:300])
            return {**out, "ef": ef, "recall@50": round(r, 4), "p50_ms": p50, "p95_ms": p95}
    return out


def lib_hnswlib(memories, queries, truth, work: Path) -> dict:
    import hnswlib
    import numpy as np

    index = hnswlib.Index(space="cosine", dim=memories.shape[1])
    index.init_index(max_elements=len(memories), ef_construction=128, M=16)
    index.set_num_threads(2)
    started = time.perf_counter()
    index.add_items(memories, np.arange(len(memories)))
    build = time.perf_counter() - started
    path = work / "hnswlib.bin"
    index.save_index(str(path))
    started = time.perf_counter()
    loaded = hnswlib.Index(space="cosine", dim=memories.shape[1])
    loaded.load_index(str(path), max_elements=len(memories))
    load = time.perf_counter() - started
    out = {"build_s": round(build, 1), "disk_mb": round(path.stat().st_size / 2**20, 1), "load_s": round(load, 3)}
    for ef in (64, 128, 256, 512):
        loaded.set_ef(ef)
        loaded.set_num_threads(2)
        found, _ = loaded.knn_query(queries, k=K)
        r = truth.recall(found)
        if r >= 0.99 or ef == 512:
            loaded.set_num_threads(1)
            p50, p95 = latencies(lambda q: loaded.knn_query(q, k=K), queries[:300])
            return {**out, "ef": ef, "recall@50": round(r, 4), "p50_ms": p50, "p95_ms": p95}
    return out


def lib_faiss(memories, queries, truth, work: Path) -> dict:
    import faiss

    faiss.omp_set_num_threads(2)
    index = faiss.IndexHNSWFlat(memories.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 128
    started = time.perf_counter()
    index.add(memories)
    build = time.perf_counter() - started
    path = work / "faiss.index"
    faiss.write_index(index, str(path))
    started = time.perf_counter()
    loaded = faiss.read_index(str(path), faiss.IO_FLAG_MMAP)
    load = time.perf_counter() - started
    out = {"build_s": round(build, 1), "disk_mb": round(path.stat().st_size / 2**20, 1), "load_s": round(load, 3)}
    for ef in (64, 128, 256, 512):
        loaded.hnsw.efSearch = ef
        _, found = loaded.search(queries, K)
        r = truth.recall(found)
        if r >= 0.99 or ef == 512:
            faiss.omp_set_num_threads(1)
            p50, p95 = latencies(lambda q: loaded.search(q[None, :], K), queries[:300])
            faiss.omp_set_num_threads(2)
            return {**out, "ef": ef, "recall@50": round(r, 4), "p50_ms": p50, "p95_ms": p95}
    return out


TUNING: dict = {"m": 16, "dtype": "f32", "fetch": K, "efs": (64, 128, 256, 512)}  # usearch's, from the command line
LIBS = {"usearch": lib_usearch, "hnswlib": lib_hnswlib, "faiss": lib_faiss}


def measure(vectors: Path, sizes: list[int], libs: list[str], out: Path) -> None:
    import numpy as np

    real = np.load(vectors / "memories.npy")
    queries = np.load(vectors / "queries.npy")
    results: dict = {"real_memories": len(real), "queries": len(queries), "sizes": {}, "cpu": cpu()}
    for n in sizes:
        memories = grown(real, n)
        started = time.perf_counter()
        truth = Truth(memories, queries)
        exact_ms = 1000 * (time.perf_counter() - started) / len(queries)
        p50, p95 = latencies(lambda q, m=memories: np.argpartition(-(m @ q), K)[:K], queries[:100])
        row: dict = {"exact": {"p50_ms": p50, "p95_ms": p95, "batched_ms_per_query": round(exact_ms, 3)}}
        with tempfile.TemporaryDirectory() as tmp:
            for lib in libs:
                try:
                    row[lib] = LIBS[lib](memories, queries, truth, Path(tmp))
                except ImportError as exc:
                    row[lib] = {"skipped": str(exc)}
                print(n, lib, row[lib], file=sys.stderr)
        results["sizes"][str(n)] = row
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(results))
    print(report(results))


def cpu() -> dict:
    flags = ""
    model = ""
    for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = line.split(":", 1)[1]
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in wanted if f in flags.split()]}


def report(results: dict) -> str:
    c = results["cpu"]
    lines = [
        "# Approximate indexes against the exact scan (#30 point 2)",
        "",
        f"Machine: {c['model']}, {c['cores']} cores, CPU flags `{' '.join(c['flags'])}`. `scripts/bench_ann.py`.",
        f"Vectors: the bundled model's, of {results['real_memories']} real texts (LoCoMo turns, TREC DL passages,"
        " Cranfield abstracts), grown with mixtures of two of them (synthetic) to each size; queries: "
        f"{results['queries']} real questions. Recall@50 against the exact scan (a found memory counts when it is at"
        " least as near as the exact 50th); latency one query, one thread.",
        "",
        "| size | index | build s (2 threads) | disk MB | load s (mmap) | ef | recall@50 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, row in results["sizes"].items():
        e = row["exact"]
        lines.append(f"| {n} | exact (numpy) | - | - | - | - | 1.0 | {e['p50_ms']} | {e['p95_ms']} |")
        for lib in LIBS:
            r = row.get(lib)
            if not r or "skipped" in r:
                continue
            lines.append(
                f"| {n} | {lib} | {r['build_s']} | {r['disk_mb']} | {r['load_s']} | {r.get('ef')} | "
                f"{r.get('recall@50')} | {r.get('p50_ms')} | {r.get('p95_ms')} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vectors")
    v.add_argument("--out", type=Path, default=Path("/tmp/ann"))
    m = sub.add_parser("measure")
    m.add_argument("--vectors", type=Path, default=Path("/tmp/ann"))
    m.add_argument("--sizes", default="100000,1000000")
    m.add_argument("--libs", default=",".join(LIBS))
    m.add_argument("--out", type=Path, default=ROOT / "bench" / "ann")
    m.add_argument("--m", type=int, default=16, help="usearch: the graph's connectivity")
    m.add_argument("--dtype", default="f32", help="usearch: how the vectors are kept (f32, f16, i8)")
    m.add_argument("--fetch", type=int, default=K, help="usearch: fetch this many, keep the K nearest by exact cosine")
    m.add_argument("--efs", default="64,128,256,512", help="usearch: the search breadths tried, in order")
    args = parser.parse_args()
    if args.cmd == "measure":
        TUNING.update(m=args.m, dtype=args.dtype, fetch=args.fetch, efs=tuple(int(x) for x in args.efs.split(",")))
    if args.cmd == "vectors":
        make_vectors(args.out)
    else:
        measure(args.vectors, [int(x) for x in args.sizes.split(",")], args.libs.split(","), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
