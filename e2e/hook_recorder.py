"""A stand-in hook for the e2e runs: save the payload an agent CLI sends, print a marker and a fake injection block.

    python e2e/hook_recorder.py --agent codex --out DIR < payload.json

Writes ``DIR/<NN>-<event>.json`` (the payload as received) and ``DIR/<NN>-<event>.env.json`` (the agent's
environment variables the hook saw, its cwd and argv). On a prompt event (UserPromptSubmit, BeforeAgent) it prints
``HOOK-MARKER-<agent>-<event>-<n>`` and a ``<cairn-memories>`` block with ids ``<n>1``, ``<n>2``, ``<n>3``, so
the fake model's grades show which turn's block it read; for Gemini wrapped in the JSON that reaches the model
(``hookSpecificOutput.additionalContext``). Stop events print nothing. Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

PROMPT_EVENTS = {"UserPromptSubmit", "BeforeAgent"}
ENV_PREFIXES = ("CLAUDE", "CODEX", "GEMINI", "HOME", "PWD")
SECRETISH = re.compile("KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def injection(agent: str, event: str, turn: int, session: str) -> str:
    marker = f"HOOK-MARKER-{agent}-{event}-{turn}"
    memories = "\n".join(
        f'<memory id="{turn}{k}" reliability="0.75" kind="fact" scope="webshop">recorder memory {turn}{k}</memory>'
        for k in (1, 2, 3)
    )
    return f'{marker}\n<cairn-memories session="{session}" turn="{turn}" context="e2e">\n{memories}\n</cairn-memories>'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    raw = sys.stdin.read()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = {"unparsed_stdin": raw}
    event = str(payload.get("hook_event_name") or "unknown")
    args.out.mkdir(parents=True, exist_ok=True)
    seq = len(list(args.out.glob("*.env.json"))) + 1
    turn = len(list(args.out.glob(f"*-{event}.json"))) + 1
    (args.out / f"{seq:02d}-{event}.json").write_text(json.dumps(payload, indent=1) + "\n")
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) and not SECRETISH.search(k)}
    transcript = payload.get("transcript_path")
    meta = {
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "env": env,
        "started": started,
        "turn": turn,
        "transcript_exists": bool(transcript) and Path(transcript).exists(),
    }
    (args.out / f"{seq:02d}-{event}.env.json").write_text(json.dumps(meta, indent=1) + "\n")
    if event in PROMPT_EVENTS:
        text = injection(args.agent, event, turn, str(payload.get("session_id", "")))
        if args.agent == "gemini":
            print(json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}))
        else:
            print(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # a hook must never break the agent's session
        print(f"hook_recorder: {exc!r}", file=sys.stderr)
        sys.exit(0)
