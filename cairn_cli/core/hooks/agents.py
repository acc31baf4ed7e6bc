"""The agents whose hooks cairn serves, and what differs between them (docs/agents.md): the event names each sends,
where its Stop payload carries the response, and how its prompt hook's output must look to reach the model.
Claude Code and Codex CLI inject a hook's plain stdout (Codex as a developer message); Gemini CLI only injects the
`additionalContext` of a JSON answer (plain stdout is shown to the user) and escapes its `<` and `>`.
Stdlib only: the prompt hook's hot path."""

from __future__ import annotations

from cairn_cli import wire

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


# the shortest repeated tail taken for Gemini's doubled response (a shorter one could be the answer's own words)
_MIN_REPEAT = 32


def response_of(agent: str, text: str | None) -> str | None:
    """The agent's last response as the model wrote it (Gemini CLI's `prompt_response` undoubled)."""
    return undouble_gemini(text) if agent == GEMINI and text else text


def undouble_gemini(text: str) -> str:
    """Gemini CLI (0.61) hands AfterAgent a streamed answer twice: the whole answer, a space, then the stream's
    pieces after the first joined by spaces (its turn text joins every streamed response with " " after the first
    has grown into the whole answer). The `[cm]` block read from the end would be the copy with spaces cut into
    its words. The answer is the prefix whose non-space characters the rest repeats, from a point past its start,
    with more spaces; a text without that shape is returned as it is (so is an answer streamed in two pieces,
    whose second copy is unbroken)."""
    letters = [i for i, ch in enumerate(text) if ch != " "]
    squeezed = "".join(text[i] for i in letters)
    n, end = len(squeezed), len(text.rstrip(" "))
    # a split at a space text[i]: A = text[:i] holds m letters, B = text[i+1:] the other n - m
    m = 0
    for i, ch in enumerate(text):
        if ch != " ":
            m += 1
            continue
        tail = n - m
        if tail >= m:  # B is at least as long as A: the split is too early
            continue
        if tail < _MIN_REPEAT:
            break
        start = m - tail
        # B repeats the end of A, with more spaces than that stretch of A (the joins add them; a text that merely
        # repeats itself, "ab ab ab", has as many)
        if (
            squeezed[start] == squeezed[m]
            and squeezed.startswith(squeezed[m:], start)
            and end - i - 1 - tail > i - letters[start] - tail
        ):
            return text[:i]
    return text


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
    return wire.dumps(answer, ensure_ascii=False)
