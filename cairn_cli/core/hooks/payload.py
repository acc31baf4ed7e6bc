"""Claude Code hook payloads (../shared/data/claude_code/HOOKS_SCHEMA.md): parsing, and the UserPromptSubmit
payload turned into a ranking request (scope = CAIRN_HOOK_SCOPE or the name of the hook's cwd; a new project ranks
the global memories; a missing transcript is a note, not an error; the turn is recorded in hook_state).
Stdlib only, no dataclasses (their import costs 14 ms): this is the prompt hook's hot path. The Stop side is
core/hooks/stop.py."""

from __future__ import annotations

import os

from cairn_cli import wire
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ids import GLOBAL_SCOPE, clean_text, session_key
from cairn_cli.core.private import strip_private
from cairn_cli.errors import InvalidInput

PROMPT_EVENT, STOP_EVENT = "UserPromptSubmit", "Stop"
_SCOPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


class HookPayload:
    """What an agent sends on stdin (the fields cairn reads; unknown keys are ignored), as Claude Code names them:
    a Gemini CLI response (`prompt_response`) is read into `last_assistant_message`; `agent` is the agent that sent
    it (core/hooks/agents.py), `turn_id` Codex CLI's own turn id."""

    FIELDS = (
        "transcript_path",
        "cwd",
        "prompt",
        "agent_id",
        "agent_type",
        "last_assistant_message",
        "turn_id",
        "agent",
    )
    __slots__ = ("event", "session_id", "stop_hook_active", *FIELDS)
    transcript_path: str | None
    cwd: str | None
    prompt: str | None
    agent_id: str | None
    agent_type: str | None
    last_assistant_message: str | None
    turn_id: str | None
    agent: str | None

    def __init__(self, event: str, session_id: str, stop_hook_active: bool = False, **fields: str | None):
        self.event, self.session_id, self.stop_hook_active = event, session_id, stop_hook_active
        for name in self.FIELDS:
            setattr(self, name, fields.get(name))

    @property
    def is_subagent(self) -> bool:
        return bool(self.agent_id)


def _str(data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"hook payload field {key!r} must be a string", "check the hook's stdin JSON")
    return None if value is None else clean_text(value)


def parse_payload(raw: bytes | str, event: str) -> HookPayload:
    """The hook's stdin JSON, from any agent cairn serves (`event`: the Claude Code name of the hook, whose
    counterpart Codex and Gemini CLI send too); unknown keys are ignored, bytes that are not UTF-8 are replaced."""
    from cairn_cli.core.hooks import agents

    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if not text.strip():
        raise InvalidInput("the hook's stdin is empty", "the agent sends the hook payload as JSON on stdin")
    try:
        data = wire.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(
            f"the hook's stdin is not JSON ({str(exc)[:80]})", "the agent sends one JSON object"
        ) from None
    if not isinstance(data, dict):
        raise InvalidInput("the hook's stdin is not a JSON object", "the agent sends one JSON object")
    hook = agents.hook_of(event)
    named = data.get("hook_event_name") or data.get("event")
    if named is not None and agents.hook_of(str(named)) != hook:
        right = agents.hook_of(str(named))
        raise InvalidInput(
            f"this is cairn's {hook} hook but the payload is for {str(named)[:80]!r}",
            f"register `cairn hook {right}` for {named}" if right else f"register cairn's hooks for {event}",
        )
    agent = agents.detect(data, None if named is None else str(named))
    session = _str(data, "session_id")
    if not session or not session.strip():
        raise InvalidInput("the hook payload has no session_id", "check the hook's stdin JSON")
    fields = {name: _str(data, name) for name in HookPayload.FIELDS if name != "agent"}
    fields["last_assistant_message"] = agents.response_of(agent, _str(data, agents.RESPONSE_FIELD[agent]))
    payload = HookPayload(event, session_key(session.strip()), bool(data.get("stop_hook_active")), **fields)
    payload.agent = agent
    # <private> spans never leave this process; the prompt's secrets are redacted where its window is built (the
    # warm daemon, or the fallback), before it is ranked or logged; a response is scrubbed whole (docs/privacy.md)
    if payload.prompt is not None:
        payload.prompt = strip_private(payload.prompt)
    if payload.last_assistant_message is not None:
        from cairn_cli.core.redact import scrub

        payload.last_assistant_message = scrub(payload.last_assistant_message)
    if hook == agents.PROMPT and (payload.prompt is None or not payload.prompt.strip()):
        raise InvalidInput(
            f"the {named or event} payload has no prompt (or only a private span)", "check the hook's stdin JSON"
        )
    return payload


def hook_scope(payload: HookPayload, scope_setting: str) -> str:
    """CAIRN_HOOK_SCOPE, else the name of the directory Claude Code runs in, else global."""
    if scope_setting:
        return scope_setting
    name = _scope_name(os.path.basename(os.path.normpath(payload.cwd or ""))).strip("-.")
    return name[:200] or GLOBAL_SCOPE


def _scope_name(text: str) -> str:
    """`text` with every run of characters outside [A-Za-z0-9._-] made one "-" (no `re`: the hot path)."""
    out: list[str] = []
    in_run = False
    for ch in text:
        if ch in _SCOPE_CHARS:
            out.append(ch)
            in_run = False
        elif not in_run:
            out.append("-")
            in_run = True
    return "".join(out)


def prompt_request(payload: HookPayload, scope_setting: str) -> PromptRequest:
    """The ranking request of a UserPromptSubmit payload (stdlib only: the prompt hook's hot path)."""
    transcript = payload.transcript_path
    if transcript:
        transcript = os.path.expanduser(transcript)
    return PromptRequest(
        payload.prompt or "",
        payload.session_id,
        scope=hook_scope(payload, scope_setting),
        transcript=transcript,
        layer="subagent" if payload.is_subagent else "prompt",
        strict_scope=False,
        with_rules=True,
        agent=payload.agent,
        hook={
            "transcript_path": transcript,
            "agent_id": payload.agent_id,
            "is_subagent": payload.is_subagent,
            "agent_type": payload.agent_type,
            "cwd": payload.cwd,
            "agent": payload.agent,
            "turn_id": payload.turn_id,
        },
    )
