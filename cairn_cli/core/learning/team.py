"""The student of a team: trained on one machine from the pooled labels, deployed to every machine sharing the
store. More in docs/learning.md."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.learning.deploy import DEPLOY_KEY, deploy, versions_dir
from cairn_cli.core.store import state
from cairn_cli.core.store.versions import shared_store, tar_directory, unpack

SHARED_KEY = "published"  # inside the deployed-student state: {"name", "checksum", "size"}


def publish(version: Path, settings: Settings, *, force: bool = False) -> dict | None:
    """Write the deployed `version` directory to the shared store and name it in the deployed-student state;
    None (nothing done) when the store is this machine's own, unless `force`."""
    from cairn_cli.db.tables import StudentVersion, memory_proxy

    if not (force or shared_store()):
        return None
    blob = tar_directory(version)
    published = {"name": version.name, "checksum": hashlib.sha256(blob).hexdigest(), "size": len(blob)}
    card = {}
    card_path = version / "model_card.json"
    if card_path.is_file():
        import json

        card = json.loads(card_path.read_text())
    with memory_proxy.atomic():
        StudentVersion.delete().where(StudentVersion.name == published["name"]).execute()  # a re-publication
        StudentVersion.insert(
            name=published["name"], checksum=published["checksum"], size=published["size"], blob=blob, card=card
        ).execute()
        current = dict(state.get(DEPLOY_KEY, settings) or {})
        current[SHARED_KEY] = published
        state.put(DEPLOY_KEY, current, settings, by="cairn train-reranker", reason=f"published {version.name}")
    return published


def sync(settings: Settings, *, refused: set[str] | None = None) -> str | None:
    """Install and deploy the published student this machine does not run yet. Returns what happened (a line for
    the daemon's log and status), or None when there is nothing to do. `refused`: versions this process found
    broken already (not fetched again)."""
    from cairn_cli.db.tables import StudentVersion

    published = (state.get(DEPLOY_KEY, settings) or {}).get(SHARED_KEY)
    if not published or not isinstance(published, dict):
        return None
    name = str(published.get("name") or "")
    live = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    if not name or (live.is_symlink() and live.resolve().name == name) or name in (refused or set()):
        return None
    target = versions_dir(live) / name
    if not target.is_dir():
        row = StudentVersion.get_or_none(StudentVersion.name == name)
        why = None
        if row is None:
            why = "it is not in the store"
        else:
            blob = bytes(row.blob)
            if hashlib.sha256(blob).hexdigest() != published.get("checksum"):
                why = "its checksum does not match the published one"
        if why is None:
            why = unpack(blob, target)
        if why:
            if refused is not None:
                refused.add(name)
            return f"the team's student {name} was not installed ({why}); keeping the current model"
    deploy(target, live)
    return f"installed the team's student {name} (checksum verified)"
