"""What each learner design does on questions it never saw (#27 point 3's ablation): one set of hook labels, every
learner trained on it, each judged on the held-out conversations in both forms (the hook window and the bare
question) against the composite, paired 95% intervals per question.

    .venv/bin/python scripts/bench_learners.py [--labels 2000] [--noise 0.0] [--variants student-window,...]

The labels are what the loop's hooks would collect, without the hooks' processes: the replayed (dev)
conversations' questions in session order, each ranked as the hook ranks it (its window, `rank()`, the composite as
main ships it, top 5), graded by the oracle (3 when the memory stands for a turn of the question's evidence, else 0;
`--noise`: each grade flipped with that probability), until `--labels` grades. Held out (never labelled): bench_loop's
conversations (conv-30, conv-41, conv-47). Every learner trains exactly as `cairn train-reranker` would on those
rows (the same pairs, weights, epochs and optimiser); the variants differ in one thing each (VARIANTS). Results:
bench/learners.md / .json. Data read in place from ../shared/data.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_loop  # noqa: E402
import loopdata  # noqa: E402

SEED = 13
VARIANTS = {
    # name: (what it changes, learner, training form, frozen lower layers)
    "student-window": ("the student as shipped before #27: pairs on the hook window", "student", "window", 0),
    "student-prompt": ("the student on the prompt alone", "student", "prompt", 0),
    "student-both": (
        "the student on both forms (each label gives a window pair and a prompt pair)",
        "student",
        "both",
        0,
    ),
    "student-both-frozen": ("as student-both, embeddings and the lower 3 of 6 layers frozen", "student", "both", 3),
    "embedder": (
        "no student: the bi-encoder itself fine-tuned on the same pairs (both forms; contrastive, the hook's "
        "negatives and the batch's, temperature 0.05, lr 2e-5, 1 epoch, embeddings and the lower 3 layers "
        "frozen), the store re-embedded with it; the composite alone ranks (no cost on the hot path)",
        "embedder",
        "both",
        3,
    ),
}
EMBED_LR, EMBED_EPOCHS, EMBED_TEMPERATURE, EMBED_BATCH = 2e-5, 1, 0.05, 16


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def labels(home: Path, work: Path, convs, mem: dict, *, budget: int, noise: float, size: int) -> list:
    """The hook's graded deliveries of the replayed conversations (LabelRows), `budget` grades at most."""
    import cairn_cli
    from cairn_cli.core.learning.export import LabelRow, query_key
    from cairn_cli.core.ranking.rank import RankQuery, rank

    loopdata.use_home(home)
    store = cairn_cli.open_store(create=None)
    engine = store.engine(with_reranker=False)
    windows = bench_loop.session_windows(work / "label-transcripts", convs, size)
    sessions = [(conv, sid, qs) for conv in convs for sid, qs in conv.sessions(size)]
    order = sorted(range(len(sessions)), key=lambda i: (sessions[i][2][0].index, sessions[i][0].sample_id))
    rng = random.Random(SEED)
    rows: list = []
    for i in order:
        conv, _, questions = sessions[i]
        for q in questions:
            if len(rows) >= budget:
                return rows
            window = windows[conv.sample_id, q.index]
            ranking = rank(RankQuery(window, k=5, scope=conv.sample_id), store.settings, engine)
            for item in ranking.items:
                grade = 3 if mem[item.id][1] & q.evidence else 0
                if noise and rng.random() < noise:
                    grade = 3 - grade
                rows.append(
                    LabelRow(
                        window.text,
                        item.content,
                        grade,
                        query_key=query_key(window.text),
                        memory_id=item.id,
                        scope=conv.sample_id,
                        prompt=q.text,
                    )
                )
    return rows


def in_form(rows: list, form: str) -> list:
    """The rows as training sees them: on the window (as logged), on the prompt alone, or both (each row twice)."""
    from dataclasses import replace

    from cairn_cli.core.learning.export import query_key

    prompt_rows = [replace(r, query=r.prompt, query_key="p:" + query_key(r.prompt)) for r in rows]
    return {"window": rows, "prompt": prompt_rows, "both": rows + prompt_rows}[form]


def train_student(rows: list, form: str, frozen: int) -> tuple[object, dict]:
    """A student trained on `rows` as `cairn train-reranker` trains one (pairs, weights, epochs, optimiser)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.learning.attempt import TrainOptions
    from cairn_cli.core.learning.pairs import make_pairs
    from cairn_cli.core.learning.trainer import epochs_for
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    opts, s = TrainOptions(), Settings()
    rows = in_form(rows, form)
    pairs = make_pairs(rows, {r.query_key for r in rows}, min_gap=opts.min_gap)
    model = CrossEncoderModel(bundled_base(), max_length=s.RERANKER_MAX_LENGTH)
    if frozen:
        base = model.model.base_model
        for p in base.embeddings.parameters():
            p.requires_grad = False
        for layer in base.encoder.layer[:frozen]:
            for p in layer.parameters():
                p.requires_grad = False
    triples = [(p.query, p.better, p.worse) for p in pairs]
    epochs = epochs_for(len(triples))
    stats = model.train_pairwise(
        triples,
        epochs=epochs,
        batch_size=opts.batch_size,
        lr=opts.lr,
        margin=opts.margin,
        seed=opts.seed,
        weights=[p.weight for p in pairs],
    )
    info = {"pairs": len(pairs), "epochs": epochs, "train_s": stats.seconds, "peak_rss_mb": stats.peak_rss_mb}
    info["ms_per_pair_pass"] = round(1000 * stats.seconds / max(1, len(triples) * epochs), 1)
    return model.serve_mode(), info


def train_embedder(rows: list, form: str, frozen: int) -> tuple[object, dict]:
    """The bundled bi-encoder fine-tuned on the label pairs: for each (query, better, worse), InfoNCE over the
    better against the pair's worse and every other text of the batch, at EMBED_TEMPERATURE, each pair's loss times
    its weight. Returns an encoder of the same name (the store's vectors must be re-embedded with it) and its cost."""
    import resource

    import torch

    from cairn_cli.config import Settings
    from cairn_cli.core.learning.attempt import TrainOptions
    from cairn_cli.core.learning.pairs import make_pairs
    from cairn_cli.ml.models import SentenceEncoder, get_encoder

    s, opts = Settings(), TrainOptions()
    base = get_encoder(s.EMBED_MODEL, s.EMBED_DTYPE)
    model = base.trainable()
    bert = model[0].auto_model
    if frozen:
        for prm in bert.embeddings.parameters():
            prm.requires_grad = False
        for layer in bert.encoder.layer[:frozen]:
            for prm in layer.parameters():
                prm.requires_grad = False
    rows = in_form(rows, form)
    pairs = make_pairs(rows, {r.query_key for r in rows}, min_gap=opts.min_gap)
    rng = random.Random(SEED)
    order = list(pairs)
    optim = torch.optim.AdamW([prm for prm in model.parameters() if prm.requires_grad], lr=EMBED_LR)
    t0 = time.time()
    model.train()

    def embed(texts: list[str]):
        features = model.tokenize(texts)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=base.bf16):
            out = model(features)["sentence_embedding"].float()
        return torch.nn.functional.normalize(out, dim=-1)

    for _ in range(EMBED_EPOCHS):
        rng.shuffle(order)
        for start in range(0, len(order), EMBED_BATCH):
            batch = order[start : start + EMBED_BATCH]
            q = embed([b.query for b in batch])
            docs = embed([b.better for b in batch] + [b.worse for b in batch])
            logits = q @ docs.T / EMBED_TEMPERATURE  # row i: its better at column i, every other text a negative
            weights = torch.tensor([b.weight for b in batch])
            losses = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)), reduction="none")
            loss = (losses * weights).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
    model.eval()
    seconds = time.time() - t0
    tuned = SentenceEncoder(base.name, model, base.dim, base.bf16)
    info = {"pairs": len(pairs), "epochs": EMBED_EPOCHS, "train_s": round(seconds, 1)}
    info["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    info["ms_per_pair_pass"] = round(1000 * seconds / max(1, len(pairs) * EMBED_EPOCHS), 1)
    return tuned, info


def reembedded(home: Path, work: Path, encoder) -> Path:
    """A copy of `home` whose stored vectors are `encoder`'s (what deploying a learned embedder would do)."""
    import shutil

    import cairn_cli
    from cairn_cli.db.tables import Memory, memory_proxy

    copy_home = work / "home-embedder"
    if copy_home.exists():
        shutil.rmtree(copy_home)
    shutil.copytree(home, copy_home, symlinks=True, ignore=shutil.ignore_patterns("*.sock", "*.pid", "*.lock"))
    loopdata.use_home(copy_home)
    cairn_cli.open_store(create=None)
    rows = list(Memory.select(Memory.id, Memory.content).where(Memory.embedding.is_null(False)))
    vecs = encoder.encode([m.content for m in rows])
    with memory_proxy.atomic():
        for m, v in zip(rows, vecs):
            Memory.update(embedding=v.astype("float32").tobytes()).where(Memory.id == m.id).execute()
    return copy_home


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/cairn-learners")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument("--labels", type=int, default=2000)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--session-size", type=int, default=8)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--name", default="learners")
    args = ap.parse_args()
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    from cairn_cli.config import Settings
    from cairn_cli.core.learning.gate import StudentReranker

    t_start = time.time()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    convs = loopdata.conversations()
    held = [c for c in convs if c.sample_id in bench_loop.HELD_OUT]
    replayed = [c for c in convs if c.sample_id not in bench_loop.HELD_OUT]
    if home.exists():
        mem = bench_loop.store_map(home, convs)
    else:
        mem = bench_loop.build_store(home, convs)
    queries = bench_loop.held_out_queries(work, held, mem, args.session_size)
    rows = labels(home, work, replayed, mem, budget=args.labels, noise=args.noise, size=args.session_size)
    log(f"{len(rows)} labels ({sum(r.grade >= 2 for r in rows)} relevant), {len(queries)} held-out queries")
    composite = bench_loop.evaluate_live(home, queries, composite=True)
    log(f"composite: {bench_loop.summary(composite)}")
    result: dict = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "cpu": bench_loop.cpu(),
        "labels": len(rows),
        "noise": args.noise,
        "held_out": list(bench_loop.HELD_OUT),
        "queries": len(queries),
        "composite": composite,
        "variants": {},
    }
    out = Path(args.out)
    for name in args.variants.split(","):
        what, learner, form, frozen = VARIANTS[name]
        t0 = time.time()
        if learner == "embedder":
            encoder, info = train_embedder(rows, form, frozen)
            live = bench_loop.evaluate_live(reembedded(home, work, encoder), queries, composite=True, encoder=encoder)
        else:
            model, info = train_student(rows, form, frozen)
            student = StudentReranker(model, Settings().CROSS_ENCODER_STUDENT_FLOOR)
            live = bench_loop.evaluate_live(home, queries, reranker=student)
        live["vs_composite"] = bench_loop.versus(live, composite)
        live["training"] = info
        live["what"] = what
        result["variants"][name] = live
        log(f"{name} ({time.time() - t0:.0f} s, {info}): {bench_loop.summary(live)}")
        result["seconds"] = round(time.time() - t_start, 1)
        (out / f"{args.name}.json").write_text(json.dumps(strip(result), indent=1) + "\n")
        (out / f"{args.name}.md").write_text(report(result))
    return 0


def strip(result: dict) -> dict:
    """The result without the per-question lists (kept in memory for the intervals only)."""
    out = json.loads(json.dumps(result, default=str))
    for live in [out["composite"], *out["variants"].values()]:
        for form in live["forms"].values():
            form.pop("per_query", None)
    return out


def report(result: dict) -> str:
    c = result["cpu"]
    comp = result["composite"]["forms"]
    lines = [
        "# Learners on questions they never saw (#27 point 3)",
        "",
        f"`{result['command']}` — {result['date']}, {result.get('seconds', 0) / 60:.0f} min on {c['cores']} cores "
        f"({c['model']}); CPU flags: {' '.join(c['flags'])}.",
        "",
        f"{result['labels']} hook labels of the replayed conversations (oracle grades, noise {result['noise']:.0%}); "
        f"{result['queries']} held-out questions of {', '.join(result['held_out'])}, ranked by `rank()` in both "
        "forms. Δ: the learner minus the composite as main ships it, paired 95% bootstrap interval per question.",
        "",
        "| learner | window R@5 | Δ [95%] | window nDCG@10 | Δ | prompt R@5 | Δ [95%] | prompt nDCG@10 | Δ "
        "| pairs | ms / pair pass | train s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| composite | {comp['window']['R@5']:.3f} | | {comp['window']['nDCG@10']:.3f} | "
        f"| {comp['prompt']['R@5']:.3f} | | {comp['prompt']['nDCG@10']:.3f} | | | | | |",
    ]
    for name, v in result["variants"].items():
        f, d, t = v["forms"], v["vs_composite"], v["training"]
        cells = []
        for form in ("window", "prompt"):
            r5, nd = d[form]["R@5"], d[form]["nDCG@10"]
            cells += [
                f"{f[form]['R@5']:.3f}",
                f"{r5['delta']:+.3f} [{r5['ci95'][0]:+.3f}, {r5['ci95'][1]:+.3f}]",
                f"{f[form]['nDCG@10']:.3f}",
                f"{nd['delta']:+.3f} [{nd['ci95'][0]:+.3f}, {nd['ci95'][1]:+.3f}]",
            ]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {t['pairs']} | {t['ms_per_pair_pass']} | {t['train_s']:.0f} "
            f"| {t['peak_rss_mb']:.0f} |"
        )
    lines += ["", "Variants:", ""] + [f"- **{n}**: {v['what']}" for n, v in result["variants"].items()] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
