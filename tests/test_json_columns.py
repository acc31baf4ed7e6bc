"""Every `--json` carries what its table shows (#30): each command that prints a table and has `--json` is run both
ways on one small store, and every column of every table it draws must be a field of its JSON (at any depth), or a
declared rendering of one (a column drawn from a nested field, or formatted from it)."""

from __future__ import annotations

import json
import re

import pytest

from cairn_cli import hook_entry, output
from tests.conftest import EXAMPLES

# a column drawn from JSON fields under other names (formatted, or from a nested field): (pattern, those fields)
RENDERED = [
    (r"sim", {"similarity"}),  # score_components.similarity
    (r"kw", {"keywords"}),  # score_components.keywords
    (r"grades 0/1/2/3", {"grade_hist"}),
    (r"hard neg", {"hard_negatives"}),
    (r"untagged n", {"untagged", "n"}),
    (r"[\w-]+ rate \[CI\] \(n\)", {"engagement", "rate", "ci_low", "ci_high", "n"}),
    (r"[\w-]+ rate \(n\)", {"engagement", "rate", "n"}),
    (r"[\w-]+ engaged", {"engagement"}),  # "-" while the arm has none: the JSON's engagement is {}
    (r"in_session", {"in_session_merged", "in_session_rate"}),
    (r"size", {"bytes"}),
    (r"long text \(chars\)", {"text_chars", "long_text"}),
    (r"delivered later", {"memories_delivered", "deliveries"}),
    (r"rows", {"grades"}),  # backfill-semantic's agent grades: a row per side, the JSON's grades keyed by side
    (r"graded n", {"n"}),  # backfill-semantic's agent grades, per side
    (r"mean grade", {"mean"}),
    (r"95% interval", {"ci_low", "ci_high"}),
    (r"verdict", {"too_small"}),
    (r"place", {"rows"}),  # forget / redact: purged.rows, keyed by place
    (r"rows or files", {"rows", "files"}),
]

COMMANDS = [
    ["deliveries"],
    ["memory", "list"],
    ["memory", "show", "1"],
    ["stats", "deliveries"],
    ["stats", "labels"],
    ["stats", "prompts"],
    ["stats", "dedup"],
    ["stats", "instances"],
    ["stats", "stores"],
    ["ab", "status"],
    ["ab", "queue", "list"],
    ["doctor"],
    ["config", "show"],
    ["forget", "--pattern", "connection refused", "--dry-run"],
    ["db", "copy", "--from", "sqlite:///{home}/memory.db", "--to", "sqlite:///{home}/copy.db", "--store", "memory"],
    ["backfill-semantic", "--dry-run"],
]


@pytest.fixture
def store(cli, capsys):
    """The example memories, one graded hook turn, one memory merged into another."""
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    prompt = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "the tests fail: connection refused"}
    assert hook_entry.run_prompt(json.dumps(prompt).encode()) == 0
    shown = [int(x.split('"')[0]) for x in capsys.readouterr().out.split('<memory id="')[1:]]
    answer = f'Run make db-up.\n[cm]{{"m": ["Run make db-up first"], "rg": ["{shown[0]}:3"]}}[/cm]'
    stop = {"session_id": "s1", "hook_event_name": "Stop", "last_assistant_message": answer}
    assert hook_entry.run_stop(json.dumps(stop).encode()) == 0
    assert cli("ab", "queue", "add", "Keep each memory to one statement.").exit_code == 0


def keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def _norm(name: str) -> str:
    return name.lower().replace(" ", "_").replace("-", "_")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_json_carries_every_column_of_its_table(store, cli, monkeypatch, cairn_home, command):
    command = [word.replace("{home}", str(cairn_home)) for word in command]
    drawn: list[tuple[str | None, list[str]]] = []
    real_table = output.table

    def table(rows, columns, *, title=None, widths=None):
        if rows:  # an empty table shows its columns and no value: nothing a JSON could carry
            drawn.append((title, list(columns)))
        real_table(rows, columns, title=title, widths=widths)

    monkeypatch.setattr(output, "table", table)
    plain = cli(*command)
    assert plain.exit_code in (0, 1), plain.output
    assert drawn, f"`cairn {' '.join(command)}` drew no table"
    result = cli(*command, "--json")
    assert result.exit_code == plain.exit_code, result.output
    fields = {_norm(k) for k in keys(json.loads(result.stdout))}

    def carried(column: str) -> bool:
        if _norm(column) in fields or column in ("field", "value"):  # key_values: its fields are the rows
            return True
        drawn_from = next((names for pattern, names in RENDERED if re.fullmatch(pattern, column)), None)
        return drawn_from is not None and {_norm(n) for n in drawn_from} <= fields

    missing = [(title, column) for title, columns in drawn for column in columns if not carried(column)]
    assert missing == [], f"`cairn {' '.join(command)} --json` lacks what its table shows: {missing}"


def test_deliveries_json_names_the_instance_that_delivered(store, cli):
    from cairn_cli.db.instance import writing_instance

    rows = json.loads(cli("deliveries", "--json").stdout)
    assert rows and {r["instance"] for r in rows} == {writing_instance()} and {r["agent"] for r in rows} == {"claude"}
