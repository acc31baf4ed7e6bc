"""Settings and their precedence: CLI flag > CAIRN_* environment variable > $CAIRN_HOME/config.toml > default.

Resolved at call time (never frozen at import). Values that cairn rewrites itself (generation-prompt version,
A/B arms, floors, the deployed student) are machine-managed state in the database, not settings.
This module is on the hook's hot path: stdlib only.
"""

from __future__ import annotations

import os

from cairn_cli.errors import ConfigError

# typing and pathlib are not imported at module level: this module is on the hot path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


class Setting:
    """One named setting (a plain class: dataclasses costs 14 ms of import on the hook's hot path)."""

    __slots__ = ("default", "doc", "name", "type")

    def __init__(self, name: str, default: object, type: type, doc: str):
        self.name, self.default, self.type, self.doc = name, default, type, doc


_SETTINGS = [
    Setting("HOME", "", str, "Where cairn keeps its databases, logs and models (default: the platform data dir)."),
    Setting("DB_URL", "", str, "Memory store URL (sqlite:///path or postgresql://...); default $CAIRN_HOME/memory.db."),
    Setting("EPHEMERAL_DB_URL", "", str, "Deliveries/hook-state URL; default $CAIRN_HOME/ephemeral.db."),
    Setting(
        "DB_LOCK_TIMEOUT_MS",
        3000,
        int,
        "PostgreSQL: the longest a statement waits for a lock another instance holds, then fails (0: forever).",
    ),
    Setting(
        "EMBED_MODEL",
        "all-MiniLM-L6-v2",
        str,
        "Embedding model: the bundled all-MiniLM-L6-v2, or `hashing` (tiny model-free encoder for tests/CI).",
    ),
    Setting("EMBED_DTYPE", "auto", str, "Embedding precision: fp32, bf16, or auto (bf16 on CPUs with AVX-512 BF16)."),
    Setting("SCORE_W_SIMILARITY", 0.50, float, "Composite weight of embedding cosine similarity."),
    Setting("SCORE_W_KEYWORDS", 0.15, float, "Composite weight of the keyword/lexical match (BM25, max-normalised)."),
    Setting("SCORE_W_SCOPE", 0.05, float, "Composite weight of scope match (1 exact scope, 0 global)."),
    Setting("SCORE_W_CONFIDENCE", 0.0, float, "Composite weight of confidence: computed and logged, weighs 0."),
    Setting("SCORE_W_RECENCY", 0.0, float, "Composite weight of recency decay: computed and logged, weighs 0."),
    Setting("RECENCY_HALF_LIFE_DAYS", 30.0, float, "Half-life of the recency decay component."),
    Setting("KEYWORD_FIELD_WEIGHT", 2, int, "How many times a memory's explicit keywords count in its lexical field."),
    Setting("RELEVANCE_PREFILTER_ENABLED", True, bool, "Drop self-referential meta memories (kind correction exempt)."),
    Setting("RANK_K", 5, int, "How many memories `cairn rank` injects."),
    Setting(
        "EXPLORE_RATE",
        0.1,
        float,
        "Share of hook prompts whose last slot shows a memory from just below the top k, so that the agent grades "
        "what the ranker does not show yet and a student can be credited for promoting it (0: off).",
    ),
    Setting(
        "RANK_PROFILE",
        "auto",
        str,
        "auto (each scope ranked by its kind of store: dialog for conversation turns, sequence for notes whose "
        "neighbours are alike, default for other notes), or force default (the seed's weights), sequence or dialog "
        "everywhere.",
    ),
    Setting(
        "LEARNED_PROFILE",
        "auto",
        str,
        "auto: rank with the weights `cairn train-reranker --learner fusion` fit from the grades and deployed (per "
        "kind of store, where they apply); off: the shipped profiles' weights.",
    ),
    Setting(
        "COMPOSITE_FLOOR",
        "auto",
        str,
        "Composite score under which no memory is injected (the prompt abstains): auto = calibrated, else shipped; "
        "a number; off.",
    ),
    Setting("CONTEXT_MAX_TURNS", 3, int, "Earlier transcript turns added to the context window."),
    Setting("CONTEXT_MAX_CHARS", 2000, int, "Character bound of the cleaned context window."),
    Setting(
        "CONTEXT_SIMILARITY_MARGIN",
        0.15,
        float,
        "The window's earlier turns in the similarity: max(the prompt's cosine, the whole window's minus this); "
        "0..1, 1: the prompt's alone.",
    ),
    Setting(
        "CONTEXT_TERM_WEIGHT",
        0.2,
        float,
        "Weight of the earlier turns' terms in the keywords' BM25 (0..1); the prompt's terms weigh 1.",
    ),
    Setting(
        "GRADE_RATE",
        "auto",
        str,
        "Share of hook prompts that ask the agent for rg grades (0..1); auto: 1 until a deployed learner is "
        "auto-promote-safe, 0.3 after, 1 again on a drift alarm (`cairn stats grading`).",
    ),
    Setting("CONFIDENCE_PRIOR_POS", 3.0, float, "Beta prior pseudo-count for corroboration (new memory: 0.75)."),
    Setting("CONFIDENCE_PRIOR_NEG", 1.0, float, "Beta prior pseudo-count for contradiction."),
    Setting("INJECTION_MAX_CHARS", 10000, int, "Upper bound of the printed injection block (Claude Code's limit)."),
    Setting(
        "VECTOR_INDEX_ABOVE",
        50000,
        int,
        "Above this many live memories the daemon ranks from a vector index kept beside the store and the full-text "
        "index instead of holding the whole store in memory (bench/scale.md).",
    ),
    Setting("RERANKER_ENABLED", True, bool, "Use a cross-encoder rerank stage when one resolves."),
    Setting("RERANK_CANDIDATES", 20, int, "The most candidates the cross-encoder rescores (the plan may take fewer)."),
    Setting(
        "RERANK_BUDGET_MS",
        150.0,
        float,
        "p95 bound of the rerank stage: the daemon measures this CPU and plans precision, candidates, max length "
        "(0: no budget, the stage as configured).",
    ),
    Setting(
        "RERANK_CALIBRATION",
        "",
        str,
        "JSONL of {query, texts} on which a faster precision must order like fp32 (default: the shipped set).",
    ),
    Setting(
        "RERANK_BLEND",
        0.5,
        float,
        "Final = (1-b)*composite + b*reranker, both min-max normalised over the reranked candidates.",
    ),
    Setting(
        "CROSS_ENCODER_STUDENT_PATH",
        "",
        str,
        "Trained student directory (default $CAIRN_HOME/training_data/reranker-student); overrides all.",
    ),
    Setting("CROSS_ENCODER_STUDENT_FLOOR", -100.0, float, "The student's floor (-100: off, it only reorders)."),
    Setting("RERANKER_BGE_ENABLED", True, bool, "Allow BAAI/bge-reranker-base (only on CUDA with enough VRAM)."),
    Setting("RERANKER_MIN_VRAM_GB", 6.0, float, "GPU memory bge-reranker-base needs."),
    Setting("RERANKER_FLOOR_MSMARCO", -3.0, float, "Floor of cross-encoder/ms-marco-MiniLM-L-6-v2 (raw logit)."),
    Setting("RERANKER_FLOOR_BGE", 0.015, float, "Floor of BAAI/bge-reranker-base (sigmoid score)."),
    Setting("RERANKER_DTYPE", "auto", str, "fp32, bf16, or auto (bf16 on CPUs with AVX-512 BF16/AMX)."),
    Setting(
        "RERANKER_MAX_LENGTH",
        128,
        int,
        "Token bound of a (context, memory) pair; the window is cut from its end, the prompt comes first.",
    ),
    Setting("TORCH_THREADS", 0, int, "Torch intra-op threads in the daemon (0: all cores)."),
    Setting(
        "DAEMON",
        "auto",
        str,
        "auto: rank in the daemon, else the lexical fallback; off: rank in this process with the models.",
    ),
    Setting("DAEMON_TIMEOUT_MS", 1500, int, "Hook client's connect+read timeout before the in-process fallback."),
    Setting(
        "DAEMON_BACKOFF_S",
        10.0,
        float,
        "After the daemon did not answer in time and showed no heartbeat (hung, not slow), skip it (lexical fallback"
        " at once) for this long; 0: never skip.",
    ),
    Setting(
        "DAEMON_WATCH_S",
        30.0,
        float,
        "How often an idle daemon checks that its CAIRN_HOME and socket are still its own (it exits when not).",
    ),
    Setting("DAEMON_IDLE_EXIT_S", 0.0, float, "The daemon exits after this long without a rank or embed; 0: never."),
    Setting(
        "LOG_MAX_BYTES",
        5 * 1024 * 1024,
        int,
        "hook.log and daemon.log are rotated once they pass this size (0: never rotated).",
    ),
    Setting("LOG_KEEP", 3, int, "Old generations of each log kept on rotation (hook.log.1 ... hook.log.N)."),
    Setting(
        "RETENTION_DAYS",
        30.0,
        float,
        "After this many days the delivery log's long text expires: unlabelled deliveries' context windows and the "
        "prompt kept in hook state; grades, engagement, ids and scores stay (0: keep everything forever).",
    ),
    Setting(
        "ENGAGEMENT_LEXICAL_MIN",
        0.25,
        float,
        "Engaged when this share of a memory's distinctive terms (prompt terms removed) is in the response.",
    ),
    Setting(
        "ENGAGEMENT_SEMANTIC_ENABLED",
        True,
        bool,
        "Second chance when the lexical test fails: cosine of memory and response chunks (the daemon's embedder).",
    ),
    Setting("ENGAGEMENT_SEMANTIC_MIN", 0.55, float, "Cosine at which the semantic second chance counts as engaged."),
    Setting("ENGAGEMENT_CHUNK_CHARS", 400, int, "Response chunk size (characters) for the semantic test."),
    Setting(
        "DEDUP_SEMANTIC_MIN",
        0.95,
        float,
        "A new memory whose cosine with a live one of its scope is at least this merges into it (same numbers only; "
        "keywords unioned, a corroboration, recorded); 0: off. Calibrated in bench/dedup.md.",
    ),
    Setting("HOOK_SCOPE", "", str, "Scope the hooks rank and write in (default: the name of the hook's cwd)."),
    Setting(
        "TRANSCRIPT_MAX_BYTES",
        4_000_000,
        int,
        "How much of a transcript's end cairn reads (regular files only: a FIFO or device is refused, never read).",
    ),
    Setting(
        "STOP_WRITE_BUDGET_S",
        15.0,
        float,
        "Stop hook: how long a Stop retries a store other sessions keep locked before it waits in the spool "
        "($CAIRN_HOME/spool, applied by the next Stop, the daemon or `cairn doctor --apply`).",
    ),
    Setting(
        "MAX_INPUT_BYTES",
        16 * 2**20,
        int,
        "The most a hook's stdin, `cairn rank`'s or `grade`'s stdin or --file, or a `memory import` file may hold; "
        "more is refused with an error, never read to the end.",
    ),
    Setting("STOP_MAX_MEMORIES", 20, int, "At most this many new memories a Stop writes (the rest is reported)."),
    Setting(
        "HOOK_TRANSCRIPT_WAIT_MS",
        500,
        int,
        "Stop hook: how long to wait for the response to reach the transcript when the payload lacks it.",
    ),
    Setting(
        "AB_TEST_ENABLED",
        True,
        bool,
        "Assign each main-agent prompt to arm A (live rules) or B (+ the candidate instruction); off: no arms.",
    ),
    Setting("AB_SEED", "", str, "Seed the per-prompt arm draw (tests, simulations); empty: truly random."),
    Setting(
        "INSTANCE",
        "",
        str,
        "This machine's id on the rows it writes to a shared store (default: made once per CAIRN_HOME, <host>-<hex>).",
    ),
    Setting(
        "REPLAY_WRITER_MODEL", "claude-sonnet-4-5", str, "`cairn replay`: the model that writes each arm's memories."
    ),
    Setting("REPLAY_JUDGE_MODEL", "claude-opus-4-1", str, "`cairn replay`: the model that judges and cold-reads them."),
    Setting("AB_SPRT_P1", 0.7, float, "The A/B test's alternative: P(B wins a session) under H1 (H0: 0.5)."),
    Setting("AB_ALPHA", 0.05, float, "False-promotion bound of the A/B test, however often cron looks."),
    Setting("AB_BETA", 0.1, float, "B is retired when the likelihood ratio falls under this (clearly not better)."),
    Setting(
        "AB_MATURE_DAYS",
        7.0,
        float,
        "A/B: a session counts once its newest memory is this old, on deliveries within this window (fixed outcome).",
    ),
    Setting("AB_MIN_SESSIONS", 10, int, "Sessions that must be decided (B won or lost) before any A/B decision."),
    Setting("AB_MIN_GRADES", 10, int, "Agent grades each arm needs before the grade guard can pass."),
    Setting("AB_GRADE_TOLERANCE", 0.25, float, "The guard: B's mean grade may not be lower than A's by more."),
    Setting("DEBUG", False, bool, "Show tracebacks for unexpected errors."),
]
SETTINGS: dict[str, Setting] = {s.name: s for s in _SETTINGS}

# The settings by what they tune, in the README's order (its "Configuration" section has one table per group under
# these headings; tests/test_config_show.py checks both agree). `cairn config show` prints them the same way.
GROUPS: list[tuple[str, list[str]]] = [
    ("Stores and home", ["HOME", "DB_URL", "EPHEMERAL_DB_URL", "DB_LOCK_TIMEOUT_MS", "INSTANCE"]),
    ("Embedding", ["EMBED_MODEL", "EMBED_DTYPE"]),
    (
        "Ranking",
        [
            "SCORE_W_SIMILARITY",
            "SCORE_W_KEYWORDS",
            "SCORE_W_SCOPE",
            "SCORE_W_CONFIDENCE",
            "SCORE_W_RECENCY",
            "RECENCY_HALF_LIFE_DAYS",
            "KEYWORD_FIELD_WEIGHT",
            "RELEVANCE_PREFILTER_ENABLED",
            "RANK_K",
            "EXPLORE_RATE",
            "RANK_PROFILE",
            "LEARNED_PROFILE",
            "COMPOSITE_FLOOR",
            "CONTEXT_MAX_TURNS",
            "CONTEXT_MAX_CHARS",
            "CONTEXT_SIMILARITY_MARGIN",
            "CONTEXT_TERM_WEIGHT",
            "INJECTION_MAX_CHARS",
            "VECTOR_INDEX_ABOVE",
        ],
    ),
    (
        "Reranker",
        [
            "RERANKER_ENABLED",
            "RERANK_CANDIDATES",
            "RERANK_BUDGET_MS",
            "RERANK_CALIBRATION",
            "RERANK_BLEND",
            "CROSS_ENCODER_STUDENT_PATH",
            "CROSS_ENCODER_STUDENT_FLOOR",
            "RERANKER_BGE_ENABLED",
            "RERANKER_MIN_VRAM_GB",
            "RERANKER_FLOOR_MSMARCO",
            "RERANKER_FLOOR_BGE",
            "RERANKER_DTYPE",
            "RERANKER_MAX_LENGTH",
            "TORCH_THREADS",
        ],
    ),
    ("Daemon", ["DAEMON", "DAEMON_TIMEOUT_MS", "DAEMON_BACKOFF_S", "DAEMON_WATCH_S", "DAEMON_IDLE_EXIT_S"]),
    ("Logs and retention", ["LOG_MAX_BYTES", "LOG_KEEP", "RETENTION_DAYS"]),
    (
        "Labels: confidence, engagement, dedup",
        [
            "GRADE_RATE",
            "CONFIDENCE_PRIOR_POS",
            "CONFIDENCE_PRIOR_NEG",
            "ENGAGEMENT_LEXICAL_MIN",
            "ENGAGEMENT_SEMANTIC_ENABLED",
            "ENGAGEMENT_SEMANTIC_MIN",
            "ENGAGEMENT_CHUNK_CHARS",
            "DEDUP_SEMANTIC_MIN",
        ],
    ),
    (
        "Hooks",
        [
            "HOOK_SCOPE",
            "TRANSCRIPT_MAX_BYTES",
            "STOP_WRITE_BUDGET_S",
            "MAX_INPUT_BYTES",
            "STOP_MAX_MEMORIES",
            "HOOK_TRANSCRIPT_WAIT_MS",
        ],
    ),
    (
        "Write-side A/B",
        [
            "AB_TEST_ENABLED",
            "AB_SEED",
            "AB_SPRT_P1",
            "AB_ALPHA",
            "AB_BETA",
            "AB_MATURE_DAYS",
            "AB_MIN_SESSIONS",
            "AB_MIN_GRADES",
            "AB_GRADE_TOLERANCE",
        ],
    ),
    ("Offline replay", ["REPLAY_WRITER_MODEL", "REPLAY_JUDGE_MODEL"]),
    ("Debugging", ["DEBUG"]),
]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _coerce(setting: Setting, raw: object, origin: str) -> object:
    if setting.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{origin}={raw!r} is not a boolean", "use true or false")
    try:
        return setting.type(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{origin}={raw!r} is not a valid {setting.type.__name__}", f"fix {origin} or unset it"
        ) from None


def home_dir() -> str:
    """CAIRN_HOME as a string (no pathlib: the hot path uses this)."""
    raw = os.environ.get("CAIRN_HOME")
    if raw:
        return os.path.expanduser(raw)
    from platformdirs import user_data_dir

    return user_data_dir("cairn", appauthor=False)


def home() -> Path:
    from pathlib import Path

    return Path(home_dir())


_toml_cache: dict[str, tuple[float, dict]] = {}


def _file_values() -> dict:
    path = os.path.join(home_dir(), "config.toml")
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}
    cached = _toml_cache.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    import tomllib

    try:
        with open(path, encoding="utf-8") as fh:
            values = {str(k).upper(): v for k, v in tomllib.loads(fh.read()).items()}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", "fix or remove the file") from None
    _toml_cache[path] = (mtime, values)
    return values


# where a setting's value came from (`resolve`), highest precedence first
FLAG, ENVIRONMENT, CONFIG_FILE, DEFAULT = "flag", "environment", "config.toml", "default"


def get(name: str, override: object = None, environ: dict | None = None) -> object:
    """One setting, by precedence: explicit override > CAIRN_<NAME> > config.toml > default.

    `environ` replaces os.environ: the daemon resolves a request with the calling client's environment.
    """
    return resolve(name, override, environ)[0]


# `get` typed by the setting's type (SETTINGS): a setting's value is its default or `_coerce`d to that type, so
# the asserts always hold; they tell mypy what `get`'s `object` is.
def get_str(name: str) -> str:
    value = get(name)
    assert isinstance(value, str), name
    return value


def get_int(name: str) -> int:
    value = get(name)
    assert isinstance(value, int), name
    return value


def get_float(name: str) -> float:
    value = get(name)
    assert isinstance(value, (int, float)), name
    return value


def resolve(name: str, override: object = None, environ: dict | None = None) -> tuple[object, str]:
    """(one setting's value, where it came from: FLAG, ENVIRONMENT, CONFIG_FILE or DEFAULT); see `get`."""
    setting = SETTINGS[name]
    if override is not None:
        return _coerce(setting, override, f"--{name.lower().replace('_', '-')}"), FLAG
    env = (os.environ if environ is None else environ).get(f"CAIRN_{name}")
    if env is not None:
        return _coerce(setting, env, f"CAIRN_{name}"), ENVIRONMENT
    file_values = _file_values() if name != "HOME" else {}
    if name in file_values:
        return _coerce(setting, file_values[name], f"config.toml {name}"), CONFIG_FILE
    return setting.default, DEFAULT


class Settings:
    """A view of all settings with per-call overrides (the CLI's flags)."""

    def __init__(self, environ: dict | None = None, **overrides: object):
        unknown = set(overrides) - set(SETTINGS)
        if unknown:
            raise KeyError(f"unknown settings: {sorted(unknown)}")
        self._overrides = {k: v for k, v in overrides.items() if v is not None}
        self._environ = environ

    def __getattr__(self, name: str) -> Any:  # each setting has its own type (SETTINGS)
        if name.startswith("_") or name not in SETTINGS:
            raise AttributeError(name)
        return get(name, self._overrides.get(name), self._environ)

    def resolve(self, name: str) -> tuple[object, str]:
        """(the setting's value, where it came from), as `config.resolve` says."""
        return resolve(name, self._overrides.get(name), self._environ)

    def overrides(self) -> dict[str, object]:
        return dict(self._overrides)

    def weights(self) -> dict[str, float]:
        return {
            "similarity": self.SCORE_W_SIMILARITY,
            "keywords": self.SCORE_W_KEYWORDS,
            "scope": self.SCORE_W_SCOPE,
            "confidence": self.SCORE_W_CONFIDENCE,
            "recency": self.SCORE_W_RECENCY,
        }


def embedder_versions_dir() -> Path:
    """Where learned embedder versions live, one directory each (core/store/embedders.py)."""
    return home() / "training_data" / "embedder.versions"


def student_path(override: str | None = None) -> Path:
    from pathlib import Path

    raw = str(get("CROSS_ENCODER_STUDENT_PATH", override) or "")
    return Path(raw).expanduser() if raw else home() / "training_data" / "reranker-student"


def default_db_url(kind: str) -> str:
    """Where the `kind` store ("memory" or "ephemeral") is when no URL names it: a SQLite file under CAIRN_HOME, the
    one place cairn makes a store without being asked to."""
    return f"sqlite:///{home() / f'{kind}.db'}"


def memory_db_url(override: str | None = None) -> str:
    return str(get("DB_URL", override) or default_db_url("memory"))


def ephemeral_db_url(override: str | None = None) -> str:
    return str(get("EPHEMERAL_DB_URL", override) or default_db_url("ephemeral"))
