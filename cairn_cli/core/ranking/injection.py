"""The injection block printed for the agent: the memories, each with its id and reliability."""

from __future__ import annotations

from cairn_cli.core.ranking.context import INJECTION_TAG
from cairn_cli.core.text import escape


def reliability(confidence: float) -> str:
    return f"{confidence:.2f}"


def format_block(items: list[dict], *, session: str, turn: int, context_key: str, max_chars: int) -> str:
    """`items` carry id, kind, scope, confidence, content. Trailing memories are dropped to respect max_chars."""
    if not items:
        return ""
    head = f'<{INJECTION_TAG} session="{escape(session)}" turn="{turn}" context="{context_key}">'
    tail = f"</{INJECTION_TAG}>"
    lines = [head]
    size = len(head) + len(tail) + 2
    for item in items:
        line = (
            f'<memory id="{item["id"]}" reliability="{reliability(item["confidence"])}" '
            f'kind="{escape(item["kind"])}" scope="{escape(item["scope"])}">{escape(item["content"], quote=False)}'
            f"</memory>"
        )
        if size + len(line) + 1 > max_chars:
            break
        lines.append(line)
        size += len(line) + 1
    lines.append(tail)
    return "\n".join(lines) if len(lines) > 2 else ""
