"""The agents whose hooks cairn serves, and what differs between them (docs/agents.md): the event names each sends,
where its Stop payload carries the response, and how its prompt hook's output must look to reach the model.
Claude Code and Codex CLI inject a hook's plain stdout (Codex as a developer message); Gemini CLI only injects the
`additionalContext` of a JSON answer (plain stdout is shown to the user) and escapes its `<` and `>`.
Stdlib only: the prompt hook's hot path."""

from __future__ import annotations

import json

CLAUDE, CODEX, GEMINI = "claude", "codex", "gemini"
AGENTS = (CLAUDE, CODEX, GEMINI)
PROMPT, STOP = "prompt", "stop"

# (agent, hook) -> the event name the agent sends
EVENTS = {
    (CLAUDE, PROMPT): "UserPromptSubmit",
    (CLAUDE, STOP): "Stop",
    (CODEX, PROMPT): "UserPromptSubmit",
    (CODEX, STOP): "Stop",
    (GEMINI, PROMPT): "BeforeAgent",
    (GEMINI, STOP): "AfterAgent",
}
# the field of a Stop payload that holds the agent's last response
RESPONSE_FIELD = {CLAUDE: "last_assistant_message", CODEX: "last_assistant_message", GEMINI: "prompt_response"}


def hook_of(event: str) -> str | None:
    """`prompt` or `stop` for an event name any agent sends; None for one no agent sends to cairn."""
    return next((hook for (_, hook), name in EVENTS.items() if name == event), None)


def detect(data: dict, event: str | None) -> str:
    """The agent that sent a payload: Gemini's events are its own, Codex adds `turn_id`, else Claude Code."""
    if event in (EVENTS[(GEMINI, PROMPT)], EVENTS[(GEMINI, STOP)]) or "prompt_response" in data:
        return GEMINI
    if "turn_id" in data:
        return CODEX
    return CLAUDE


def prompt_output(agent: str, injection: str) -> str:
    """What the prompt hook prints so that `injection` reaches the model: Gemini's JSON, else the text itself."""
    if agent != GEMINI:
        return injection
    answer = {"hookSpecificOutput": {"hookEventName": EVENTS[(GEMINI, PROMPT)], "additionalContext": injection}}
    return json.dumps(answer, ensure_ascii=False)
