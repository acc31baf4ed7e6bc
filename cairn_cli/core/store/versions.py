"""Model versions shared through a store several machines use (PostgreSQL): a version directory as a tar blob, and
unpacked again on another machine (the team's student, core/learning/team.py; a learned embedder,
core/store/embedders.py)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path


def shared_store() -> bool:
    """The memory store is one machines share (PostgreSQL)."""
    from cairn_cli import db

    return db.is_postgres("memory")


def tar_directory(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(directory)))
    return buf.getvalue()


def unpack(blob: bytes, target: Path) -> str | None:
    """Unpack into `target` via a temporary sibling and one rename; why not, or None."""
    from cairn_cli.files import private_dir

    private_dir(target.parent)
    tmp = target.parent / f".{target.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
            tar.extractall(tmp, filter="data")  # no absolute paths, no links out of the directory
        if not (tmp / "config.json").is_file():
            raise tarfile.TarError("no config.json: not a model directory")
        os.replace(tmp, target)
    except (tarfile.TarError, OSError, ValueError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"it cannot be unpacked: {exc}"
    return None
