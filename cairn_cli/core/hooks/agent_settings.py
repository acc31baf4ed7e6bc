"""cairn's hooks in an agent's settings: Claude Code's `.claude/settings.json`, Codex CLI's `.codex/hooks.json` (the
same `hooks` shape) and Gemini CLI's `.gemini/settings.json` (its own events, timeouts in milliseconds), at project
or user level. Merge them in, take them out, never touch anything else.

Stdlib only. Pure functions on dicts plus a small plan / apply pair that reads and atomically writes the file.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from cairn_cli.errors import InvalidInput
from cairn_cli.files import atomic_write

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher.py"  # cairn_cli/launcher.py: what the hooks run

#: agent -> event -> (subcommand, timeout in the agent's unit: seconds, Gemini's milliseconds). No matcher.
AGENT_HOOKS: dict[str, dict[str, tuple[str, int]]] = {
    "claude": {"UserPromptSubmit": ("prompt", 10), "Stop": ("stop", 30)},
    "codex": {"UserPromptSubmit": ("prompt", 10), "Stop": ("stop", 30)},
    "gemini": {"BeforeAgent": ("prompt", 10_000), "AfterAgent": ("stop", 30_000)},
}
HOOKS = AGENT_HOOKS["claude"]
#: agent -> (its folder, its settings file's name)
FILES = {
    "claude": (".claude", "settings.json"),
    "codex": (".codex", "hooks.json"),
    "gemini": (".gemini", "settings.json"),
}
WHERE = ("project", "user")
_FIX = "fix the file by hand, then run the command again"


def hook_entries(command: str, agent: str = "claude") -> dict:
    """cairn's hooks in the settings' `hooks` format, for the executable `command`."""
    return {
        event: [{"hooks": [{"type": "command", "command": f"{command} hook {sub}", "timeout": timeout}]}]
        for event, (sub, timeout) in AGENT_HOOKS[agent].items()
    }


def is_cairn_hook(hook: object) -> bool:
    """A hook cairn installed: `... hook prompt|stop` run by a `cairn` executable, by `python -m cairn_cli` or by
    `python -S …/cairn_cli/launcher.py`, also wrapped (`env X=1 cairn hook prompt`, `sh -c 'cd … && cairn hook
    stop'`): a reinstall replaces it, never adds a second pair."""
    return bool(hook_programs(hook))


def hook_programs(hook: object) -> list[str]:
    """What a cairn hook runs, as written in the settings: the `cairn` executable; the python of `python -m
    cairn_cli`; the python and the script of `python -S …/cairn_cli/launcher.py`. Empty for a hook not cairn's."""
    if not isinstance(hook, dict) or not isinstance(cmd := hook.get("command"), str):
        return []
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    words = [w.strip("'\"(") for part in words for w in part.split()]  # a wrapped command's words too (sh -c '…')
    for i, word in enumerate(words[:-2]):
        if words[i + 1] == "hook" and words[i + 2].rstrip(";&|)'\"") in ("prompt", "stop"):
            path = Path(word)
            if path.name == "cairn":
                return [word]
            if path.name == "cairn_cli" and i > 0 and words[i - 1] == "-m":
                return [words[i - 2] if i > 1 else "python"]
            if path.name == LAUNCHER.name and path.parent.name == "cairn_cli":
                python = next((w for w in reversed(words[:i]) if not w.startswith("-")), "python")
                return [python, word]
    return []


def _groups(hooks: dict, event: str) -> list:
    groups = hooks.get(event, [])
    if not isinstance(groups, list):
        raise InvalidInput(f'"hooks.{event}" is not a JSON array', _FIX)
    return groups


def _hooks_of(settings: dict) -> dict:
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInput('"hooks" is not a JSON object', _FIX)
    return hooks


def _is_group(group: object) -> bool:
    return isinstance(group, dict) and isinstance(group.get("hooks"), list)


def merge(settings: dict, command: str, agent: str = "claude") -> dict:
    """A copy of `settings` with cairn's hooks in it. Idempotent; a stale cairn entry is replaced in place."""
    out = copy.deepcopy(settings)
    hooks = _hooks_of(out)
    for event, [wanted_group] in hook_entries(command, agent).items():
        wanted = wanted_group["hooks"][0]
        placed, groups = False, []
        for group in _groups(hooks, event):
            if not _is_group(group) or not any(is_cairn_hook(h) for h in group["hooks"]):
                groups.append(group)
                continue
            kept = []
            for hook in group["hooks"]:
                if not is_cairn_hook(hook):
                    kept.append(hook)
                elif not placed:  # the first cairn entry becomes the wanted one; any others are duplicates
                    kept.append(dict(wanted))
                    placed = True
            if kept:
                groups.append({**group, "hooks": kept})
        if not placed:
            groups.append(copy.deepcopy(wanted_group))
        hooks[event] = groups
    out["hooks"] = hooks
    return out


def unmerge(settings: dict) -> dict:
    """A copy of `settings` without cairn's hooks; groups, events and `hooks` that this empties are dropped."""
    out = copy.deepcopy(settings)
    if "hooks" not in out:
        return out
    hooks = _hooks_of(out)
    for event, groups in list(hooks.items()):
        if not isinstance(groups, list) or not any(
            _is_group(g) and any(map(is_cairn_hook, g["hooks"])) for g in groups
        ):
            continue
        kept_groups = []
        for group in groups:
            if _is_group(group) and any(map(is_cairn_hook, group["hooks"])):
                group = {**group, "hooks": [h for h in group["hooks"] if not is_cairn_hook(h)]}
                if not group["hooks"]:
                    continue
            kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not hooks and settings["hooks"]:
        del out["hooks"]
    return out


def settings_path(where: str, cwd: Path, home: Path, agent: str = "claude") -> Path:
    """`project` -> cwd/.claude/settings.json, `user` -> home/.claude/settings.json (Codex: .codex/hooks.json, its
    user level under $CODEX_HOME when set; Gemini: .gemini/settings.json)."""
    if where not in WHERE:
        raise InvalidInput(f"unknown settings location {where!r}", "use 'project' or 'user'")
    if agent not in FILES:
        raise InvalidInput(f"unknown agent {agent!r}", f"use one of {', '.join(FILES)}")
    folder, name = FILES[agent]
    if agent == "codex" and where == "user" and os.environ.get("CODEX_HOME"):
        return Path(os.environ["CODEX_HOME"]) / name
    return (cwd if where == "project" else home) / folder / name


def load(path: Path) -> dict:
    """The settings in `path`; {} when it is missing or empty. Never guesses at a file it cannot parse."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if text.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid JSON: {exc}", f"{_FIX}; cairn will not overwrite it") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} is not a JSON object", f"{_FIX}; cairn will not overwrite it")
    return data


def render(settings: dict) -> str:
    """settings.json text: indent 2, key order preserved, trailing newline."""
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def diff(old_text: str, new_text: str, path: Path | str) -> str:
    """A unified diff between two versions of the file at `path` ('' when they are equal)."""
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=str(path), tofile=str(path)
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` atomically, keeping an existing file's mode (a new one: 0644, Claude Code's own files are not
    secret); a symlinked settings.json (dotfiles) is written through to its target, so the link survives."""
    real = os.path.realpath(path)
    atomic_write(real, text, mode=os.stat(real).st_mode & 0o7777 if os.path.exists(real) else 0o644)


@dataclass
class InstallPlan:
    path: Path
    before: str
    after: str
    changed: bool
    diff: str


def plan_install(
    where: str, command: str, cwd: Path, home: Path, remove: bool = False, agent: str = "claude"
) -> InstallPlan:
    """What installing (or, with remove, uninstalling) cairn's hooks would do to the agent's settings file."""
    path = settings_path(where, cwd, home, agent)
    settings = load(path)
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        new = unmerge(settings) if remove else merge(settings, command, agent)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", exc.hint) from None
    changed = new != settings
    after = render(new) if changed else before
    return InstallPlan(path, before, after, changed, diff(before, after, path))


def apply(plan: InstallPlan) -> None:
    """Write the plan's new text, atomically; a plan with no change writes nothing."""
    if plan.changed:
        write_atomic(plan.path, plan.after)


def default_command() -> str:
    """The running cairn as the hooks run it: this interpreter without its `site` step (`-S`) on cairn_cli's
    launcher.py, which finds cairn_cli by its own place and reads `site` only when something beyond the standard
    library is imported (the fallback, a Typer command). ~15 ms of every prompt's start with an editable install,
    site-packages' `.pth` files with any; the hook's behaviour is the same (docs/hot-path.md)."""
    return f"{shlex.quote(os.path.abspath(sys.executable))} -S {shlex.quote(str(LAUNCHER))}"
