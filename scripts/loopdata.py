"""LoCoMo dev as Claude Code sessions, for the loop benchmark (scripts/bench_loop.py), read in place from
../shared/data (never copied). One conversation = one project (cwd `/locomo/<sample_id>`, so the hooks' scope is
the sample id); its per-session observations are the memory store; its questions (categories 1-4) are the user's
prompts, in the dataset's order, cut into Claude Code sessions of `--session-size` prompts. A memory is relevant
to a question when its turn ids overlap the question's evidence (the oracle).

The transcript is written the way Claude Code writes `~/.claude/projects/<slug>/<session>.jsonl` (see
../shared/data/claude_code/spotter/): a `type:"user"` line with the typed prompt as a plain string, then the reply
as `type:"assistant"` lines sharing one `message.id`, one content block each, every line with uuid/parentUuid,
sessionId, cwd, version and timestamp.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import locomo

NAMESPACE = uuid.UUID("6b0c1f53-5a2e-4c4e-9a57-3c2d6e0e1f13")
CLAUDE_VERSION = "2.1.39"


def use_home(home: Path) -> None:
    """Point this process's cairn at `home` (a fresh CAIRN_HOME) with the bundled embedding model."""
    from cairn_cli import db

    os.environ["CAIRN_HOME"] = str(home)
    os.environ["CAIRN_EMBED_MODEL"] = "all-MiniLM-L6-v2"
    for name in ("CAIRN_DB_URL", "CAIRN_EPHEMERAL_DB_URL"):
        os.environ.pop(name, None)
    db.close_all()


def dia_ids(raw) -> set[str]:
    refs = raw if isinstance(raw, list) else [raw]
    return {f"D{a}:{int(b)}" for r in refs for a, b in locomo.DIA_ID.findall(str(r))}


@dataclass
class Question:
    conv: str
    index: int  # position among the conversation's prompts
    text: str
    answer: str
    evidence: set[str]
    category: int


@dataclass
class Conversation:
    sample_id: str
    observations: list[tuple[str, set[str]]]  # (fact text, the turn ids it stands for)
    questions: list[Question]

    @property
    def cwd(self) -> str:
        return f"/locomo/{self.sample_id}"

    def sessions(self, size: int) -> list[tuple[str, list[Question]]]:
        """(session id, its prompts) in order: consecutive questions, `size` a session."""
        out = []
        for start in range(0, len(self.questions), size):
            sid = str(uuid.uuid5(NAMESPACE, f"{self.sample_id}/{start // size}/{size}"))
            out.append((sid, self.questions[start : start + size]))
        return out


def conversations() -> list[Conversation]:
    out = []
    for conv in locomo.conversations():
        observations: dict[str, set[str]] = {}
        for _, by_speaker in sorted(conv["observation"].items()):
            for facts in by_speaker.values():
                for text, ref in facts:
                    text = str(text).strip()
                    if text:
                        observations.setdefault(text, set()).update(dia_ids(ref))
        questions = []
        for q in conv["qa"]:
            if q.get("category") not in locomo.CATEGORIES:
                continue
            answer = q.get("answer")
            questions.append(
                Question(
                    conv["sample_id"],
                    len(questions),
                    str(q["question"]).strip(),
                    "I could not find that." if answer is None else str(answer),
                    dia_ids(q.get("evidence") or []),
                    int(q["category"]),
                )
            )
        out.append(Conversation(conv["sample_id"], list(observations.items()), questions))
    return out


def memory_lines(conv: Conversation) -> list[dict]:
    """The conversation's observations as `cairn memory import` lines (scope = the hooks' scope for its cwd)."""
    return [{"content": text, "scope": conv.sample_id, "kind": "fact"} for text, _ in conv.observations]


@dataclass
class TranscriptWriter:
    """Appends a session's lines in Claude Code's JSONL shape, as the session goes."""

    path: Path
    session_id: str
    cwd: str
    clock: dt.datetime = field(default_factory=lambda: dt.datetime(2026, 11, 2, 9, 0, 0))
    _parent: str | None = None
    _n: int = 0

    def _stamp(self) -> str:
        self.clock += dt.timedelta(seconds=7)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def _line(self, entry: dict) -> None:
        self._n += 1
        line_uuid = str(uuid.uuid5(NAMESPACE, f"{self.session_id}/{self._n}"))
        full = {
            "parentUuid": self._parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": CLAUDE_VERSION,
            "gitBranch": "main",
            **entry,
            "uuid": line_uuid,
            "timestamp": self._stamp(),
        }
        self._parent = line_uuid
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(full, ensure_ascii=False) + "\n")

    def user(self, prompt: str) -> None:
        self._line({"type": "user", "message": {"role": "user", "content": prompt}, "permissionMode": "default"})

    def assistant(self, text_blocks: list[str]) -> None:
        """One reply: one `type:"assistant"` line per content block, all sharing `message.id`."""
        message_id = "msg_" + uuid.uuid5(NAMESPACE, f"{self.session_id}/msg/{self._n}").hex[:24]
        for block in text_blocks:
            self._line(
                {
                    "type": "assistant",
                    "message": {
                        "model": "claude-opus-4-6",
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "text", "text": block}],
                        "stop_reason": None,
                        "stop_sequence": None,
                    },
                    "requestId": "req_" + message_id[4:],
                }
            )


def transcript_path(root: Path, conv: Conversation, session_id: str) -> Path:
    slug = conv.cwd.replace("/", "-")
    return root / ".claude" / "projects" / slug / f"{session_id}.jsonl"


def response_blocks(question: Question, grades: dict[int, int]) -> list[str]:
    """The agent's reply: the gold answer, then its [cm] block grading what it was shown."""
    rg = [f"{mid}:{g}" for mid, g in grades.items()]
    return [question.answer, "[cm]\n" + json.dumps({"rg": rg}) + "\n[/cm]"]
