"""Simulation of the write-side A/B gate: false promotions under the null with cron peeking, power under effects.

    .venv/bin/python scripts/sim_ab.py [--seeds 10000 --effect-seeds 1000 --horizon 400 --out bench] [--quick]

Synthetic sessions (K ~ 1 + Poisson(7) prompts, arm A/B per prompt, Poisson(0.8) memories per prompt, Poisson(3)
deliveries per memory, engaged with p = clip(Beta(3.5, 6.5) session base + effect * [arm B], 0, 1)); cron looks
after every session and the first promote/retire of the SHIPPED `cairn_cli.core.experiment.ab.sprt` ends a run. Accrual,
tallies and the naive pooled z-test are described in the generated bench/ab_simulation.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cairn_cli.config import SETTINGS  # noqa: E402
from cairn_cli.core.experiment.ab import sprt, wilson  # noqa: E402

P1, ALPHA, BETA = (SETTINGS[k].default for k in ("AB_SPRT_P1", "AB_ALPHA", "AB_BETA"))
MIN_SESSIONS = SETTINGS["AB_MIN_SESSIONS"].default
MODEL = {
    "prompts": "1 + Poisson(7)",
    "memories_per_prompt": "Poisson(0.8)",
    "deliveries_per_memory": "Poisson(3)",
    "session_base": "Beta(3.5, 6.5)",
    "lag_spread": "uniform 1..20",
    "lag_final": 1,
    "arm_b_probability": 0.5,
    "naive_z": 1.645,
    "naive_min_deliveries_per_arm": 10,
}
EFFECTS = (0.05, 0.10, 0.15)
TALLIES = ("revised", "frozen", "matured")
SPREAD = 20
SEED_BASE = 20261203


@functools.cache  # the shipped decision depends on (wins, losses) only: memoise it
def verdict(wins: int, losses: int) -> str:
    return sprt(wins, losses, p1=P1, alpha=ALPHA, beta=BETA, min_sessions=MIN_SESSIONS)[0]


def first_decision(wins: np.ndarray, losses: np.ndarray) -> tuple[str, int | None, int | None, bool]:
    """Cron after every session: (promote | retire | undecided, sessions elapsed, sessions decided) at the first
    non-continue verdict of the shipped sprt, and whether it EVER says promote if retire did not end the run."""
    verdicts = [verdict(int(w), int(lost)) for w, lost in zip(wins, losses)]
    t = next((t for t, v in enumerate(verdicts) if v != "continue"), None)
    ever = "promote" in verdicts
    return ("undecided", None, None, ever) if t is None else (verdicts[t], t + 1, int(wins[t] + losses[t]), ever)


def draw(rng: np.random.Generator, horizon: int, effect: float) -> dict:
    """One synthetic population: per delivery its session, arm (True = B), engaged flag and both arrival looks."""
    base, k = rng.beta(3.5, 6.5, horizon), 1 + rng.poisson(7, horizon)
    p_sess = np.repeat(np.arange(horizon), k)
    p_arm, m = rng.random(len(p_sess)) < 0.5, rng.poisson(0.8, len(p_sess))
    m_sess, m_arm = np.repeat(p_sess, m), np.repeat(p_arm, m)
    d = rng.poisson(3, len(m_sess))  # deliveries per memory
    sess, arm = np.repeat(m_sess, d), np.repeat(m_arm, d)
    engaged = rng.random(len(sess)) < np.clip(base[sess] + effect * arm, 0, 1)
    return {
        "sess": sess,
        "arm": arm,
        "engaged": engaged,
        "spread": sess + rng.integers(1, SPREAD + 1, len(sess)),
        "final": sess + 1,
    }


def tallies(pop: dict, when: np.ndarray, horizon: int) -> dict:
    """Per look t (after session t): wins/losses of each tally, and the naive pooled z."""
    keep = when < horizon
    t, s, a, e = when[keep], pop["sess"][keep], pop["arm"][keep].astype(int), pop["engaged"][keep]
    flat = (t * horizon + s) * 2 + a
    n, en = (
        np.bincount(f, minlength=horizon * horizon * 2).reshape(horizon, horizon, 2).cumsum(axis=0)
        for f in (flat, flat[e])
    )
    both = (n[..., 0] > 0) & (n[..., 1] > 0)
    cross = en[..., 1] * n[..., 0] - en[..., 0] * n[..., 1]  # sign = sign(rate_B - rate_A)
    out = {"revised": ((both & (cross > 0)).sum(axis=1), (both & (cross < 0)).sum(axis=1))}
    ripe = np.tri(horizon, k=-SPREAD, dtype=bool)  # [t, s]: session s is >= SPREAD looks old at look t
    out["matured"] = ((ripe & both & (cross > 0)).sum(axis=1), (ripe & both & (cross < 0)).sum(axis=1))
    decided = both & (cross != 0)
    ever = decided.any(axis=0)
    first, sign = decided.argmax(axis=0)[ever], cross[decided.argmax(axis=0)[ever], np.flatnonzero(ever)]
    out["frozen"] = tuple(np.bincount(first[sign * w > 0], minlength=horizon).cumsum() for w in (1, -1))
    (na, nb), (ea, eb) = (
        (np.bincount(f, minlength=2 * horizon).reshape(horizon, 2).cumsum(axis=0).T)
        for f in (t * 2 + a, (t * 2 + a)[e])
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        pool = (ea + eb) / (na + nb)
        z = (eb / nb - ea / na) / np.sqrt(pool * (1 - pool) * (1 / na + 1 / nb))
    ok = (na >= MODEL["naive_min_deliveries_per_arm"]) & (nb >= MODEL["naive_min_deliveries_per_arm"])
    out["naive_z"] = np.where(ok, np.nan_to_num(z, nan=0.0), 0.0)
    return out


def run(effect_index: int, effect: float, seeds: int, horizon: int) -> dict:
    """Every seed of one effect: outcome per (accrual, tally), naive flags, P(B wins a session), sizes."""
    rows = {f"{acc}/{tal}": [] for acc in ("spread", "final") for tal in TALLIES}
    naive = {f"{acc}/{how}": 0 for acc in ("spread", "final") for how in ("peek", "once")}
    sizes, wl = [], np.zeros(2)
    for seed in range(seeds):
        pop = draw(np.random.default_rng([SEED_BASE, effect_index, seed]), horizon, effect)
        sizes.append(len(pop["sess"]))
        for acc in ("spread", "final"):
            tl = tallies(pop, pop[acc], horizon)
            for tal in TALLIES:
                rows[f"{acc}/{tal}"].append(first_decision(*tl[tal]))
            naive[f"{acc}/peek"] += bool((tl["naive_z"] >= MODEL["naive_z"]).any())
            naive[f"{acc}/once"] += bool(tl["naive_z"][-1] >= MODEL["naive_z"])
        wl += [tl["revised"][0][-1], tl["revised"][1][-1]]  # final accrual, every session complete
    out = {
        "effect": effect,
        "seeds": seeds,
        "deliveries_per_run_mean": round(float(np.mean(sizes)), 1),
        "p_b_wins_session": round(wl[0] / wl.sum(), 4),
        "decided_share_of_sessions": round(wl.sum() / (seeds * (horizon - 1)), 4),
        "gate": {},
        "naive": {},
    }
    for key, res in rows.items():
        at, dec = (np.array([r[i] for r in res if r[0] == "promote"]) for i in (1, 2))
        cnt = {v: sum(r[0] == v for r in res) for v in ("promote", "retire", "undecided")}
        cnt["ever_promote_no_retire"] = sum(r[3] for r in res)
        g = out["gate"][key] = {f"{v}_rate": round(c / seeds, 4) for v, c in cnt.items()}
        g |= {
            "promote": cnt["promote"],
            "promote_ci": wilson(cnt["promote"], seeds),
            "ever_promote_no_retire_ci": wilson(cnt["ever_promote_no_retire"], seeds),
        }
        for name, arr, q in (
            ("sessions_to_promote_median", at, 50),
            ("sessions_to_promote_p90", at, 90),
            ("decided_at_promote_median", dec, 50),
        ):
            g[name] = float(np.percentile(arr, q)) if len(arr) else None
    for key, c in naive.items():
        out["naive"][key] = {"promote": c, "promote_rate": round(c / seeds, 4), "promote_ci": wilson(c, seeds)}
    return out


def ci(c) -> str:
    return f"[{c[0]:.3f}, {c[1]:.3f}]"


def fmt(x) -> str:
    return "–" if x is None else f"{x:g}"


def rate(g: dict, key: str = "promote") -> str:
    r, (lo, hi) = g[f"{key}_rate"], g[f"{key}_ci"]
    side = "ABOVE the bound" if lo > ALPHA else "below the bound" if hi < ALPHA else "CI covers the bound"
    return f"{r:.2%} [{lo:.3f}, {hi:.3f}] ({side})"


def findings(res: dict) -> list[str]:
    g0, eff, n0 = res["null"]["gate"], res["effects"], res["null"]["naive"]
    out = [
        f"- Null, cron looking after every session, alpha {ALPHA:.0%}: shipped gate (matured tally) "
        f"{rate(g0['spread/matured'])} with spread accrual, {rate(g0['final/matured'])} with final accrual; "
        f"the first design (revised tally) {rate(g0['spread/revised'])} under spread; frozen "
        f"{rate(g0['spread/frozen'])}.",
        f"- Stress test, retire does not stop the run (does the LR ever cross 1/alpha in {res['horizon']} looks?): "
        f"spread/revised {rate(g0['spread/revised'], 'ever_promote_no_retire')}, final/revised "
        f"{rate(g0['final/revised'], 'ever_promote_no_retire')}, spread/matured "
        f"{rate(g0['spread/matured'], 'ever_promote_no_retire')}. Ville's bound covers a fixed sequence of "
        "session outcomes (final, matured, frozen); re-scoring sessions as their deliveries arrive (revised "
        "under spread accrual) gives the LR extra chances, so it is not a martingale in look time.",
        f"- Naive pooled z-test, null: {n0['spread/peek']['promote_rate']:.1%} "
        f"{ci(n0['spread/peek']['promote_ci'])} peeked after every session, {n0['spread/once']['promote_rate']:.1%}"
        f" {ci(n0['spread/once']['promote_ci'])} at one look (excess at one look = session clustering).",
        "- P(B wins a decided session): "
        + ", ".join(f"+{e['effect']:.2f} -> {e['p_b_wins_session']:.3f}" for e in eff)
        + f" vs AB_SPRT_P1 {P1}; "
        f"{eff[0]['decided_share_of_sessions']:.0%} of sessions are decided. A true P(win) below ~0.6 (the "
        "SPRT's indifference point between 0.5 and P1) drifts to retire: the wrong-way retires.",
    ]
    for e in eff:
        g, m = e["gate"]["spread/revised"], e["gate"]["spread/matured"]
        out.append(
            f"- +{e['effect']:.2f}, spread: shipped (matured) power {m['promote_rate']:.1%}, median "
            f"{fmt(m['sessions_to_promote_median'])} sessions to promotion (p90 "
            f"{fmt(m['sessions_to_promote_p90'])}), wrong-way retire {m['retire_rate']:.1%}; first design "
            f"(revised) {g['promote_rate']:.1%}, median {fmt(g['sessions_to_promote_median'])} (p90 "
            f"{fmt(g['sessions_to_promote_p90'])}), wrong-way retire {g['retire_rate']:.1%}; frozen "
            f"{e['gate']['spread/frozen']['promote_rate']:.1%}."
        )
    return out


def markdown(res: dict) -> str:
    null, eff = res["null"], res["effects"]
    lines = [
        "# A/B gate simulation (session-level SPRT, cron peeking)",
        "",
        f"- date: {res['date']}",
        f"- machine: {res['machine']}",
        f"- command: `{res['command']}`",
        f"- run time: {res['run_time_s']} s",
        "- decision: the shipped `cairn_cli.core.experiment.ab.sprt` with "
        f"AB_SPRT_P1 {P1}, AB_ALPHA {ALPHA}, AB_BETA {BETA}, AB_MIN_SESSIONS {MIN_SESSIONS} "
        f"(promote at log LR >= {np.log(1 / ALPHA):.3f}, retire at <= {np.log(BETA):.3f}); the grade guard "
        "is not simulated (assumed to hold)",
        f"- horizon: {res['horizon']} sessions, cron looks after every session, the first promote/retire ends "
        f"the run; null seeds {null['seeds']}, effect seeds {res['effect_seeds']}; seed of a run = numpy "
        f"default_rng([{SEED_BASE}, effect index, seed]); all variants of a seed share its population",
        "",
        "## Model",
        "",
        "Sessions arrive one after another. A session has K ~ 1 + Poisson(7) prompts, each "
        "arm A or B with probability 1/2, each writing M ~ Poisson(0.8) memories; a memory is later delivered "
        "D ~ Poisson(3) times, each delivery lexically decided, engaged with p = clip(base + effect * [arm B], "
        "0, 1); base ~ Beta(3.5, 6.5) per session (mean 0.35, sd 0.14: the session random effect). Mean "
        f"deliveries per {res['horizon']}-session run: {null['deliveries_per_run_mean']}.",
        "",
        f"- accrual **spread**: each delivery arrives 1..{SPREAD} sessions (uniform) after its memory's session, "
        "so a session's outcome can change between looks (the realistic accrual under cron).",
        "- accrual **final**: all of a session's deliveries arrive at the next session; its outcome is final "
        "when first counted.",
        f"- tally **matured** (shipped): a session counts only once it is {SPREAD} sessions old, on the "
        "deliveries inside that window (in production: `CAIRN_AB_MATURE_DAYS`, 7 days, as `evaluate()` does), "
        "so its outcome is fixed when first counted: it counts when both arms' memories have >= 1 lexical "
        "decision; B wins if its engaged/decided rate is higher, loses if lower, ties drop out.",
        "- rejected designs: tally **revised** (the first design) recomputes every session's win/loss from all "
        "deliveries so far at every look; tally **frozen** fixes a session's win/loss at the first look where "
        "it is decided. Under final accrual all tallies agree (matured later).",
        "- **naive**: one-sided two-proportion z-test (z >= 1.645, alpha 0.05) on pooled memory-level "
        "deliveries (sessions ignored), needing >= 10 deliveries per arm; peeked after every session or looked "
        "at once, at the horizon.",
        "",
        "## Findings",
        "",
        *res["findings"],
        "",
        "## 1. Null (effect 0): false promotions, cron looking after every session",
        "",
        "| accrual | tally | false promotion | 95% CI (Wilson) | retire | undecided at horizon | median sessions "
        "to false promotion | ever promote if retire did not stop the run | 95% CI |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for key, g in null["gate"].items():
        lines.append(
            f"| {' | '.join(key.split('/'))} | {g['promote_rate']:.4f} | {ci(g['promote_ci'])} | "
            f"{g['retire_rate']:.4f} | {g['undecided_rate']:.4f} | {fmt(g['sessions_to_promote_median'])} | "
            f"{g['ever_promote_no_retire_rate']:.4f} | {ci(g['ever_promote_no_retire_ci'])} |"
        )
    lines += [
        "",
        "## 2. Power under a true effect (absolute engagement probability added to B's memories)",
        "",
        "| effect | P(B wins session) | accrual | tally | power | 95% CI | median sessions to promotion | "
        "p90 | median decided sessions at promotion | wrong-way retire | undecided |",
        "|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for e in eff:
        for key, g in e["gate"].items():
            lines.append(
                f"| +{e['effect']:.2f} | {e['p_b_wins_session']:.3f} | {' | '.join(key.split('/'))} | "
                f"{g['promote_rate']:.3f} | {ci(g['promote_ci'])} | {fmt(g['sessions_to_promote_median'])} "
                f"| {fmt(g['sessions_to_promote_p90'])} | {fmt(g['decided_at_promote_median'])} | "
                f"{g['retire_rate']:.3f} | {g['undecided_rate']:.3f} |"
            )
    lines += [
        "",
        "## 3. Naive test (pooled deliveries, sessions ignored): share of runs it would promote",
        "",
        "| effect | accrual | looks | promotion rate | 95% CI |",
        "|---:|---|---|---:|---|",
    ]
    looks = {"peek": "every session", "once": "once, at horizon"}
    lines += [
        f"| {e['effect']:.2f} | {key.split('/')[0]} | {looks[key.split('/')[1]]} | {g['promote_rate']:.4f} | "
        f"{ci(g['promote_ci'])} |"
        for e in [null] + eff
        for key, g in e["naive"].items()
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10000, help="null seeds (effect 0)")
    ap.add_argument("--effect-seeds", type=int, default=1000, help="seeds per non-zero effect")
    ap.add_argument("--horizon", type=int, default=400, help="sessions per run (cron looks after each)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    ap.add_argument("--quick", action="store_true", help="200 null / 50 effect seeds, horizon 200 (smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.effect_seeds, args.horizon = 200, 50, 200
    started = time.perf_counter()
    null = run(0, 0.0, args.seeds, args.horizon)
    effects = [run(i + 1, e, args.effect_seeds, args.horizon) for i, e in enumerate(EFFECTS)]
    res = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, CPython {platform.python_version()}, numpy {np.__version__}",
        "command": " ".join(["python scripts/sim_ab.py", *sys.argv[1:]]),
        "horizon": args.horizon,
        "effect_seeds": args.effect_seeds,
        "model": MODEL,
        "null": null,
        "effects": effects,
        "settings": {"AB_SPRT_P1": P1, "AB_ALPHA": ALPHA, "AB_BETA": BETA, "AB_MIN_SESSIONS": MIN_SESSIONS},
        "run_time_s": round(time.perf_counter() - started, 1),
    }
    res["findings"] = findings(res)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab_simulation.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "ab_simulation.md").write_text(markdown(res))
    print("\n".join(res["findings"]))


if __name__ == "__main__":
    main()
