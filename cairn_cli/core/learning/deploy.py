"""Deployment of the student: versions side by side, the live one named by a symlink replaced atomically (a killed
run leaves the live student untouched), and `--rollback` to the version deployed before."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from cairn_cli import config
from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.store import state
from cairn_cli.errors import NotFound
from cairn_cli.files import private_dir

DEPLOY_KEY = "reranker_student"  # the deployed student version and its card


def versions_dir(student: Path) -> Path:
    return student.parent / f"{student.name}.versions"


def deploy(model_dir: Path, student: Path) -> Path | None:
    """Publish `model_dir` (already under versions_dir) as the live student: one atomic symlink replacement.
    Returns the previous version's directory, if any."""
    previous = student.resolve() if student.is_symlink() else None
    if student.exists() and not student.is_symlink():  # a student from before versioning: keep it as a version
        legacy = versions_dir(student) / f"legacy-{dt.datetime.now():%Y%m%dT%H%M%S}"
        os.replace(student, legacy)
        previous = legacy
    link_tmp = student.parent / f".{student.name}.link-{os.getpid()}"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    os.symlink(os.path.relpath(model_dir, student.parent), link_tmp)
    os.replace(link_tmp, student)
    return previous


def new_version_dir(student: Path) -> Path:
    root = versions_dir(student)
    private_dir(root)
    return root / f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


def rollback(settings: Settings) -> dict:
    """Point the live student back at the version deployed before it."""
    student = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    record = state.get(DEPLOY_KEY, settings) or {}
    previous = record.get("previous")
    if not previous or not Path(previous).is_dir():
        raise NotFound("there is no previous student to roll back to", "train and deploy one first")
    current = str(student.resolve()) if student.is_symlink() else None
    deploy(Path(previous), student)
    value = {**record, "version": previous, "previous": current, "rolled_back_at": iso_now()}
    value["card"] = _card_of(Path(previous))  # the live version's card (auto_promote_safe: teacher demotion reads it)
    state.put(DEPLOY_KEY, value, settings, by="cairn train-reranker --rollback", reason="rollback")
    return value


def _card_of(version: Path) -> dict | None:
    """The model card written beside a deployed version, or None (a legacy version has none)."""
    import json

    try:
        card = json.loads((version / "model_card.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None
