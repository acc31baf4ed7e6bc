"""Install the three agent CLIs at pinned versions from npm into a cache folder.

Each CLI gets its own npm prefix, ``<root>/<name>-<version>/``, so a version bump installs beside the old one and
an installed pin is recognised by reading its ``package.json``. npm's own download cache is kept under
``<root>/_npm-cache`` so a warm run needs no download at all.

    python e2e/install_clis.py                      # root: $CAIRN_E2E_NPM or ~/.cache/cairn-e2e/npm
    python e2e/install_clis.py --root /tmp/npm claude codex
    python e2e/install_clis.py --json                # one line of JSON: the binaries and the timings

Exit 1 when npm is missing or an install fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# the cache beside the user's others: ${XDG_CACHE_HOME:-~/.cache}/cairn-e2e/npm (run dirs go beside it)
DEFAULT_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn-e2e" / "npm"
ROOT_ENV = "CAIRN_E2E_NPM"


@dataclass(frozen=True)
class Pin:
    agent: str
    package: str
    version: str
    binary: str  # the name under node_modules/.bin


# The versions issue #29 was written against; all three exist on the registry.
PINS: dict[str, Pin] = {
    "claude": Pin("claude", "@anthropic-ai/claude-code", "2.1.328", "claude"),
    "codex": Pin("codex", "@openai/codex", "0.169.0", "codex"),
    "gemini": Pin("gemini", "@google/gemini-cli", "0.61.0", "gemini"),
}


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def prefix_of(pin: Pin, root: Path) -> Path:
    return root / f"{pin.package.rsplit('/', 1)[-1]}-{pin.version}"


def bin_path(agent: str, root: Path | None = None) -> Path:
    pin = PINS[agent]
    return prefix_of(pin, root or default_root()) / "node_modules" / ".bin" / pin.binary


def installed_version(pin: Pin, root: Path) -> str | None:
    manifest = prefix_of(pin, root) / "node_modules" / pin.package / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def install(pin: Pin, root: Path) -> dict:
    """Install one pin unless it is already there; return what was done and how long it took."""
    started = time.monotonic()
    binary = bin_path(pin.agent, root)
    if installed_version(pin, root) == pin.version and binary.exists():
        return {"agent": pin.agent, "version": pin.version, "action": "cached", "seconds": 0.0, "bin": str(binary)}
    prefix = prefix_of(pin, root)
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [
        "npm",
        "install",
        "--prefix",
        str(prefix),
        "--cache",
        str(root / "_npm-cache"),
        "--no-audit",
        "--no-fund",
        "--no-save",
        "--loglevel=error",
        f"{pin.package}@{pin.version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = round(time.monotonic() - started, 1)
    if proc.returncode != 0 or installed_version(pin, root) != pin.version or not binary.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"npm install {pin.package}@{pin.version} failed after {seconds}s: " + " | ".join(tail))
    return {"agent": pin.agent, "version": pin.version, "action": "installed", "seconds": seconds, "bin": str(binary)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="*", metavar="AGENT", help=f"any of {', '.join(PINS)} (default: all)")
    parser.add_argument("--root", type=Path, default=None, help=f"cache folder (default ${ROOT_ENV} or {DEFAULT_ROOT})")
    parser.add_argument("--json", action="store_true", help="print one line of JSON instead of text")
    args = parser.parse_args(argv)
    root = (args.root or default_root()).resolve()
    unknown = [a for a in args.agents if a not in PINS]
    if unknown:
        parser.error(f"unknown agent(s) {', '.join(unknown)}; choose from {', '.join(PINS)}")
    if shutil.which("npm") is None:
        print("install_clis: npm not found on PATH", file=sys.stderr)
        return 1
    started = time.monotonic()
    results = []
    for agent in args.agents or list(PINS):
        try:
            result = install(PINS[agent], root)
        except RuntimeError as exc:
            print(f"install_clis: {exc}", file=sys.stderr)
            return 1
        results.append(result)
        if not args.json:
            print(f"{agent:7} {result['version']:9} {result['action']:9} {result['seconds']:6.1f}s  {result['bin']}")
    total = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps({"root": str(root), "total_seconds": total, "clis": results}))
    else:
        print(f"total {total}s (root {root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
