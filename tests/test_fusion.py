"""The fusion learner (core/learning/fusion.py): the composite's weights fit from graded pairs, judged by the gate,
served by the rank path (core/ranking/learned.py), recorded in every delivery and rolled back."""

from __future__ import annotations

import datetime as dt
import json
import random

import numpy as np
import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.learning import fusion
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.trainer import train_learners
from cairn_cli.core.ranking import learned
from cairn_cli.core.ranking.profiles import profile as get_profile
from cairn_cli.core.ranking.scoring import Candidate, ScoringTable
from cairn_cli.core.store import state
from cairn_cli.ml.models import HashingEncoder

SHIPPED = learned.shipped_params(get_profile(Settings(), "default"))


def _pairs(theta_true: np.ndarray, queries: int, rng: np.random.Generator, per_query: int = 6) -> fusion.Pairs:
    """Built pairs: each query's candidates get random components, graded by `theta_true`'s order (the top two 3,
    the bottom two 0)."""
    b, bn, w, wn, wt = [], [], [], [], []
    for _ in range(queries):
        feats = rng.random((per_query, 6))
        feats[:, 3:5] = 0.0  # confidence, recency: weigh 0
        nbs = rng.random((per_query, 2, 6)) * 0.5
        nbs[:, :, 3:5] = 0.0
        scores, _, _ = fusion._scores(theta_true, feats, nbs)
        order = np.argsort(-scores)
        found = [(a, z) for a in order[:2] for z in order[-2:]]
        for a, z in found:
            b.append(feats[a]), bn.append(nbs[a]), w.append(feats[z]), wn.append(nbs[z]), wt.append(1 / len(found))
    return fusion.Pairs(np.array(b), np.array(bn), np.array(w), np.array(wn), np.array(wt), queries)


def test_the_fit_recovers_a_known_weighting():
    rng = np.random.default_rng(5)
    # the truth: keywords four times the similarity, the neighbour's score counts, the joined keywords do not
    truth = fusion.theta_of(
        {
            "weights": {"similarity": 0.15, "keywords": 0.6, "scope": 0.0, "confidence": 0.0, "recency": 0.0},
            "context_keywords": 0.0,
            "neighbour_weight": 0.6,
        }
    )
    got = fusion.fit(_pairs(truth, 300, rng), SHIPPED)
    assert got.adopted, got.reason
    w = got.params["weights"]
    assert w["keywords"] / w["similarity"] > 2.5  # shipped: 0.3, truth: 4
    assert got.params["neighbour_weight"] > 0.2 and got.params["context_keywords"] < 0.05  # shipped: 0 and 0
    assert w["confidence"] == w["recency"] == 0.0  # invariant 1: held where the settings put them
    # relevance weights sum as the shipped ones (the composite floor reads the same scale)
    assert w["similarity"] + w["keywords"] + got.params["context_keywords"] == pytest.approx(0.65, abs=1e-4)
    fresh = _pairs(truth, 200, np.random.default_rng(6))
    assert (
        fusion.misordered(fusion.theta_of(got.params), fresh) < fusion.misordered(fusion.theta_of(SHIPPED), fresh) - 0.1
    )


def test_with_no_few_or_contradictory_labels_the_shipped_weights_stay():
    rng = np.random.default_rng(1)
    truth = fusion.theta_of({**SHIPPED, "weights": {**SHIPPED["weights"], "keywords": 0.9, "similarity": 0.05}})
    none = fusion.Pairs(np.zeros((0, 6)), np.zeros((0, 2, 6)), np.zeros((0, 6)), np.zeros((0, 2, 6)), np.zeros(0), 0)
    few = _pairs(truth, fusion.MIN_QUERIES - 1, rng)
    built = _pairs(truth, 100, rng)
    # every pair graded both ways (two agents disagreeing on every query)
    contradictory = fusion.Pairs(
        np.concatenate([built.better, built.worse]),
        np.concatenate([built.better_nb, built.worse_nb]),
        np.concatenate([built.worse, built.better]),
        np.concatenate([built.worse_nb, built.better_nb]),
        np.concatenate([built.weight, built.weight]) / 2,
        built.queries,
    )
    for pairs, why in ((none, "training queries"), (few, "training queries"), (contradictory, "misorders")):
        got = fusion.fit(pairs, SHIPPED)
        assert not got.adopted and got.params == SHIPPED and why in got.reason, got


def test_features_are_what_the_composite_ranks_with():
    """w . f + nw * max(0, w . f(neighbours)) of `features` is `score`'s composite, for any weights: the fit and the
    hook agree. And the relevance the floor reads is the composite less exactly its scope parts (a learned scope
    weight may be large: a memory without a scoped neighbour must not lose more than its own)."""
    enc = HashingEncoder()
    now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    texts = [
        "the pool limit was raised",
        "deploys run from the ci box",
        "raise the pool limit and restart",
        "python 3.12 everywhere",
        "the linter is ruff",
        "restart the api after deploys",
    ]
    cands = [
        Candidate(i + 1, t, ["pool"] if i % 2 else [], "proj" if i < 4 else "global", "fact", 0.75, now, session_id="s")
        for i, t in enumerate(texts)
    ]
    table = ScoringTable(cands, 2, enc.encode(texts), enc.dim)
    query = "how do I raise the pool limit before deploys"
    sims = table.similarities(enc.encode([query])[0])
    feats = table.features(query, sims, scope="proj", half_life_days=30.0, now=now)
    assert feats is not None
    rng = random.Random(3)
    for _ in range(5):
        weights = {"similarity": rng.random(), "keywords": rng.random(), "scope": rng.random()}
        weights.update(confidence=0.0, recency=0.0)
        nw, ck = rng.random(), rng.random()
        theta = fusion.theta_of({"weights": weights, "neighbour_weight": nw, "context_keywords": ck})
        scored = table.score(
            query, sims, scope="proj", weights=weights, half_life_days=30.0, now=now, neighbour_weight=nw,
            context_keywords=ck,
        )  # fmt: skip
        for s in scored:
            slot = table.slot_of[s.candidate.id]
            nbs = np.zeros((1, 2, 6))
            for j, side in enumerate((feats["prev"], feats["next"])):
                if side[slot] >= 0 and feats["in_scope"][side[slot]]:
                    nbs[0, j] = feats["matrix"][side[slot]]
            mine, lent, which = fusion._scores(theta, feats["matrix"][slot][None, :], nbs)
            assert mine[0] == pytest.approx(s.components["composite"], abs=1e-5)
            # the floor's relevance leaves out the memory's scope part and that of the neighbour it borrows from
            borrowed = nbs[0, which[0], 2] if lent[0] > 0 else 0.0
            scope_part = weights["scope"] * (feats["matrix"][slot, 2] + nw * borrowed)
            assert s.components["relevance"] == pytest.approx(s.components["composite"] - scope_part, abs=1e-5)


# -- end to end: a store where the scope is what tells the answer --------------------------------------------------


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz") + rng.choice("aeiou") for _ in range(3))


def _scope_store(cli, queries: int = 30) -> list[tuple[str, str, int]]:
    """Per project (its own scope) a prompt, two global near-copies of it (graded 0: the shipped composite ranks them
    first) and the project's own memory that answers it (graded 3, sharing one word). Returns (scope, prompt, the
    answer's id) per project."""
    from cairn_cli.core.store import memories
    from tests.test_training import _graded_delivery

    rng = random.Random(11)
    out = []
    for q in range(queries):
        words = [_word(rng) for _ in range(4)]
        prompt, scope = " ".join(words), f"proj{q}"
        ids = {}
        for text, where in (
            (f"{prompt} again", "global"),
            (f"{' '.join(words[:3])} seen before {words[3]}", "global"),
            (f"{words[0]} needs its limit raised, then a restart", scope),
        ):
            assert cli("memory", "add", text, "--scope", where).exit_code == 0
            ids[text] = max(m.id for m in memories.list_memories(Settings(), include_superseded=True))
        for mid, grade in zip(ids.values(), (0, 0, 3)):
            _graded_delivery(mid, "s", q, prompt, grade=grade, scope=scope)
        out.append((scope, prompt, list(ids.values())[2]))
    return out


def _top(cli, scope: str, prompt: str) -> list[dict]:
    out = cli("rank", prompt, "--scope", scope, "--json")
    assert out.exit_code == 0, out.output
    return orjson.loads(out.stdout)["memories"]


def test_a_learned_profile_that_ranks_better_deploys_changes_rank_and_rolls_back(cli, monkeypatch):
    projects = _scope_store(cli)
    scope, prompt, answer = projects[0]
    before = _top(cli, scope, prompt)
    assert before[0]["id"] != answer and before[0]["components"]["profile_by"] == "auto"

    out = cli("train-reranker", "--learner", "fusion", "--holdout", "0.3", "--json")
    assert out.exit_code == 0, out.output
    report = orjson.loads(out.stdout)
    assert report["outcome"] == "deployed", report
    assert report["fusion_ndcg10"] >= report["live_ndcg10"] + 0.02 and report["fusion_r5"] >= report["live_r5"]
    kind = next(iter(report["profiles"]))
    fitted = report["profiles"][kind]["params"]
    assert fitted["weights"]["scope"] > SHIPPED["weights"]["scope"], fitted
    record = state.get(fusion.LEARNED_KEY, Settings())
    assert record["version"].endswith(".json") and record["previous"] is None
    artifact = json.loads(learned.learned_path().read_text())
    assert artifact["version"] == report["version"] and learned.learned_path().is_symlink()

    after = _top(cli, scope, prompt)  # the learned weights rank the project's answer first
    assert after[0]["id"] == answer
    comps = after[0]["components"]
    assert comps["profile_by"] == f"learned:{report['version']}"
    assert comps["weights"] == artifact["profiles"][kind]["weights"]
    assert comps["profile_params"] == {
        "neighbour_weight": artifact["profiles"][kind]["neighbour_weight"],
        "context_keywords": artifact["profiles"][kind]["context_keywords"],
    }
    # CAIRN_LEARNED_PROFILE=off serves the shipped weights
    monkeypatch.setenv("CAIRN_LEARNED_PROFILE", "off")
    assert [m["id"] for m in _top(cli, scope, prompt)] == [m["id"] for m in before]
    monkeypatch.delenv("CAIRN_LEARNED_PROFILE")

    out = cli("train-reranker", "--learner", "fusion", "--rollback", "--json")
    assert out.exit_code == 0 and orjson.loads(out.stdout)["version"] == "shipped weights", out.output
    assert [m["id"] for m in _top(cli, scope, prompt)] == [m["id"] for m in before]
    assert not learned.learned_path().exists()
    # rolling back again puts the learned profile back
    assert cli("train-reranker", "--learner", "fusion", "--rollback").exit_code == 0
    assert _top(cli, scope, prompt)[0]["id"] == answer


def test_the_learned_profile_is_recorded_in_the_deliveries_of_the_prompt_hook(cli, monkeypatch):
    from cairn_cli.db.tables import MemoryDelivery
    from tests.test_backfill import _prompt_hook

    projects = _scope_store(cli)
    report = train_learners(Settings(), TrainOptions(learner="fusion", holdout=0.3))
    assert report["outcome"] == "deployed", report
    scope, prompt, answer = projects[1]
    monkeypatch.setenv("CAIRN_HOOK_SCOPE", scope)
    last = MemoryDelivery.select().order_by(MemoryDelivery.id.desc()).first().id
    _prompt_hook("fresh-session", prompt, "/no/transcript.jsonl")
    rows = list(MemoryDelivery.select().where(MemoryDelivery.id > last).order_by(MemoryDelivery.rank))
    assert rows and rows[0].memory_id == answer
    assert {r.score_components["profile_by"] for r in rows} == {f"learned:{report['version']}"}
    assert all("profile_params" in r.score_components for r in rows)


def test_the_gate_refuses_a_learned_profile_that_ranks_worse_than_the_live_one(cli, monkeypatch):
    _scope_store(cli)
    first = train_learners(Settings(), TrainOptions(learner="fusion", holdout=0.3))
    assert first["outcome"] == "deployed", first
    live_version = state.get(fusion.LEARNED_KEY, Settings())["version"]

    def shipped_again(pairs, start, **kw):  # a "fit" back at the shipped weights: worse than the live learned one
        return fusion.Fit(start, True, "forced", pairs.queries, len(pairs))

    monkeypatch.setattr(fusion, "fit", shipped_again)
    second = train_learners(Settings(), TrainOptions(learner="fusion", holdout=0.3))
    # judged in both query forms: each ranks worse than the live learned profile
    assert second["outcome"] == "refused" and "window ranks worse" in second["reason"], second
    assert set(second["forms"]) == {"window", "prompt"}, second
    assert second["fusion_ndcg10"] < second["live_ndcg10"], second
    assert state.get(fusion.LEARNED_KEY, Settings())["version"] == live_version


def test_fusion_needs_the_store_and_rollback_needs_a_deploy(cli, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"query": "q", "memory": "m", "grade": 3}) + "\n")
    out = cli("train-reranker", "--learner", "fusion", "--data", rows)
    assert out.exit_code == 2 and "--learner student" in out.output
    out = cli("train-reranker", "--learner", "fusion", "--rollback")
    assert out.exit_code == 1 and "no learned profile to roll back" in out.output


def test_with_the_real_model_the_learned_profile_deploys_and_ranks_the_answer_first(cli, real_model):
    """The bundled MiniLM (near-copies of the prompt are its nearest neighbours): the fit still finds the scope."""
    projects = _scope_store(cli, queries=20)
    report = train_learners(Settings(), TrainOptions(learner="fusion", holdout=0.3))
    assert report["outcome"] == "deployed", {k: v for k, v in report.items() if k != "rows"}
    hits = sum(_top(cli, scope, prompt)[0]["id"] == answer for scope, prompt, answer in projects)
    assert hits == len(projects)
    out = cli("train-reranker", "--learner", "fusion", "--rollback", "--json")
    assert out.exit_code == 0, out.output
    assert sum(_top(cli, scope, prompt)[0]["id"] == answer for scope, prompt, answer in projects) < hits
