"""Turn run_agent.py work dirs into small, scrubbed test fixtures under e2e/samples/.

    python e2e/make_samples.py --claude RUN_DIR --codex RUN_DIR --gemini RUN_DIR

Writes ``codex-rollout.jsonl`` and ``gemini-chat.jsonl`` (the files the stop payloads' ``transcript_path`` named,
two turns), with ``--gemini-two-files`` also ``gemini-chat-two-files.jsonl`` and its ``-resume-stub.jsonl`` (the
second chat file Gemini starts on ``--resume`` when the minute in its name has changed), and
``hooks/<agent>-<NN>-<event>.json`` (every hook payload as received). Paths are rewritten to ``/home/dev`` and
``/home/dev/src/webshop``, the fake API key is masked, and strings longer than ``LONG`` characters (system prompts,
skill lists) are cut to their first ``KEEP`` characters plus ``…<N chars>``; the record structure is kept whole.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from install_clis import default_root  # noqa: E402

SAMPLES = HERE / "samples"
LONG = 1500
KEEP = 300
HOME = "/home/dev"
PROJECT = "/home/dev/src/webshop"


def mangle(path: str) -> str:
    """Claude Code's project folder name for a path: every non-alphanumeric character becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def replacements(run_dir: Path) -> list[tuple[str, str]]:
    run = str(run_dir.resolve())
    project = f"{run}/project/webshop"
    pairs = [
        (project, PROJECT),
        (mangle(project), mangle(PROJECT)),
        (f"{run}/home", HOME),
        (f"{run}/hooks", f"{HOME}/e2e/hooks"),
        (run, f"{HOME}/e2e"),
        (str(HERE.parent), f"{HOME}/src/cairn"),
        (str(default_root()), f"{HOME}/.cache/cairn-e2e/npm"),
        (sys.executable, "python3"),
        ("e2e-fake-key-not-a-secret", "<fake-key>"),
    ]
    return sorted(pairs, key=lambda p: -len(p[0]))  # longest first: a prefix must not win over its extension


def scrub(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in pairs:
            value = value.replace(old, new)
        if len(value) > LONG:
            value = f"{value[:KEEP]}…<{len(value)} chars>"
        return value
    if isinstance(value, list):
        return [scrub(v, pairs) for v in value]
    if isinstance(value, dict):
        return {scrub(k, pairs): scrub(v, pairs) for k, v in value.items()}
    return value


def scrub_jsonl(source: Path, target: Path, pairs: list[tuple[str, str]]) -> int:
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    target.write_text(
        "".join(json.dumps(scrub(r, pairs), ensure_ascii=False, separators=(",", ":")) + "\n" for r in lines)
    )
    return len(lines)


def stop_transcript(run_dir: Path, stop_event: str) -> Path:
    payloads = sorted((run_dir / "hooks").glob(f"*-{stop_event}.json"))
    return Path(json.loads(payloads[-1].read_text())["transcript_path"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for agent in ("claude", "codex", "gemini"):
        parser.add_argument(f"--{agent}", type=Path, required=True, help=f"a run_agent.py work dir of {agent}")
    parser.add_argument(
        "--gemini-two-files", type=Path, help="a gemini run whose turn 2 started in a later minute than turn 1"
    )
    args = parser.parse_args(argv)
    hooks_out = SAMPLES / "hooks"
    shutil.rmtree(hooks_out, ignore_errors=True)
    hooks_out.mkdir(parents=True)
    for agent in ("claude", "codex", "gemini"):
        run_dir: Path = getattr(args, agent)
        pairs = replacements(run_dir)
        for payload in sorted((run_dir / "hooks").glob("*.json")):
            if payload.name.endswith(".env.json"):
                continue
            data = scrub(json.loads(payload.read_text()), pairs)
            (hooks_out / f"{agent}-{payload.name}").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    pairs = replacements(args.codex)
    rollout = stop_transcript(args.codex, "Stop")
    print("codex-rollout.jsonl", scrub_jsonl(rollout, SAMPLES / "codex-rollout.jsonl", pairs), "lines")
    write_gemini(args.gemini, "gemini-chat")
    if args.gemini_two_files:
        write_gemini(args.gemini_two_files, "gemini-chat-two-files")
    return 0


def write_gemini(run_dir: Path, name: str) -> None:
    """The chat file the stop payload names, and the stub ``--resume`` left beside it when the minute changed."""
    pairs = replacements(run_dir)
    chat = stop_transcript(run_dir, "AfterAgent")
    print(f"{name}.jsonl", scrub_jsonl(chat, SAMPLES / f"{name}.jsonl", pairs), "lines")
    for stub in sorted(p for p in chat.parent.glob("session-*.jsonl") if p != chat):
        print(f"{name}-resume-stub.jsonl", scrub_jsonl(stub, SAMPLES / f"{name}-resume-stub.jsonl", pairs), "lines")


if __name__ == "__main__":
    sys.exit(main())
