"""A deterministic local writer / judge for `cairn replay --backend command` in tests: reads the prompt on stdin,
answers on stdout, appends every prompt it received to $REPLAY_AGENT_LOG (one JSON line each).

- writer (the prompt asks for a [cm] block): one memory about the turn's prompt; when the rules carry arm B's
  instruction (it mentions "symptom"), the memory also names the turn's first long word in its keywords.
- judge (pairwise): REPLAY_JUDGE=b (default) prefers the memory set with keywords on every criterion, whichever
  position it is in; REPLAY_JUDGE=first always prefers the first position; REPLAY_JUDGE=junk answers prose.
- cold read: 3 with keywords, 1 without.
"""

from __future__ import annotations

import json
import os
import re
import sys

prompt = sys.stdin.read()
log = os.environ.get("REPLAY_AGENT_LOG")
if log:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"prompt": prompt}) + "\n")


def between(text: str, start: str, end: str) -> str:
    i = text.find(start)
    j = text.find(end, i + len(start))
    return text[i + len(start) : j].strip() if i >= 0 and j >= 0 else ""


if "Answer with the [cm] block" in prompt:
    turn = between(prompt, "<user-prompt>", "</user-prompt>")
    words = re.findall(r"[A-Za-z][A-Za-z_-]{5,}", turn) or ["session"]
    memory = {"content": f"In this project the user asked: {turn[:80]}", "kind": "fact", "scope": "app"}
    if "symptom" in prompt:
        memory["keywords"] = [words[0].lower(), "replay"]
    print("[cm]" + json.dumps({"m": [memory]}) + "[/cm]")
elif "Judge three criteria" in prompt:
    mode = os.environ.get("REPLAY_JUDGE", "b")
    if mode == "junk":
        print("I think both are fine, honestly.")
        sys.exit(0)
    first = between(prompt, "Written by the first writer shown", "Written by the second writer shown")
    if mode == "first":
        pick = "first"
    else:
        pick = "first" if "(keywords:" in first else "second"
    print(json.dumps({"findability": pick, "self_sufficiency": pick, "fitness": "tie", "why": "deterministic"}))
elif "read it cold" in prompt:
    print(json.dumps({"score": 3 if 'keywords=""' not in prompt else 1, "why": "deterministic"}))
else:
    print("unknown prompt", file=sys.stderr)
    sys.exit(4)
