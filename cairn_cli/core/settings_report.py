"""Every setting with the value in force and where it came from (`cairn config show`): a flag, the environment,
`$CAIRN_HOME/config.toml`, the default, or machine state, where a value cairn calibrated itself (a floor, the
semantic-engagement threshold) wins over the configured one."""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli import config
from cairn_cli.config import Settings

MACHINE_STATE = "machine state"


@dataclass
class SettingValue:
    name: str  # the environment variable, CAIRN_<NAME>
    group: str  # its heading in the README's configuration section (config.GROUPS)
    value: object  # the value in force
    source: str  # flag, environment, config.toml, default or machine state
    doc: str
    state_key: str | None = None  # machine state: the key that holds the value
    configured: object = None  # machine state: the value the settings alone would give
    configured_source: str | None = None


def _machine_values(settings: Settings) -> dict[str, tuple[object, str]]:
    """{setting name: (the value machine state holds in its place, its key)} for the settings whose calibrated value
    wins over the configured one, as ranking and engagement read them."""
    from cairn_cli.core.labels.engagement import ENGAGEMENT_KEY
    from cairn_cli.core.ranking import profiles, reranking
    from cairn_cli.core.store import state
    from cairn_cli.ml.reranker import BGE, MSMARCO, STUDENT

    keys = {
        "ENGAGEMENT_SEMANTIC_MIN": ENGAGEMENT_KEY,
        "RERANKER_FLOOR_MSMARCO": reranking.FLOOR_KEY.format(MSMARCO),
        "RERANKER_FLOOR_BGE": reranking.FLOOR_KEY.format(BGE),
    }
    student = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    if student.is_dir():  # a floor calibrated for the deployed student version (its resolved directory)
        keys["CROSS_ENCODER_STUDENT_FLOOR"] = reranking.FLOOR_KEY.format(f"{STUDENT}:{student.resolve()}")
    if str(settings.COMPOSITE_FLOOR).strip().lower() == "auto":  # the floor of this profile and embedding model
        # (under auto, each kind of store has its own: the one shown is the default profile's, notes)
        shown = "default" if settings.RANK_PROFILE == profiles.AUTO else settings.RANK_PROFILE
        keys["COMPOSITE_FLOOR"] = profiles.FLOOR_KEY.format(shown, settings.EMBED_MODEL)
    out: dict[str, tuple[object, str]] = {}
    for name, key in keys.items():
        value = state.get(key, settings)
        if value is not None:
            out[name] = (float(value), key)
    return out


def _in_force(name: str, value: object) -> object:
    """What an empty default stands for (the home, the stores' URLs), and a URL as it may be printed (no
    password)."""
    from cairn_cli import db

    if name == "HOME":
        return config.home_dir()
    if name == "DB_URL":
        return db.safe_url(config.memory_db_url(str(value) or None))
    if name == "EPHEMERAL_DB_URL":
        return db.safe_url(config.ephemeral_db_url(str(value) or None))
    return value


def settings_report(settings: Settings, *, machine_state: bool = True) -> list[SettingValue]:
    """Every setting in config.GROUPS' order. `machine_state`: read the memory store's calibrated values (the
    store must be open)."""
    machine = _machine_values(settings) if machine_state else {}
    rows = []
    for group, names in config.GROUPS:
        for name in names:
            value, source = settings.resolve(name)
            value = _in_force(name, value)
            row = SettingValue(f"CAIRN_{name}", group, value, source, config.SETTINGS[name].doc)
            if name in machine:
                row.configured, row.configured_source = value, source
                row.value, row.state_key = machine[name]
                row.source = MACHINE_STATE
            rows.append(row)
    return rows
