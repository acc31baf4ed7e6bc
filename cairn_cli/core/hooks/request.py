"""`PromptRequest`: one prompt turn to rank, as `cairn rank` and `cairn hook prompt` send it to the daemon or to the
in-process fallback (a dict on the socket: `as_dict` / `from_dict`). Stdlib only, a slotted class and no
dataclasses (their import costs 14 ms): this is the prompt hook's hot path."""

from __future__ import annotations

from cairn_cli.core.ids import clean_text, session_key
from cairn_cli.core.private import strip_private


class PromptRequest:
    __slots__ = (
        "agent",
        "commit_deadline",
        "hook",
        "k",
        "layer",
        "log",
        "prompt",
        "scope",
        "session_id",
        "strict_scope",
        "transcript",
        "turn",
        "with_rules",
    )

    def __init__(
        self,
        prompt: str,
        session_id: str = "cli",
        scope: str | None = None,
        transcript: str | None = None,
        k: int | None = None,
        layer: str = "prompt",
        turn: int | None = None,
        log: bool = True,
        commit_deadline: float | None = None,  # epoch seconds: past it, log nothing (the caller has fallen back)
        hook: dict | None = None,  # set by `cairn hook prompt`: recorded in hook_state; a bad transcript is a note
        strict_scope: bool = True,  # False: an unknown scope ranks the global memories (a new project), not an error
        with_rules: bool = False,  # prepend the live generation rules to the block (what the hook prints)
        agent: str | None = None,  # the agent the deliveries go to (core/hooks/agents.py, or "mcp"); None: unknown
    ):
        self.prompt, self.session_id, self.scope, self.transcript = prompt, session_id, scope, transcript
        self.k, self.layer, self.turn, self.log = k, layer, turn, log
        self.commit_deadline, self.hook = commit_deadline, hook
        self.strict_scope, self.with_rules, self.agent = strict_scope, with_rules, agent

    @classmethod
    def from_cli(
        cls,
        prompt: str,
        *,
        session: str,
        scope: str | None,
        transcript: str | None,
        k: int | None,
        layer: str,
        turn: int | None,
        log: bool,
    ) -> PromptRequest:
        """`cairn rank`'s options (entry.py's and Typer's alike), their text cleaned (`<private>` spans removed
        before the prompt goes to the daemon; its secrets are redacted where the window is built) and the session id
        as stored."""
        return cls(
            strip_private(clean_text(prompt)),
            session_key(session),
            None if scope is None else clean_text(scope),
            transcript,
            k,
            layer,
            turn,
            log,
        )

    @classmethod
    def from_dict(cls, fields: dict) -> PromptRequest:
        """What came over the socket (an unknown field is a TypeError, as a wrong keyword is)."""
        return cls(**fields)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return f"PromptRequest({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"
