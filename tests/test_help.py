"""Every command has working --help, is in the README, and `cairn --help` stays light."""

import pytest

from cairn_cli.cli import (
    COMMANDS,
    ab_app,
    ab_queue_app,
    app,
    config_app,
    daemon_app,
    db_app,
    hook_app,
    memory_app,
    replay_app,
    stats_app,
)
from tests.conftest import ROOT, python_c

GROUPS = {
    id(app): "",
    id(memory_app): "memory ",
    id(daemon_app): "daemon ",
    id(hook_app): "hook ",
    id(ab_app): "ab ",
    id(ab_queue_app): "ab queue ",
    id(stats_app): "stats ",
    id(replay_app): "replay ",
    id(db_app): "db ",
    id(config_app): "config ",
}
ALL = [f"{GROUPS[id(parent)]}{name}" for parent, name, _ in COMMANDS]


@pytest.mark.parametrize("command", ["", "memory", "daemon", "hook", "ab", "ab queue", "stats", "db", "config"] + ALL)
def test_every_help_works(cli, command):
    result = cli(*command.split(), "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


@pytest.mark.parametrize("command", ALL)
def test_every_command_is_in_the_readme(command):
    assert f"cairn {command}" in (ROOT / "README.md").read_text()


def _command(path: str):
    import typer.main

    command = typer.main.get_command(app)
    for part in path.split():
        command = command.commands[part]
    return command


@pytest.mark.parametrize("command", ALL)
def test_bracketed_literals_in_help_are_shown_as_written(cli, command):
    """`[cm]`, `[/cm]`, `[OPTIONS]`-like literals in a docstring or an option's help must reach the reader."""
    import re

    cmd = _command(command)
    texts = [cmd.help or ""] + [p.help or "" for p in cmd.params if getattr(p, "help", None)]
    literals = {m for text in texts for m in re.findall(r"\[/?[A-Za-z][^\]\s]*\]", text)}
    output = " ".join(cli(*command.split(), "--help").output.split())
    missing = [lit for lit in literals if lit not in output]
    assert not missing, f"{command} --help lost {missing}"


def test_grade_help_names_the_cm_block(cli):
    assert "Exit 2 when the text has no [cm] block" in " ".join(cli("grade", "--help").output.split())


def test_tables_show_bracketed_data_as_written(cli):
    assert cli("memory", "add", "Answer with a [cm] block; [red]this is not markup[/red]").exit_code == 0
    out = cli("memory", "list").output
    assert "[cm] block" in out and "[red]this is not markup[/red]" in out


def test_every_setting_is_in_the_readme():
    from cairn_cli.config import SETTINGS

    readme = (ROOT / "README.md").read_text()
    missing = [name for name in SETTINGS if f"CAIRN_{name}" not in readme]
    assert not missing


@pytest.mark.slow
def test_help_imports_no_heavy_module():
    code = (
        "import sys\nfrom cairn_cli.cli import main\nsys.argv = ['cairn', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'numpy', 'peewee', 'tqdm')"
        " if m in sys.modules]\nprint('HEAVY', heavy)"
    )
    out = python_c(code)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout
