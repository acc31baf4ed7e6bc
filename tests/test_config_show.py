"""`cairn config show`: every setting, its value in force and its source (flag, environment, config.toml, default,
machine state), grouped as the README groups them; on a real SQLite store."""

from __future__ import annotations

import json
import re

import pytest

from cairn_cli import config
from tests.conftest import ROOT


def _rows(cli, *args, options=()) -> dict[str, dict]:
    result = cli(*args, "config", "show", *options, "--json")
    assert result.exit_code == 0, result.output
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_every_setting_once_in_the_registry_order(cli):
    rows = _rows(cli)
    assert list(rows) == [f"CAIRN_{name}" for _, names in config.GROUPS for name in names]
    assert sorted(rows) == sorted(f"CAIRN_{name}" for name in config.SETTINGS)


def test_the_source_says_default_environment_config_file_or_flag(cli, cairn_home, monkeypatch):
    (cairn_home / "config.toml").write_text("RERANK_BLEND = 0.25\n")
    monkeypatch.setenv("CAIRN_RANK_K", "9")
    url = f"sqlite:///{cairn_home / 'memory.db'}"
    rows = _rows(cli, "--db-url", url)
    assert (rows["CAIRN_RANK_K"]["value"], rows["CAIRN_RANK_K"]["source"]) == (9, "environment")
    assert (rows["CAIRN_RERANK_BLEND"]["value"], rows["CAIRN_RERANK_BLEND"]["source"]) == (0.25, "config.toml")
    assert (rows["CAIRN_RERANK_CANDIDATES"]["value"], rows["CAIRN_RERANK_CANDIDATES"]["source"]) == (20, "default")
    assert (rows["CAIRN_DB_URL"]["value"], rows["CAIRN_DB_URL"]["source"]) == (url, "flag")
    assert rows["CAIRN_EPHEMERAL_DB_URL"]["value"] == f"sqlite:///{cairn_home / 'ephemeral.db'}"
    assert rows["CAIRN_EPHEMERAL_DB_URL"]["source"] == "default"
    assert rows["CAIRN_HOME"]["value"] == str(cairn_home)
    assert rows["CAIRN_RANK_K"]["group"] == "Ranking"


def test_a_calibrated_value_in_machine_state_wins_and_says_so(cli, monkeypatch):
    from cairn_cli.config import Settings
    from cairn_cli.core.store import state

    monkeypatch.setenv("CAIRN_ENGAGEMENT_SEMANTIC_MIN", "0.6")
    state.put("engagement_semantic_min", 0.42, Settings(), by="test", reason="calibrated")
    state.put("composite_floor:default:hashing", 0.2, Settings(), by="test", reason="calibrated")
    rows = _rows(cli)
    engagement = rows["CAIRN_ENGAGEMENT_SEMANTIC_MIN"]
    assert (engagement["value"], engagement["source"]) == (0.42, "machine state")
    assert (engagement["state_key"], engagement["configured"], engagement["configured_source"]) == (
        "engagement_semantic_min",
        0.6,
        "environment",
    )
    floor = rows["CAIRN_COMPOSITE_FLOOR"]
    assert (floor["value"], floor["source"], floor["configured"]) == (0.2, "machine state", "auto")
    assert floor["state_key"] == "composite_floor:default:hashing"
    assert rows["CAIRN_RERANKER_FLOOR_MSMARCO"]["source"] == "default"  # nothing calibrated for it
    # a floor configured as a number is not "auto": the calibrated one does not apply, and is not shown as if it did
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "0.3")
    floor = _rows(cli)["CAIRN_COMPOSITE_FLOOR"]
    assert (floor["value"], floor["source"], floor["state_key"]) == ("0.3", "environment", None)
    # --no-state: the configured values alone
    plain = _rows(cli, options=["--no-state"])
    assert (plain["CAIRN_ENGAGEMENT_SEMANTIC_MIN"]["value"], plain["CAIRN_ENGAGEMENT_SEMANTIC_MIN"]["source"]) == (
        0.6,
        "environment",
    )


def test_a_url_is_shown_without_its_password(cli, monkeypatch):
    from cairn_cli.config import Settings
    from cairn_cli.core.settings_report import settings_report

    monkeypatch.setenv("CAIRN_DB_URL", "postgresql://cairn:s3cret@db.example/team")
    row = next(r for r in settings_report(Settings(), machine_state=False) if r.name == "CAIRN_DB_URL")
    assert row.value == "postgresql://cairn:***@db.example/team"
    result = cli("config", "show", "--no-state")
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output


def test_the_table_has_one_section_per_group(cli, monkeypatch):
    monkeypatch.setenv("CAIRN_RANK_K", "9")
    result = cli("config", "show")
    assert result.exit_code == 0, result.output
    for title, _ in config.GROUPS:
        assert title in result.stdout
    line = next(line for line in result.stdout.splitlines() if "CAIRN_RANK_K " in line)
    assert "9" in line and "environment" in line


@pytest.mark.parametrize("value", ["many", "1.5"])
def test_a_bad_value_is_the_usual_one_line_error(cli, monkeypatch, value):
    monkeypatch.setenv("CAIRN_RANK_K", value)
    result = cli("config", "show", "--no-state")
    assert result.exit_code == 1, result.output
    assert "CAIRN_RANK_K" in result.output


def _readme_groups() -> list[tuple[str, list[str]]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    groups: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        if line.startswith("### "):
            groups.append((line[4:].strip(), []))
        elif m := re.match(r"\| `CAIRN_(\w+)` \|", line):
            assert groups, f"CAIRN_{m.group(1)} is in the README's configuration section under no heading"
            groups[-1][1].append(m.group(1))
    return groups


def test_the_readme_groups_the_settings_as_the_registry_does():
    assert _readme_groups() == config.GROUPS


def test_every_setting_is_in_exactly_one_group():
    names = [name for _, names in config.GROUPS for name in names]
    assert len(names) == len(set(names))
    assert set(names) == set(config.SETTINGS)
