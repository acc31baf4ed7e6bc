"""Redaction benchmark: recall on labelled secrets, false positives on look-alikes, and the cost of `scrub` on a hook's
prompt.

The corpus is tests/data/secrets_corpus.jsonl: one labelled string a line, the secrets real-format fakes of every
kind `core/redact.py` names, the look-alikes what a prompt or a log is full of (git SHAs, UUIDs, file hashes,
base64 of ordinary text, code that names a secret without its value, prose about tokens). A part of it is the
scanners' own labelled test fixtures (detect-secrets, gitleaks, trufflehog; each row names its repository and path),
the rest written. A secret is caught when its `secret` substring is gone from `redact`'s output; a look-alike is a
false positive when the output differs from the input at all. Also reported: whether the placeholder names the
kind the row expects (a secret caught under another kind is still caught).

`scrub` (what every entrance calls) is timed on prompts of 200, 2,000 and 8,000 characters built from the corpus'
look-alikes and plain prose, without and with one secret in the middle, p50 / p95 over many runs; and the first call
in a fresh interpreter (import and the patterns compiled), which a hook process pays once.

    .venv/bin/python scripts/bench_redaction.py [--runs 400] [--out bench] [--name redaction]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from cairn_cli.core import metrics
from cairn_cli.core.redact import redact, scrub
from cairn_cli.ml.device import cpu_flags

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "secrets_corpus.jsonl"
PLACEHOLDER = re.compile(r"\[redacted:([a-z0-9-]+)\]")
RECALL_TARGET = 0.99
FP_TARGET = 0.01
SIZES = (200, 2_000, 8_000)
PROMPTS_PER_CELL = 20  # distinct prompts per (size, with / without a secret), cycled through the runs
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")
PROSE = [
    "the integration tests fail with connection refused, what should I start first?",
    "can you look at the retry logic in the worker and tell me why jobs run twice?",
    "we moved the cache to redis last week and the hit rate dropped, see the log below.",
    "please summarise what changed in the last three commits before I tag the release.",
    "the migration ran on staging but the new column is empty for old rows.",
    "here is the output of the failing step, I trimmed the noise:",
    "rank the memories by how often they were used, not by age.",
    "why does the hook take longer on the first prompt of a session?",
]


def load_corpus(path: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_public(row: dict) -> bool:
    return row["source"] != "written"


def machine() -> dict:
    """The CPU model, cores and the flags that decide the speed of what runs beside the hooks (bench_loop.py's)."""
    model = ""
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    flags = cpu_flags()
    return {"model": model or "unknown", "cores": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags]}


def evaluate(rows: list[dict]) -> dict:
    """Recall (overall, per kind, per source), false positives, placeholder kinds and idempotence over the corpus."""
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # kind -> [caught, total]
    by_source: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses, false_positives, wrong_kind, unstable = [], [], [], []
    caught = kind_agrees = fps = 0
    secrets = [r for r in rows if r["label"] == "secret"]
    lookalikes = [r for r in rows if r["label"] == "lookalike"]
    for row in rows:
        out, _ = redact(row["text"])
        if redact(out)[0] != out:
            unstable.append(row["text"])
        where = "public" if is_public(row) else "written"
        if row["label"] == "secret":
            hit = row["secret"] not in out
            by_kind[row["kind"]][1] += 1
            by_source[where][1] += 1
            if not hit:
                misses.append({"kind": row["kind"], "text": row["text"], "output": out, "source": row["source"]})
                continue
            caught += 1
            by_kind[row["kind"]][0] += 1
            by_source[where][0] += 1
            kinds = PLACEHOLDER.findall(out)
            if row["kind"] in kinds:
                kind_agrees += 1
            else:
                wrong_kind.append({"expected": row["kind"], "got": sorted(set(kinds)), "text": row["text"]})
        elif out != row["text"]:
            fps += 1
            false_positives.append({"text": row["text"], "output": out, "source": row["source"]})
    return {
        "recall": round(caught / len(secrets), 4),
        "caught": caught,
        "secrets": len(secrets),
        "false_positive_rate": round(fps / len(lookalikes), 4),
        "false_positives": fps,
        "lookalikes": len(lookalikes),
        "kind_agreement": round(kind_agrees / max(1, caught), 4),
        "per_kind": {k: {"caught": c, "total": t, "recall": round(c / t, 4)} for k, (c, t) in sorted(by_kind.items())},
        "per_source": {k: {"caught": c, "total": t, "recall": round(c / t, 4)} for k, (c, t) in by_source.items()},
        "misses": misses,
        "false_positive_rows": false_positives,
        "other_kind": wrong_kind,
        "not_idempotent": unstable,
    }


def corpus_counts(rows: list[dict]) -> dict:
    sources = Counter()
    for row in rows:
        sources[row["source"].split(" (", 1)[0] if is_public(row) else "written"] += 1
    return {
        "total": len(rows),
        "by_label": dict(Counter(r["label"] for r in rows)),
        "by_kind": dict(sorted(Counter(r["kind"] for r in rows if r["label"] == "secret").items())),
        "by_source": dict(sources.most_common()),
        "public_share": round(sum(is_public(r) for r in rows) / len(rows), 3),
    }


def make_prompt(rng: random.Random, filler: list[str], size: int, secret: str | None) -> str:
    """A prompt of about `size` characters: whole lines of prose and look-alikes, never cut inside one, and `secret`'s
    whole row in the middle when given."""
    budget = size - (len(secret) + 1 if secret else 0)
    parts: list[str] = []
    length = 0
    while True:
        fits = [p for p in PROSE + filler if len(p) + 1 <= budget - length]
        if not fits:
            break
        piece = rng.choice([p for p in PROSE if p in fits] or fits) if rng.random() < 0.4 else rng.choice(fits)
        parts.append(piece)
        length += len(piece) + 1
    if secret is not None:
        parts.insert(len(parts) // 2, secret)
    return "\n".join(parts)


def time_scrub(rows: list[dict], runs: int, seed: int = 11) -> dict:
    rng = random.Random(seed)
    filler = [r["text"] for r in rows if r["label"] == "lookalike" and len(r["text"]) < 600]
    secrets = [r for r in rows if r["label"] == "secret" and len(r["text"]) < 600]
    cells: dict = {}
    for size in SIZES:
        for with_secret in (False, True):
            fitting = [r for r in secrets if len(r["text"]) <= size // 2]
            chosen = [rng.choice(fitting) for _ in range(PROMPTS_PER_CELL)] if with_secret else []
            prompts = [
                make_prompt(rng, filler, size, chosen[i]["text"] if with_secret else None)
                for i in range(PROMPTS_PER_CELL)
            ]
            for i, row in enumerate(chosen):  # the timed work is the real work: the secret really goes
                if row["secret"] in scrub(prompts[i]):
                    print(f"note: a timed prompt keeps its {row['kind']} secret (a miss above)", file=sys.stderr)
            for p in prompts[:3]:
                scrub(p)  # warm
            ms = []
            for i in range(runs):
                p = prompts[i % len(prompts)]
                t0 = time.perf_counter_ns()
                scrub(p)
                ms.append((time.perf_counter_ns() - t0) / 1e6)
            cells[f"{size}{'+secret' if with_secret else ''}"] = {
                "chars": round(statistics.mean(len(p) for p in prompts)),
                "secret": with_secret,
                "p50_ms": round(statistics.median(ms), 3),
                "p95_ms": round(metrics.percentile(ms, 95), 3),
                "max_ms": round(max(ms), 3),
                "n": len(ms),
            }
    return cells


TRANSCRIPTS = ROOT.parent / "shared" / "data" / "claude_code" / "spotter"


def time_window(rows: list[dict], runs: int, seed: int = 13, *, cold: bool = False) -> dict | None:
    """The redaction work of a prompt turn, in process and warm as the daemon does it: `build_context_window` on the
    real Claude Code transcripts (prompts with and without a pasted secret), with scrub as shipped and replaced by
    identity, interleaved pair by pair; the paired differences of p50 and p95 with 95% bootstrap intervals. `cold`:
    the daemon's memory of scrubbed turns emptied before every turn (each turn scanned whole, as a new session's
    first prompt is), else kept (a session's next prompt: only its new turns are scanned). None when the
    transcripts are absent."""
    from cairn_cli.core.ranking import context

    paths = sorted(TRANSCRIPTS.glob("*.jsonl")) if TRANSCRIPTS.is_dir() else []
    if not paths:
        return None
    rng = random.Random(seed)
    secrets = [r["text"] for r in rows if r["label"] == "secret" and len(r["text"]) < 300]
    prompts = [
        f"why do the integration tests fail after the deploy? {rng.choice(secrets) if i % 2 else ''}" for i in range(40)
    ]
    shipped, same = context._scrubbed, (lambda text: text)  # the window's (remembered) scrub, or none
    spent = [0]  # ns inside scrub during the current turn (the shipped arm)

    def timed_scrub(text: str) -> str:
        t0 = time.perf_counter_ns()
        try:
            return shipped(text)
        finally:
            spent[0] += time.perf_counter_ns() - t0

    timed: dict[str, list[float]] = {"shipped": [], "identity": []}
    work: list[float] = []  # per turn: the time spent in scrub itself
    for i in range(runs + 20):
        prompt, path = prompts[i % len(prompts)], paths[i % len(paths)]
        for arm in ("shipped", "identity") if i % 2 else ("identity", "shipped"):
            context._scrubbed = timed_scrub if arm == "shipped" else same  # type: ignore[assignment]
            if cold:
                shipped.cache_clear()
            spent[0] = 0
            t0 = time.perf_counter_ns()
            context.build_context_window(prompt, path, max_turns=3, max_chars=4000)
            if i >= 20:  # the first 20 pairs warm both
                timed[arm].append((time.perf_counter_ns() - t0) / 1e6)
                if arm == "shipped":
                    work.append(spent[0] / 1e6)
    context._scrubbed = shipped
    a, b = timed["shipped"], timed["identity"]
    out: dict = {
        "runs": len(a),
        "transcripts": [p.name for p in paths],
        "scrub_work_ms": {
            "p50": round(metrics.percentile(work, 50), 3),
            "p95": round(metrics.percentile(work, 95), 3),
            "max": round(max(work), 3),
        },
    }
    for q in (50, 95):
        diffs = []
        for _ in range(2000):
            idx = [rng.randrange(len(a)) for _ in range(len(a))]
            diffs.append(metrics.percentile([a[j] for j in idx], q) - metrics.percentile([b[j] for j in idx], q))
        out[f"p{q}"] = {
            "shipped_ms": round(metrics.percentile(a, q), 3),
            "identity_ms": round(metrics.percentile(b, q), 3),
            "diff_ms": round(metrics.percentile(a, q) - metrics.percentile(b, q), 3),
            "ci95_ms": [round(metrics.percentile(diffs, 2.5), 3), round(metrics.percentile(diffs, 97.5), 3)],
        }
    return out


def cold_first_call(repeats: int = 7) -> dict:
    """Import and the first scrub of a 2,000-character prompt in a fresh interpreter: what a hook process pays once."""
    code = (
        "import time; t0 = time.perf_counter(); from cairn_cli.core.redact import scrub; "
        "t1 = time.perf_counter(); scrub(('see commit 3f2a9c1 and request 1b4e28ba-2fa1-11d2-883f-0016d3cca427 '"
        " 'token budget 8k ') * 25); t2 = time.perf_counter(); print((t1 - t0) * 1000, (t2 - t1) * 1000)"
    )
    imports, firsts = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        imports.append(float(out[0]))
        firsts.append(float(out[1]))
    return {
        "import_p50_ms": round(statistics.median(imports), 2),
        "first_scrub_p50_ms": round(statistics.median(firsts), 2),
        "n": repeats,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400, help="timed scrub calls per prompt size and variant")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--name", default="redaction", help="results file name in --out")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    args = ap.parse_args()
    rows = load_corpus(Path(args.corpus))
    results = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "cpu": machine(),
        "python": sys.version.split()[0],
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "corpus": corpus_counts(rows),
        "quality": evaluate(rows),
        "targets": {"recall": RECALL_TARGET, "false_positive_rate": FP_TARGET},
    }
    results["scrub_ms"] = time_scrub(rows, args.runs)
    results["cold"] = cold_first_call()
    results["window"] = time_window(rows, args.runs * 3)
    results["window_cold"] = time_window(rows, args.runs * 3, cold=True)
    results["load_end"] = [round(x, 2) for x in os.getloadavg()]
    write(results, Path(args.out), args.name)
    return 0


def _short(text: str, limit: int = 160) -> str:
    one = text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|").replace("`", "'")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def write(results: dict, out: Path, name: str) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    q, c, cpu = results["quality"], results["corpus"], results["cpu"]
    twice = "yes" if not q["not_idempotent"] else f"no ({len(q['not_idempotent'])} rows)"
    ok = q["recall"] >= RECALL_TARGET and q["false_positive_rate"] <= FP_TARGET
    lines = [
        "# Redaction: recall on labelled secrets, false positives on look-alikes, `scrub` on hook prompts",
        "",
        f"- date: {results['date']}; machine: {cpu['model']}, {cpu['cores']} cores; CPU flags: "
        f"{' '.join(cpu['flags']) or 'none of ' + '/'.join(CPU_FLAGS)}; python {results['python']}",
        f"- command: `python scripts/{results['command']}`; load average at the start {results['load_start']}, "
        f"at the end {results['load_end']}",
        f"- corpus: tests/data/secrets_corpus.jsonl, {c['total']} strings ({c['by_label'].get('secret', 0)} secrets, "
        f"{c['by_label'].get('lookalike', 0)} look-alikes), {c['public_share']:.0%} from public scanner fixtures: "
        + ", ".join(f"{k} {v}" for k, v in c["by_source"].items()),
        "- a secret is caught when its secret substring is gone from `redact`'s output; a look-alike is a false "
        "positive when the output differs from its input",
        "",
        "| measure | value | target |",
        "|---|---:|---:|",
        f"| recall on secrets | {q['recall']:.3f} ({q['caught']}/{q['secrets']}) | ≥ {RECALL_TARGET} |",
        f"| false positives on look-alikes | {q['false_positive_rate']:.3f} ({q['false_positives']}/{q['lookalikes']}) "
        f"| ≤ {FP_TARGET} |",
        f"| caught under the expected kind | {q['kind_agreement']:.3f} | |",
        f"| redacting twice changes nothing | {twice} | yes |",
        "",
        f"Targets {'met' if ok else 'NOT met'}. Recall by source: "
        + ", ".join(f"{k} {v['recall']:.3f} ({v['caught']}/{v['total']})" for k, v in q["per_source"].items()),
        "",
        "| kind | caught / secrets | recall |",
        "|---|---:|---:|",
    ]
    lines += [f"| {k} | {v['caught']}/{v['total']} | {v['recall']:.2f} |" for k, v in q["per_kind"].items()]
    lines += ["", f"## Secrets missed ({len(q['misses'])})", ""]
    lines += [f"- {m['kind']}: `{_short(m['text'])}` ({_short(m['source'], 90)})" for m in q["misses"]] or ["none"]
    lines += ["", f"## Look-alikes changed ({len(q['false_positive_rows'])})", ""]
    lines += [
        f"- `{_short(f['text'])}` -> `{_short(f['output'])}` ({_short(f['source'], 90)})"
        for f in q["false_positive_rows"]
    ] or ["none"]
    if q["other_kind"]:
        lines += ["", f"## Caught under another kind ({len(q['other_kind'])})", ""]
        lines += [
            f"- expected {w['expected']}, got {', '.join(w['got'])}: `{_short(w['text'], 110)}`"
            for w in q["other_kind"]
        ]
    cold = results["cold"]
    lines += [
        "",
        "## `scrub` on a hook's prompt",
        "",
        f"Prompts of prose and corpus look-alikes, {PROMPTS_PER_CELL} distinct per row cycled through the runs; "
        "`+secret`: one corpus secret row in the middle. In-process, warm.",
        "",
        "| prompt | chars | p50 ms | p95 ms | max ms | runs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, cell in results["scrub_ms"].items():
        lines.append(
            f"| {key} | {cell['chars']:,} | {cell['p50_ms']} | {cell['p95_ms']} | {cell['max_ms']} | {cell['n']} |"
        )
    lines += [
        "",
        f"Fresh interpreter (what a hook process pays once, median of {cold['n']}): import of the module "
        f"{cold['import_p50_ms']} ms, first `scrub` of a 2,000-character prompt {cold['first_scrub_p50_ms']} ms.",
    ]
    for key, title in (
        ("window", "a session's next prompt: the daemon remembers the turns it scrubbed"),
        ("window_cold", "every turn scanned whole: the memory emptied before each (a new session's first prompt)"),
    ):
        _window_section(lines, results.get(key), title)
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _window_section(lines: list[str], window: dict | None, title: str) -> None:
    if window:
        lines += [
            "",
            f"## The prompt turn's redaction work, in process (as the warm daemon does it): {title}",
            "",
            f"`build_context_window` on the real transcripts ({', '.join(window['transcripts'])}; prompts with and "
            f"without a pasted secret), scrub as shipped vs replaced by identity, {window['runs']} interleaved pairs; "
            "95% bootstrap intervals of the differences:",
            "",
            "| | shipped ms | identity ms | difference ms | 95% interval ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for q in ("p50", "p95"):
            c = window[q]
            lines.append(
                f"| {q} | {c['shipped_ms']} | {c['identity_ms']} | {c['diff_ms']} | "
                f"{c['ci95_ms'][0]} .. {c['ci95_ms'][1]} |"
            )
        w = window["scrub_work_ms"]
        lines += [
            "",
            f"The time spent inside `scrub` itself per turn (the work redaction adds, without the noise of the rest of "
            f"the turn): p50 {w['p50']} ms, p95 {w['p95']} ms, max {w['max']} ms.",
        ]


if __name__ == "__main__":
    sys.exit(main())
