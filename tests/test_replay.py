"""`cairn replay` end to end: real Claude Code transcripts (read in place from ../shared/data) replayed through two
generation rules with the `command` backend running a deterministic local writer / judge (tests/replay_agent.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

SPOTTER = SHARED_DATA / "claude_code" / "spotter"
AGENT = Path(__file__).with_name("replay_agent.py")
CMD = f"{sys.executable} {AGENT}"
needs_transcripts = pytest.mark.skipif(not SPOTTER.is_dir(), reason=f"real Claude Code transcripts not at {SPOTTER}")


@pytest.fixture
def agent(backend, tmp_path, monkeypatch):
    """The local writer / judge's log of every prompt it received (one call = one line); the run's cache and
    reports on SQLite and on PostgreSQL (`backend`)."""
    log = tmp_path / "agent.jsonl"
    monkeypatch.setenv("REPLAY_AGENT_LOG", str(log))

    def calls() -> list[str]:
        return [json.loads(line)["prompt"] for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def _run(cli, *extra, transcripts=SPOTTER):
    result = cli("replay", "run", "--transcripts", transcripts, "--backend", "command", "--cmd", CMD, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@needs_transcripts
def test_a_dry_run_plans_sessions_calls_tokens_and_cost_and_calls_nothing(cli, agent):
    from cairn_cli.db.tables import ReplayCall

    result = cli("replay", "run", "--transcripts", SPOTTER, "--dry-run", "--json")  # the anthropic backend's plan
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["sessions"] >= 3 and plan["turns"] >= plan["sessions"]
    assert plan["calls"]["writer"] == 2 * plan["turns"]
    assert plan["input_tokens"]["writer"] > 1000 and plan["cost_usd"] > 0  # priced: claude-* models are in the table
    assert agent() == [] and ReplayCall.select().count() == 0
    table = cli("replay", "run", "--transcripts", SPOTTER, "--dry-run")
    assert "estimated cost" in table.stdout and "no call made" in table.stdout


@needs_transcripts
def test_a_full_run_judges_blind_and_swapped_and_reports_per_criterion(cli, agent, tmp_path):
    report = _run(cli, "--b-instruction", "Name the symptom a future session will search for in the keywords.")
    assert report["status"] == "complete" and report["sessions"] >= 3
    sent = len(agent())
    assert report["calls"]["made"] == sent > 0
    find, fit = report["criteria"]["findability"], report["criteria"]["fitness"]
    # the judge prefers the memories with keywords (arm B) wherever they are shown: B wins every judged pair
    assert find["wins_b"] == report["judged_turns"] > 0 and find["wins_a"] == 0 and find["flip_rate"] == 0
    assert fit["ties"] == report["judged_turns"] and fit["wins_b"] == 0  # it calls fitness a tie
    mappings = [m["x_is_b"] for ms in report["mappings"].values() for m in ms]
    assert len(mappings) == report["judged_turns"]
    metrics = report["arms_metrics"]
    assert metrics["B"]["coldread_mean"] == 3 and metrics["A"]["coldread_mean"] == 1
    assert metrics["A"]["memories"] == metrics["B"]["memories"] == report["turns"]
    assert report["prompts"] == {"writer": "writer-v1", "judge": "judge-pairwise-v1", "coldread": "coldread-v1"}
    listed = json.loads(cli("replay", "list", "--json").stdout)
    assert (
        listed[0]["run"] == report["run"]
        and listed[0]["verdicts"]["fitness"] == report["criteria"]["fitness"]["verdict"]
    )
    shown = cli("replay", "report", report["run"], "--plot", tmp_path / "win.png")
    assert shown.exit_code == 0 and "findability" in shown.stdout and "never promotes" in shown.stdout
    assert (tmp_path / "win.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    per_session = report["per_session"]  # the unit: each session's own score per criterion
    assert sum(s["findability"]["wins_b"] for s in per_session.values()) == find["wins_b"]


@needs_transcripts
def test_a_rerun_pays_for_nothing_twice(cli, agent):
    first = _run(cli, "--b-instruction", "Name the symptom in the keywords.")
    paid = len(agent())
    again = _run(cli, "--b-instruction", "Name the symptom in the keywords.", "--concurrency", "3")
    assert len(agent()) == paid and again["calls"]["made"] == 0
    assert again["criteria"] == first["criteria"] and again["arms_metrics"] == first["arms_metrics"]
    assert again["calls"]["sent"]["roles"]["writer"]["cached"] == 2 * first["turns"]


@needs_transcripts
def test_max_calls_stops_at_exactly_the_cap_and_resume_finishes_from_the_cache(cli, agent):
    partial = _run(cli, "--b-instruction", "Name the symptom in the keywords.", "--max-calls", "3")
    assert partial["status"] == "partial" and "--max-calls 3" in partial["stopped"]
    assert len(agent()) == partial["calls"]["made"] == 3
    shown = cli("replay", "report", partial["run"])
    assert "PARTIAL" in shown.stdout
    done = json.loads(cli("replay", "run", "--resume", partial["run"], "--json").stdout)
    assert done["run"] == partial["run"] and done["status"] == "complete"
    full = _run(cli, "--b-instruction", "Name the symptom in the keywords.")
    assert len(agent()) == 3 + done["calls"]["made"] and full["calls"]["made"] == 0  # nothing paid twice


@needs_transcripts
def test_a_judge_that_prefers_the_first_position_flips_every_time_and_yields_ties(cli, agent, monkeypatch):
    monkeypatch.setenv("REPLAY_JUDGE", "first")
    report = _run(cli, "--b-instruction", "Name the symptom in the keywords.")
    find = report["criteria"]["findability"]
    assert find["flip_rate"] == 1.0 and find["ties"] == report["judged_turns"] > 0 and find["wins_b"] == 0
    assert find["verdict"] != "B better"


@needs_transcripts
def test_unparseable_judge_answers_are_asked_again_once_then_counted(cli, agent, monkeypatch):
    monkeypatch.setenv("REPLAY_JUDGE", "junk")
    report = _run(cli, "--b-instruction", "Name the symptom in the keywords.")
    judge_calls = [p for p in agent() if "Judge three criteria" in p]
    assert len(judge_calls) == 4 * report["judged_turns"]  # two positions, each asked twice
    assert report["judge_unparsed"] == 2 * report["judged_turns"]
    assert report["criteria"]["findability"]["wins_b"] == 0


def test_secrets_are_redacted_before_they_leave_and_the_run_says_what_was_sent(cli, agent, tmp_path):
    key = "sk-ant-api03-" + "x" * 40
    transcript = tmp_path / "s1.jsonl"
    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": f"deploy with ANTHROPIC_API_KEY={key}"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {
                "id": "m1",
                "role": "assistant",
                "content": [{"type": "text", "text": f"Deployed using {key}."}],
            },
        },
    ]
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = _run(cli, "--b-instruction", "Name the symptom in the keywords.", transcripts=tmp_path)
    assert agent() and not any(key in p for p in agent())
    assert report["calls"]["sent"]["redacted"] and report["calls"]["sent"]["backend"] == "command"
    assert report["calls"]["sent"]["roles"]["writer"]["calls"] == 2


def test_bad_input_is_one_line_with_the_fix(cli, tmp_path):
    missing = cli("replay", "run", "--transcripts", tmp_path / "nowhere", "--dry-run")
    assert missing.exit_code == 1 and "--transcripts" in missing.output
    no_cmd = cli("replay", "run", "--transcripts", tmp_path, "--backend", "command", "--b-instruction", "x")
    assert no_cmd.exit_code == 2 and "--cmd" in no_cmd.output
    unknown = cli("replay", "run", "--transcripts", tmp_path, "--b", "gen-9", "--dry-run")
    assert unknown.exit_code == 2 and "gen-1" in unknown.output
    assert cli("replay", "report", "replay-nope").exit_code == 1


@needs_transcripts
def test_the_live_candidate_shows_its_replay_verdict_labelled_offline(cli, agent):
    status = json.loads(cli("ab", "status", "--json").stdout)
    assert status["offline_replay"] is None and status["versions"]["B"]
    report = _run(cli)  # default arms: the live A and the live experiment's B
    assert report["arms"]["B"]["version"] == status["versions"]["B"]
    status = json.loads(cli("ab", "status", "--json").stdout)
    assert status["offline_replay"]["run"] == report["run"]
    shown = cli("ab", "status")
    assert "offline replay" in shown.output and "not the live experiment" in shown.output
    assert cli("ab", "queue", "add", "Keep each memory under 200 characters.").exit_code == 0
    queued = json.loads(cli("ab", "queue", "list", "--json").stdout)
    assert queued[0]["offline_replay"] is None and queued[0]["version"].startswith(status["versions"]["A"])
    assert "none yet" in cli("ab", "queue", "list").stdout


@needs_transcripts
def test_max_cost_stops_before_a_call_would_pass_it(cli, agent):
    """Priced at $1,000 per million tokens, a writer call costs about $1-3 here: a $5 cap stops after a few calls,
    before the one that could pass it, and says so."""
    report = _run(
        cli, "--b-instruction", "Name the symptom.", "--price-in", "1000", "--price-out", "1000", "--max-cost-usd", "5"
    )
    assert report["status"] == "partial" and "--max-cost-usd 5" in report["stopped"]
    assert 0 < report["calls"]["made"] == len(agent()) and report["calls"]["cost_usd"] <= 5
