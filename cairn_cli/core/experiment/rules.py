"""The generation rules the agent is given: how to write memories (two altitudes, no in-session repeats) and how
to grade what cairn injected. Versioned: the live version and text are machine-managed state (the A/B promotion
rewrites them); the shipped text and version are the defaults until then."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cairn_cli.config import Settings
from cairn_cli.core.store import state
from cairn_cli.core.text import escape

SHIPPED_VERSION = "gen-1"
VERSION_KEY = "generation_prompt_version"
RULES_KEY = "generation_rules"
RULES_TAG = "cairn-rules"


@dataclass(frozen=True)
class Rules:
    version: str
    text: str


@lru_cache(maxsize=1)
def shipped_text() -> str:
    # beside the package's modules (importlib.resources would cost the hot path ~3 ms of imports for the same file)
    return (Path(__file__).parents[2] / "data" / "generation_rules.md").read_text(encoding="utf-8").strip()


KEYS = (VERSION_KEY, RULES_KEY)  # the machine-managed state the live rules are read from


def live(settings: Settings) -> Rules:
    """The live generation rules: machine-managed state, else what cairn ships."""
    return live_from(state.get_many(KEYS, settings))


def live_from(values: dict) -> Rules:
    """The live rules of machine-managed `values` (state.get_many of at least KEYS)."""
    return Rules(str(values.get(VERSION_KEY, SHIPPED_VERSION)), str(values.get(RULES_KEY) or shipped_text()))


def render(rules: Rules, scope: str, extra: str | None = None) -> str:
    """The rules block printed before the memories; `extra` (the A/B arm B instruction) comes last."""
    body = rules.text.replace("SCOPE", scope)
    if extra:
        body += f"\n- {extra.strip()}"
    return f'<{RULES_TAG} version="{escape(rules.version)}">\n{body}\n</{RULES_TAG}>'
