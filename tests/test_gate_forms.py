"""#27: the gate judges a student on held-out queries in both forms users send (the hook's window, ranked as the hook
ranks it, and the prompt alone), and the pairs use the labels better (hard negatives, weights). Fake students: no
training, no model."""

from __future__ import annotations

import json

import orjson
import pytest

from cairn_cli import config, db
from cairn_cli.config import Settings
from cairn_cli.core.learning import export, gate, trainer
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import LabelRow
from cairn_cli.core.learning.gate import PROMPT, QUERY, WINDOW, Ranking, RankingCase
from cairn_cli.core.learning.pairs import (
    AGREE,
    DISAGREE,
    HARD_NEGATIVE_WEIGHT,
    IPS_CAP,
    MAX_RAW_WEIGHT,
    Pair,
    Split,
    agreement,
    make_pairs,
)
from cairn_cli.core.ranking.context import build_context_window, context_key, window_of
from cairn_cli.core.store import deliveries, hookstate, memories
from tests.test_window import UNRELATED, _examples, _transcript

# -- recovering the prompt from a logged window ---------------------------------------------------------------


def test_a_logged_window_gives_back_the_prompt_and_earlier_turns_it_was_built_from(tmp_path):
    prompt = "which port does the vite frontend dev server use?"
    built = build_context_window(prompt, _transcript(tmp_path / "t.jsonl", *UNRELATED), max_turns=3, max_chars=2000)
    assert built.earlier and built.turns_used == 3
    for hint in (built.prompt, None):  # hook_state's prompt, or none (expired): the first role mark
        got = window_of(built.text, hint)
        assert (got.text, got.key, got.prompt) == (built.text, built.key, built.prompt)
        assert got.earlier == built.earlier and got.turns_used == built.turns_used
    alone = window_of(prompt, prompt)
    assert alone.prompt == alone.text == prompt and not alone.earlier


def test_hook_states_prompt_is_what_recovers_a_prompt_that_quotes_a_role_mark(tmp_path):
    prompt = "the log says user: admin was locked out, why?"
    built = build_context_window(
        prompt, _transcript(tmp_path / "t.jsonl", ("user", "the staging deploy failed")), max_turns=3, max_chars=2000
    )
    got = window_of(built.text, built.prompt)
    assert got.prompt == prompt and got.earlier == [("user", "the staging deploy failed")]
    assert window_of(built.text).prompt == "the log says"  # without it: cut at the quoted mark (the documented limit)
    # hook_state keeps the prompt cut at its PROMPT_CHARS: a cut prompt still opens the window, the turns follow it
    assert window_of(built.text, prompt[:20]).prompt == prompt
    assert window_of(built.text, "another prompt").prompt == "the log says"  # a hint that does not open it is ignored


# -- the gate ranks a window exactly as the hook does ---------------------------------------------------------


def _rank(cli, prompt: str, *args) -> dict:
    result = cli("rank", prompt, "--scope", "webshop", "--json", "-k", "20", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _grade_all(session: str, grades: dict[int, int] | None = None) -> None:
    from cairn_cli.db.tables import MemoryDelivery

    for d in MemoryDelivery.select().where(MemoryDelivery.session_id == session):
        grade = (grades or {}).get(d.memory_id, 0)
        MemoryDelivery.update(grade=grade).where(MemoryDelivery.id == d.id).execute()


@pytest.mark.parametrize("with_hook_state", [True, False])
def test_the_gate_ranks_a_window_with_earlier_turns_as_cairn_rank_does(cli, tmp_path, with_hook_state):
    _examples(cli)
    prompt, memory = "which port does the vite frontend dev server use?", 7
    path = _transcript(tmp_path / "t.jsonl", *UNRELATED)
    live = _rank(cli, prompt, "--transcript", path, "--session", "hook")  # logged: deliveries and hook_state
    assert live["memories"][0]["components"]["window"]["turns"] == 3
    _grade_all("hook", {memory: 3})
    if not with_hook_state:
        from cairn_cli.db.tables import HookState

        HookState.delete().execute()
    rows = export.graded_rows(Settings())
    assert {r.prompt for r in rows} == ({prompt} if with_hook_state else {None})
    cases = gate.ranking_cases(rows, {r.query_key for r in rows}, from_store=True)
    assert len(cases) == 1 and cases[0].query == live["context_window"]
    ranked = gate.pipeline_rankings(cases, {"live": None}, Settings(), form=WINDOW)["live"][0]
    assert ranked == [m["id"] for m in live["memories"]]  # the same memories in the same order
    # ranked as one text (the gate before #27) the earlier turns' memories push the prompt's out of the top 5
    one_text = [m["id"] for m in _rank(cli, live["context_window"], "--no-log")["memories"]]
    assert memory in ranked[:5] and memory not in one_text[:5] and ranked != one_text
    alone = gate.pipeline_rankings(cases, {"live": None}, Settings(), form=PROMPT)["live"][0]
    assert alone == [m["id"] for m in _rank(cli, prompt, "--no-log")["memories"]]


# -- the gate judges both forms -----------------------------------------------------------------------------

PROJECTS = {  # per project: the prompt, and an earlier exchange about something else
    "billing": ("which port does the billing service listen on", "the office coffee machine is broken again", "I will order a new coffee machine for the office"),
    "search": ("how many shards does the search index use", "the team lunch is on friday at the pizza place", "I booked the pizza place for the team lunch"),
    "mailer": ("what smtp relay does the mailer send through", "the printer on floor two jams on every page", "I asked facilities to fix the floor two printer"),
    "auth": ("how long do auth session tokens live", "the parking garage gate is stuck open", "I reported the stuck parking garage gate"),
}  # fmt: skip


def _forms_store(cli) -> dict[str, int]:
    """Per project (its own scope), one graded turn logged as the hook logs it (deliveries with the window, the prompt
    in hook_state): the answer (3), a related note (2), the earlier exchange's own words (0: the window's turns lift
    it above the related note, the prompt alone does not) and an unrelated note (0). Returns text -> grade."""
    grades: dict[str, int] = {}
    for turn, (scope, (prompt, said, answered)) in enumerate(PROJECTS.items(), start=1):
        texts = {
            f"{prompt}: the {scope} answer is in the {scope} runbook": 3,
            f"the {scope} service settings live in {scope}.toml": 2,
            f"{said}; {answered}": 0,
            f"the {scope} team likes {said.split()[-1]} weather": 0,
        }
        window = f"{prompt} user: {said} assistant: {answered}"
        for text, grade in texts.items():
            assert cli("memory", "add", text, "--scope", scope).exit_code == 0
            mid = max(m.id for m in memories.list_memories(Settings(), include_superseded=True))
            [did] = deliveries.record(
                [
                    deliveries.DeliveryInput(
                        "s", turn, mid, window, context_key(window), 1, 0.5, {}, "none", "prompt", scope
                    )
                ],
                Settings(),
            )
            from cairn_cli.db.tables import MemoryDelivery

            MemoryDelivery.update(grade=grade).where(MemoryDelivery.id == did).execute()
        with db.transaction("ephemeral"):
            hookstate.record_turn("s", turn, context_key=context_key(window), hook={"prompt": prompt})
        grades.update(texts)
    return grades


class FormStudent:
    """A trained student stand-in whose score of (query, memory) depends on the form of the query: `on_window` for
    a window with earlier turns, `on_prompt` for a prompt alone (each: grade -> score)."""

    def __init__(self, grades: dict[str, int], on_window, on_prompt):
        self.grades, self.on_window, self.on_prompt = grades, on_window, on_prompt

    def score(self, pairs, batch_size=32):
        return [float((self.on_window if " user: " in q else self.on_prompt)(self.grades.get(t, 0))) for q, t in pairs]

    def save(self, path):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")
        (path / "model.safetensors").write_bytes(b"")


def _train_with(monkeypatch, student, **opts) -> dict:
    def fake_train(settings, options, split, inc, report, progress):
        report.incumbent, report.base = inc.name, "fake"
        return student

    monkeypatch.setattr(trainer, "_train_student", fake_train)
    return trainer.train_reranker(Settings(), TrainOptions(holdout=0.5, seed=2, **opts)).as_dict()


def _student_dir():
    return config.student_path()


def test_the_live_ranking_of_the_built_store_is_worse_on_windows_than_on_prompts(cli):
    _forms_store(cli)
    rows = export.graded_rows(Settings())
    cases = gate.ranking_cases(rows, {r.query_key for r in rows}, from_store=True)
    window, alone = (
        gate.ranking_quality(cases, gate.pipeline_rankings(cases, {"live": None}, Settings(), form=f)["live"])
        for f in (WINDOW, PROMPT)
    )
    assert window.queries == alone.queries == 4
    assert window.ndcg10 < alone.ndcg10 < 1.0  # room to help both forms; the window's more


def test_a_student_that_helps_windows_and_hurts_prompts_is_refused_and_the_reason_names_the_prompt(cli, monkeypatch):
    grades = _forms_store(cli)
    report = _train_with(monkeypatch, FormStudent(grades, lambda g: g, lambda g: -g))
    forms = report["forms"]
    assert set(forms) == {WINDOW, PROMPT} and forms[WINDOW]["queries"] == forms[PROMPT]["queries"] == 2
    assert forms[WINDOW]["student_ndcg10"] >= forms[WINDOW]["incumbent_ndcg10"] + 0.02, report  # helps windows
    assert forms[PROMPT]["student_ndcg10"] < forms[PROMPT]["incumbent_ndcg10"] - 0.02, report  # hurts prompts
    assert report["outcome"] == "refused" and "the prompt alone" in report["reason"], report
    assert not _student_dir().exists()


def test_a_student_that_helps_both_forms_is_deployed_and_its_card_has_both(cli, monkeypatch):
    grades = _forms_store(cli)
    report = _train_with(monkeypatch, FormStudent(grades, lambda g: g, lambda g: g))
    forms = report["forms"]
    for form in (WINDOW, PROMPT):
        assert forms[form]["student_ndcg10"] > forms[form]["incumbent_ndcg10"], report
        assert forms[form]["student_r5"] >= forms[form]["incumbent_r5"], report
    assert report["outcome"] == "deployed" and _student_dir().is_symlink(), report
    assert report["ranking_queries"] == 2  # held-out queries; each ranked in both forms
    card = json.loads((_student_dir() / "model_card.json").read_text())
    assert card["held_out"]["forms"] == forms


def test_train_reranker_shows_both_forms_in_its_table_and_json(cli, monkeypatch):
    grades = _forms_store(cli)
    monkeypatch.setattr(trainer, "_train_student", lambda *a, **k: FormStudent(grades, lambda g: g, lambda g: -g))
    out = cli("train-reranker", "--holdout", "0.5", "--seed", "2", "--json")
    assert out.exit_code == 0, out.output
    assert set(orjson.loads(out.stdout)["forms"]) == {WINDOW, PROMPT}
    out = cli("train-reranker", "--holdout", "0.5", "--seed", "2")
    assert out.exit_code == 0, out.output
    assert "held-out, per form" in out.stdout and "window" in out.stdout and "prompt" in out.stdout


def _r(ndcg: float, r5: float = 0.8, n: int = 40) -> Ranking:
    return Ranking(r5, ndcg, n)


@pytest.mark.parametrize(
    "window, prompt, passed, why",
    [
        ((0.80, 0.60), (0.70, 0.70), True, "improves"),  # both up
        ((0.80, 0.60), (0.67, 0.70), False, "the prompt alone ranks worse"),  # +0.10 overall, but prompts -0.03
        ((0.75, 0.60), (0.72, 0.70), True, "improves"),  # prompts within the tolerance, overall +0.085
        ((0.62, 0.60), (0.71, 0.70), False, "does not improve"),  # +0.015 overall < the margin
    ],
)
def test_the_gate_wants_better_overall_and_neither_form_worse_beyond_the_tolerance(window, prompt, passed, why):
    mine = {WINDOW: _r(window[0]), PROMPT: _r(prompt[0])}
    live = {WINDOW: _r(window[1]), PROMPT: _r(prompt[1])}
    verdict, reason = gate.gate(mine, live, margin=0.02, recall_tolerance=0.02)
    assert verdict is passed and why in reason, reason
    # R@5 too, per form: the same nDCG gains with prompts showing fewer relevant memories
    fewer = {WINDOW: _r(0.80), PROMPT: _r(0.72, r5=0.70)}
    verdict, reason = gate.gate(fewer, live, margin=0.02, recall_tolerance=0.02)
    assert not verdict and "fewer relevant memories shown for the prompt alone" in reason


def test_data_rows_are_judged_in_the_one_form_they_have():
    case = RankingCase("k", "q", None, {0: 3}, ["a"])
    assert case.forms == (QUERY,)
    assert gate.gate({QUERY: _r(0.8)}, {QUERY: _r(0.7)}, margin=0.02, recall_tolerance=0.02)[0]
    # one form: the margin is its nDCG rule, a negative one (the operator opening the gate) lets it rank worse
    assert gate.gate({QUERY: _r(0.6)}, {QUERY: _r(0.7)}, margin=-1, recall_tolerance=0.02)[0]
    refused, why = gate.gate({QUERY: _r(0.69)}, {QUERY: _r(0.7)}, margin=0.02, recall_tolerance=0.02)
    assert not refused and "does not improve" in why


# -- labels used better: hard negatives and weights ------------------------------------------------------------


def _row(memory: str, grade: int, key: str = "q", **kw) -> LabelRow:
    return LabelRow(f"query {key}", memory, grade, query_key=key, **kw)


def test_hard_negatives_are_paired_against_every_memory_graded_at_least_as_high_even_at_the_same_grade():
    plain = [_row("answer", 3), _row("related", 1), _row("noise", 0), _row("trap", 0)]
    trapped = [*plain[:3], _row("trap", 0, hard_negative=True)]
    before = {(p.better, p.worse) for p in make_pairs(plain, {"q"}, min_gap=2)}
    after = {(p.better, p.worse) for p in make_pairs(trapped, {"q"}, min_gap=2)}
    assert before == {("answer", "related"), ("answer", "noise"), ("answer", "trap")}
    # a misleading memory is worse than an irrelevant one: 0 vs 0!, and 1 vs 0! under the min gap
    assert after == before | {("related", "trap"), ("noise", "trap")}
    # two hard negatives are never paired against each other; a hard negative graded higher is still the better
    both = [_row("a", 0, hard_negative=True), _row("b", 0, hard_negative=True), _row("c", 2, hard_negative=True)]
    assert {(p.better, p.worse) for p in make_pairs(both, {"q"}, min_gap=2)} == {("c", "a"), ("c", "b")}


def test_pair_weights_follow_the_gap_hard_negatives_propensity_and_agreement_and_average_one():
    rows = [_row("three", 3), _row("two", 2), _row("zero", 0), _row("trap", 0, hard_negative=True)]
    pairs = make_pairs(rows, {"q"}, min_gap=2)
    assert sum(p.weight for p in pairs) / len(pairs) == pytest.approx(1.0)
    w = {(p.better, p.worse): p.weight for p in pairs}
    assert w[("three", "zero")] == pytest.approx(1.5 * w[("two", "zero")])  # gap 3 vs gap 2
    assert w[("three", "trap")] == pytest.approx(HARD_NEGATIVE_WEIGHT * w[("three", "zero")])
    assert w[("zero", "trap")] == pytest.approx(HARD_NEGATIVE_WEIGHT * w[("three", "zero")] / 3)  # gap 0 counts 1


@pytest.mark.parametrize(
    "explore, grade_propensity, factor",
    [
        (1.0, 1.0, 1.0),
        (0.5, 1.0, 2.0),  # shown by exploration with chance 0.5: counts twice
        (0.005, 1.0, IPS_CAP),  # 1 / 0.005 is capped
        (1.0, 0.25, 4.0),  # a demoted teacher's turn, graded with chance 0.25 (teacher demotion: grade_propensity)
        (0.5, 0.5, 4.0),
    ],
)
def test_a_pair_counts_by_the_inverse_of_its_chance_of_being_shown_and_graded(explore, grade_propensity, factor):
    control = [_row("c3", 2, key="c"), _row("c1", 1, key="c")]
    rows = [
        _row("p2", 2, explore_propensity=explore, grade_propensity=grade_propensity),
        _row("p1", 1, grade_propensity=grade_propensity),
    ]
    w = {p.better: p.weight for p in make_pairs(control + rows, {"c", "q"}, min_gap=1)}
    assert w["p2"] == pytest.approx(factor * w["c3"])


def test_a_raw_weight_is_capped_before_the_weights_are_normalised():
    rows = [_row("c3", 3, key="c"), _row("c0", 0, key="c"), _row("p3", 3, explore_propensity=0.01), _row("p0", 0)]
    w = {p.better: p.weight for p in make_pairs(rows, {"c", "q"}, min_gap=2)}
    assert w["p3"] == pytest.approx(MAX_RAW_WEIGHT / 3 * w["c3"])  # 3 x 10 = 30, capped at 20


@pytest.mark.parametrize(
    "engaged_better, engaged_worse, factor",
    [
        (True, False, AGREE),  # both rows' engagement agrees with their grade
        (False, True, DISAGREE),  # both disagree
        (True, None, (AGREE + 1) / 2),  # one agrees, the other has no engagement decision
        (None, None, 1.0),
    ],
)
def test_a_pair_whose_grades_engagement_agrees_with_weighs_more_than_one_it_contradicts(
    engaged_better, engaged_worse, factor
):
    base = [_row("control", 3, key="c"), _row("control-0", 0, key="c")]
    rows = [*base, _row("good", 3, engaged=engaged_better), _row("bad", 0, engaged=engaged_worse)]
    w = {p.better: p.weight for p in make_pairs(rows, {"c", "q"}, min_gap=2)}
    assert w["good"] == pytest.approx(factor * w["control"])


def test_agreement_counts_each_pair_once_whatever_its_weight():
    pairs = [Pair("k", "q", "a", "b", 10.0), Pair("k", "q", "c", "d", 0.1)]
    scores = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0}
    assert agreement(lambda q, texts: [scores[t] for t in texts], pairs) == 0.5


def test_the_training_pairs_are_the_graded_and_weak_pairs_normalised_together():
    graded = make_pairs([_row("a", 3), _row("b", 0)], {"q"}, min_gap=2)
    weak = make_pairs([_row("x", 3, key="w"), _row("y", 0, key="w")], {"w"}, min_gap=2, weighted=False)
    split = Split([], "", set(), set(), graded, [], weak)
    training = split.training()
    assert len(training) == 2 and sum(p.weight for p in training) == pytest.approx(2.0)


def test_the_students_loss_is_the_pairs_weighted_mean():
    torch = pytest.importorskip("torch")
    from cairn_cli.ml.student import pairwise_loss

    better, worse = torch.tensor([0.0, 2.0, 0.0]), torch.tensor([0.5, 0.0, 0.0])
    per_pair = [1.5, 0.0, 1.0]  # margin 1: max(0, 1 - (b - w))
    assert float(pairwise_loss(better, worse, torch.ones(3), 1.0)) == pytest.approx(sum(per_pair) / 3)
    weights = torch.tensor([2.0, 0.5, 0.5])
    assert float(pairwise_loss(better, worse, weights, 1.0)) == pytest.approx((3.0 + 0.0 + 0.5) / 3)
    assert float(pairwise_loss(better, worse, torch.tensor([0.0, 3.0, 0.0]), 1.0)) == 0.0  # weight 0: not learned


def test_graded_rows_carry_the_prompt_engagement_and_exploration_of_each_delivery(cli):
    from cairn_cli.db.tables import MemoryDelivery

    for i in range(3):
        assert cli("memory", "add", f"memory {i} about topic {i}").exit_code == 0
    window = "the prompt user: an earlier turn"
    components = [{}, {"explore_propensity": 0.02, "explored_from_rank": 9}, {}]
    ids = deliveries.record(
        [
            deliveries.DeliveryInput(
                "s", 1, m, window, context_key(window), m, 0.5, components[m - 1], "none", "prompt", "global"
            )
            for m in (1, 2, 3)
        ],
        Settings(),
    )
    for did, grade, engaged, method in zip(ids, (3, 2, 0), (True, None, True), ("lexical", None, None)):
        MemoryDelivery.update(grade=grade, engaged=engaged, engaged_method=method).where(
            MemoryDelivery.id == did
        ).execute()
    with db.transaction("ephemeral"):
        hookstate.record_turn("s", 1, context_key=context_key(window), hook={"prompt": "the prompt"})
    rows = export.graded_rows(Settings())
    assert [r.prompt for r in rows] == ["the prompt"] * 3
    assert [r.engaged for r in rows] == [True, None, None]  # untagged engagement (no method) is not used
    assert [r.explore_propensity for r in rows] == [1.0, 0.02, 1.0]
    assert [r.grade_propensity for r in rows] == [1.0, 1.0, 1.0]
