"""Read an agent's transcript into messages and turns: Claude Code's (`~/.claude/projects/<slug>/<session>.jsonl`),
Codex CLI's rollout (`~/.codex/sessions/…/rollout-*.jsonl`: `response_item` messages; the developer messages, which
hold hook output, and the environment context are not the user's words) and Gemini CLI's chat log
(`~/.gemini/tmp/<project>/chats/*.jsonl`: `user` / `gemini` lines, `$set` lines that replace the message list;
a user line's `displayContent` is what was typed, without the `<hook_context>` Gemini appended).

On the Stop hook's hot path: stdlib and orjson only, no printing, and a bad line is recorded, never fatal.
Claude Code writes one assistant reply as several `type:"assistant"` lines sharing `message.id` (one content
block each, sometimes with tool results in between); they are merged into one `Message`. A typed prompt is a
`type:"user"` line whose content is the user's text; meta lines, slash-command echoes, interruption markers,
compaction summaries, task notifications and tool results are kept but given their own `kind`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import orjson

TURN_STARTS = ("prompt", "task_notification")
_COMMAND_TAGS = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
)
_INTERRUPTED = "[Request interrupted"
_TASK_NOTIFICATION = "<task-notification>"


@dataclass(frozen=True)
class Message:
    """One user line, or one assistant reply merged from all the lines sharing its `message.id`."""

    role: str  # "user" | "assistant"
    text: str  # assistant: non-blank text blocks joined with "\n"; user: the prompt text ("" for tool results)
    kind: str  # assistant: "response"; user: "prompt", "meta", "command", "interrupted", "compact_summary",
    #            "task_notification" or "tool_result"
    message_id: str  # assistant: message.id; user: the line uuid
    uuid: str | None  # uuid of the first line
    timestamp: str | None
    is_sidechain: bool
    agent_id: str | None
    line_no: int  # 0-based index of the first line (relative to the tail when read with max_bytes)


@dataclass
class Turn:
    """A typed prompt (or task notification) and the assistant replies up to the next one."""

    prompt: Message
    responses: list[Message] = field(default_factory=list)
    interrupted: bool = False

    @property
    def source(self) -> str:
        """ "prompt" or "task_notification": what started the turn."""
        return self.prompt.kind


@dataclass
class Transcript:
    path: Path
    messages: list[Message] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "line N: why", N 1-based as in an editor

    def _chain(self, include_sidechain: bool) -> list[Message]:
        return [m for m in self.messages if include_sidechain or not m.is_sidechain]

    def typed_prompts(self, *, include_sidechain: bool = False) -> list[Message]:
        """The user's typed prompts, main chain only unless `include_sidechain`."""
        return [m for m in self._chain(include_sidechain) if m.kind == "prompt"]

    def turns(self, *, include_sidechain: bool = False) -> list[Turn]:
        """Split the conversation at each typed prompt or task notification; earlier messages are dropped."""
        turns: list[Turn] = []
        for m in self._chain(include_sidechain):
            if m.kind in TURN_STARTS:
                turns.append(Turn(m))
            elif not turns:
                continue
            elif m.role == "assistant":
                turns[-1].responses.append(m)
            elif m.kind == "interrupted":
                turns[-1].interrupted = True
        return turns

    def last_response(self) -> str | None:
        """The agent's response to the last turn of the main chain: the text of all its replies after the last typed
        prompt, joined (tool-only replies have none); None when there is no text yet."""
        turns = self.turns()
        texts = [m.text for m in turns[-1].responses if m.text] if turns else []
        return "\n".join(texts) if texts else None


class NotARegularFile(OSError):
    """The transcript path is a FIFO, a device or a socket: reading it could block forever or never end."""


def read_transcript(path: str | os.PathLike[str], *, max_bytes: int | None = None, raw: bool = False) -> Transcript:
    """Parse a transcript; with `max_bytes`, only its last `max_bytes` bytes (the first partial line dropped).
    Every message's text is scrubbed (secrets redacted, `<private>` spans removed: core/redact.py) unless
    `raw`: then the caller scrubs what it keeps (the prompt hook's context window keeps a few turns of many).

    Only a regular file is read, and never by blocking: it is opened non-blocking and checked first, so a FIFO or
    /dev/zero named as a transcript is refused at once (`NotARegularFile`) instead of hanging the hook or filling
    memory. An unreadable path raises `FileNotFoundError`, `PermissionError` or `IsADirectoryError`.
    """
    transcript = Transcript(Path(path))
    fd = os.open(transcript.path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{path} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"{path} is not a regular file")
        size = st.st_size
        tail = max_bytes is not None and max_bytes < size
        # In tail mode start one byte early: if that byte ends a line, the first line read is whole.
        start = size - max(max_bytes or 0, 0) - 1 if tail else 0
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    if tail:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""

    replies: dict[str, tuple[int, list[str]]] = {}  # message.id -> (index in messages, text blocks)
    for n, line in enumerate(data.decode("utf-8", errors="replace").split("\n")):
        if not line.strip():
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            transcript.errors.append(f"line {n + 1}: not valid JSON")
            continue
        if not isinstance(entry, dict):
            transcript.errors.append(f"line {n + 1}: not a JSON object")
            continue
        if "message" not in entry and _other_agents(entry, n, transcript):
            continue
        role = entry.get("type")
        if role not in ("user", "assistant"):
            continue  # progress, system, file-history-snapshot, queue-operation, summary, ...
        message = entry.get("message")
        if not isinstance(message, dict):
            message = {}
        content = message.get("content")
        if not isinstance(content, (str, list)):
            transcript.errors.append(f"line {n + 1}: {role} line without message content")
            continue
        if role == "user":
            kind, text = _user_kind(entry, content)
            transcript.messages.append(_message(entry, role, text, kind, entry.get("uuid") or f"line-{n}", n))
            continue
        message_id = next((v for v in (message.get("id"), entry.get("uuid")) if isinstance(v, str) and v), f"line-{n}")
        if message_id in replies:
            replies[message_id][1].extend(_texts(content))
            continue
        replies[message_id] = (len(transcript.messages), _texts(content))
        transcript.messages.append(_message(entry, role, "", "response", message_id, n))

    for index, texts in replies.values():
        transcript.messages[index] = dataclasses.replace(transcript.messages[index], text="\n".join(texts))
    if not raw:
        from cairn_cli.core.redact import scrub

        transcript.messages = [dataclasses.replace(m, text=scrub(m.text)) if m.text else m for m in transcript.messages]
    return transcript


_META_PREFIXES = ("<environment_context>", "<user_instructions>", "<session_context>", "<skills_instructions>")


def _other_agents(entry: dict, n: int, transcript: Transcript) -> bool:
    """A Codex rollout or Gemini chat line, read into `transcript`; False for a line of neither (Claude Code's)."""
    payload = entry.get("payload")
    if entry.get("type") == "response_item" and isinstance(payload, dict):  # Codex
        if payload.get("type") == "message" and payload.get("role") in ("user", "assistant"):
            texts = [c.get("text") for c in payload.get("content") or [] if isinstance(c, dict)]
            text = "\n".join(t for t in texts if isinstance(t, str) and t.strip())
            role = payload["role"]
            kind = (
                "response" if role == "assistant" else "meta" if text.lstrip().startswith(_META_PREFIXES) else "prompt"
            )
            given = payload.get("id")
            message_id = given if isinstance(given, str) else f"line-{n}"
            transcript.messages.append(_message(entry, role, text, kind, message_id, n))
        return True
    if isinstance(entry.get("$set"), dict):  # Gemini: a patch; `messages` replaces the list
        listed = entry["$set"].get("messages")
        if isinstance(listed, list):
            transcript.messages = [m for m in (_gemini(x, n) for x in listed if isinstance(x, dict)) if m]
        return True
    if entry.get("type") in ("user", "gemini") and "content" in entry:
        message = _gemini(entry, n)
        if message is not None:
            transcript.messages.append(message)
        return True
    return "sessionId" in entry and "projectHash" in entry  # Gemini's header line


def _gemini(entry: dict, n: int) -> Message | None:
    """One Gemini chat message: a user's typed text (its `displayContent`: without the hook context) or a reply."""
    role = "assistant" if entry.get("type") == "gemini" else "user" if entry.get("type") == "user" else None
    if role is None:
        return None
    content = entry.get("displayContent") if role == "user" and entry.get("displayContent") else entry.get("content")
    if isinstance(content, str):
        text = content
    else:
        parts = [c.get("text") for c in content or [] if isinstance(c, dict)]
        text = "\n".join(t for t in parts if isinstance(t, str) and not t.startswith("<hook_context>"))
    kind = "response" if role == "assistant" else "meta" if text.lstrip().startswith(_META_PREFIXES) else "prompt"
    given = entry.get("id")
    return _message(entry, role, text, kind, given if isinstance(given, str) else f"line-{n}", n)


def _message(entry: dict, role: str, text: str, kind: str, message_id: str, line_no: int) -> Message:
    agent_id = entry.get("agentId")
    return Message(
        role=role,
        text=text,
        kind=kind,
        message_id=message_id,
        uuid=entry.get("uuid"),
        timestamp=entry.get("timestamp"),
        is_sidechain=bool(entry.get("isSidechain")),
        agent_id=agent_id if isinstance(agent_id, str) else None,
        line_no=line_no,
    )


def _blocks(content: str | list, block_type: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if block_type == "text" else []
    return [b for b in content if isinstance(b, dict) and b.get("type") == block_type]


def _texts(content: str | list) -> list[str]:
    """The non-blank `text` blocks (a string content is one block)."""
    texts = (b.get("text") for b in _blocks(content, "text"))
    return [t for t in texts if isinstance(t, str) and t.strip()]


def _user_kind(entry: dict, content: str | list) -> tuple[str, str]:
    """Classify a user line and return (kind, text)."""
    if _blocks(content, "tool_result"):
        return "tool_result", ""
    text = content if isinstance(content, str) else "\n".join(_texts(content))
    head = text.lstrip()
    if entry.get("isCompactSummary"):
        return "compact_summary", text
    if entry.get("isMeta"):
        return "meta", text
    if head.startswith(_INTERRUPTED):
        return "interrupted", text
    if head.startswith(_TASK_NOTIFICATION):
        return "task_notification", text
    if head.startswith(_COMMAND_TAGS):
        return "command", text
    return "prompt", text
