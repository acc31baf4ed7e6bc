"""`cairn doctor`: what is wrong with this installation and how to fix it, each finding with its fix, and with
`apply` the fixes cairn can make itself.

Checks (each a function below, in the order a person would look):
- home: CAIRN_HOME and the files in it private (0700 / 0600: they hold prompts and memories); apply: chmod;
- stores: each store opens, passes SQLite's integrity check (PostgreSQL: answers), has no pending migration;
- spool: Stops waiting because their transaction could not be written in time (core/hooks/spool.py); apply:
  applies them now, oldest first, each once;
- retention: the delivery log's long text older than CAIRN_RETENTION_DAYS (core/store/retention.py); apply: expires
  it now (the daemon does it once a day);
- hooks: for each agent used on this machine (Claude Code, Codex CLI, Gemini CLI), why its hooks would not run or
  would run without effect — not installed, a project Codex does not trust, a hook Codex does not trust (asked of
  Codex itself, core/hooks/codex_trust.py), a folder Gemini does not trust, a cairn executable that is no longer there, a store that does not open,
  the daemon down (the lexical fallback ranks) — with the fix.

Doctor opens the stores itself (the point of it is whether they open) and never creates one.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

from cairn_cli import config
from cairn_cli.config import Settings

OK, WARN, ERROR = "ok", "warn", "error"
CHECKS = ("home", "stores", "spool", "retention", "hooks")


@dataclass
class Finding:
    check: str
    status: str  # ok / warn / error
    message: str
    fix: str | None = None
    applied: str | None = None  # what --apply did about it


@dataclass
class DoctorReport:
    home: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """Nothing left to fix (after --apply, what it fixed counts as fixed)."""
        return all(f.status == OK for f in self.findings)

    def as_dict(self) -> dict:
        return {"home": self.home, "healthy": self.healthy, "findings": [vars(f) for f in self.findings]}


def diagnose(
    settings: Settings,
    *,
    apply: bool = False,
    only: str | None = None,
    embed_with_model=None,
    embed=None,
    daemon_status=None,
) -> DoctorReport:
    """Run every check (`only`: one of CHECKS); with `apply`, fix what can be fixed (`embed_with_model` / `embed`:
    the embedders a spooled Stop is applied with, as the Stop hook's; `daemon_status()` -> (state, detail): the
    daemon's, asked only when some agent's hooks are installed)."""
    home = config.home_dir()
    report = DoctorReport(home)
    if only in (None, "home"):
        report.findings += check_home(home, apply=apply)
    stores = check_stores(settings)
    if only in (None, "stores"):
        report.findings += stores
    opened = all(f.status != ERROR for f in stores)
    if only in (None, "spool"):
        report.findings += check_spool(
            home, settings, apply=apply and opened, embed_with_model=embed_with_model, embed=embed
        )
    if only in (None, "retention") and opened:
        report.findings += check_retention(settings, apply=apply)
    if only in (None, "hooks"):
        from pathlib import Path

        broken = next((f for f in stores if f.status == ERROR), None)
        report.findings += check_hooks(
            Path.cwd(), Path.home(), dict(os.environ), store_error=broken, daemon=daemon_status
        )
    return report


# -- hooks ---------------------------------------------------------------------------------------------------------


def check_hooks(cwd, home, env: dict, *, store_error: Finding | None = None, daemon=None) -> list:
    """Per agent: its hooks installed (project or user level) where the agent is used, and the trust it needs
    before it runs them; for installed hooks, the cairn they run still there, the store open (`store_error`: the
    stores check's error) and the daemon up (`daemon()` -> (state, detail), asked once). An agent with no folder in
    the home is not used here: nothing to say."""
    import tomllib
    from pathlib import Path

    from cairn_cli.core.hooks import agent_settings as cs

    out: list[Finding] = []
    installed_any = False
    for agent, (folder, _) in cs.FILES.items():
        agent_home = home / folder if agent != "codex" or not env.get("CODEX_HOME") else Path(env["CODEX_HOME"])
        installed = [w for w in cs.WHERE if _cairn_hooks(cs.settings_path(w, cwd, home, agent))]
        if not installed:
            if agent_home.is_dir():
                out.append(
                    Finding(
                        "hooks",
                        WARN,
                        f"{agent}: cairn's hooks are not installed (neither here nor for the user)",
                        f"cairn hook install --agent {agent} (--user for every project)",
                    )
                )
            continue
        installed_any = True
        where = " and ".join(installed)
        for level in installed:
            for program in _missing_programs(cs.settings_path(level, cwd, home, agent)):
                out.append(
                    Finding(
                        "hooks",
                        ERROR,
                        f"{agent}: the {level} hooks run {program}, which is not there (moved or uninstalled)",
                        f"cairn hook install --agent {agent}" + (" --user" if level == "user" else ""),
                    )
                )
        if store_error is not None:
            out.append(
                Finding(
                    "hooks", ERROR, f"{agent}: the hooks cannot open the store: {store_error.message}", store_error.fix
                )
            )
        if agent == "codex":
            try:
                config_toml = tomllib.loads((agent_home / "config.toml").read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                config_toml = {}
            projects = config_toml.get("projects")
            entry = projects.get(str(cwd)) if isinstance(projects, dict) else None
            trusted = isinstance(entry, dict) and entry.get("trust_level") == "trusted"
            if "project" in installed and not trusted:
                out.append(
                    Finding(
                        "hooks",
                        WARN,
                        f"codex: this project is not trusted, so Codex ignores its hooks ({cwd})",
                        f'add [projects."{cwd}"] trust_level = "trusted" to {agent_home / "config.toml"}',
                    )
                )
                continue
            out.append(_codex_hook_trust(cwd, env, where))
        elif agent == "gemini":
            trusted = env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true" or _gemini_trusts(agent_home, cwd)
            if "project" in installed and not trusted:
                out.append(
                    Finding(
                        "hooks",
                        WARN,
                        f"gemini: this folder is not trusted, so Gemini loads no project hooks ({cwd})",
                        "open it in Gemini CLI and trust it (or install with --user)",
                    )
                )
                continue
            out.append(Finding("hooks", OK, f"gemini: hooks installed ({where})"))
        else:
            out.append(Finding("hooks", OK, f"{agent}: hooks installed ({where})"))
    if installed_any and daemon is not None:
        state, detail = daemon()
        if state not in ("running", "loading"):
            out.append(
                Finding(
                    "hooks",
                    WARN,
                    f"the daemon is {state} ({detail}): every agent's prompts are ranked by the lexical fallback "
                    "until it runs (the prompt hook starts it) and new memories wait to be embedded",
                    "cairn daemon start (cairn daemon status says why it stopped)",
                )
            )
    return out


def _codex_hook_trust(cwd, env: dict, where: str) -> Finding:
    """Whether Codex trusts cairn's hooks, asked of the `codex` on PATH (core/hooks/codex_trust.py)."""
    import shutil

    from cairn_cli.core.hooks import codex_trust

    codex = shutil.which("codex", path=env.get("PATH"))
    asked = codex_trust.cairn_hooks(codex, cwd, env) if codex else "codex is not on PATH"
    if isinstance(asked, str) or not asked:
        why = asked or "Codex lists none of them here"
        return Finding(
            "hooks",
            OK,
            f"codex: hooks installed ({where}); Codex runs a hook only once you have trusted it — review them in "
            f"Codex once (/hooks), or it skips them without a word (could not ask Codex: {why})",
        )
    untrusted = [f"{h.event} ({h.trust})" for h in asked if h.trust != "trusted"]
    if untrusted:
        return Finding(
            "hooks",
            WARN,
            f"codex: Codex does not trust cairn's hooks yet, so it skips them without a word: {', '.join(untrusted)}",
            "open /hooks in Codex and trust cairn's hooks (a changed hook needs trusting again)",
        )
    return Finding("hooks", OK, f"codex: hooks installed ({where}) and trusted by Codex")


def _missing_programs(path) -> list[str]:
    """The programs cairn's hooks in the settings file `path` run that are not there (an absolute path that is no
    executable file, a script that is no file, a bare name not on PATH)."""
    import shutil

    from cairn_cli.core.hooks import agent_settings as cs

    def there(p: str) -> bool:
        if "/" not in p:
            return shutil.which(p) is not None
        return os.path.isfile(p) and (p.endswith(".py") or os.access(p, os.X_OK))

    return sorted({p for h in _cairn_hooks(path) for p in cs.hook_programs(h) if not there(p)})


def _cairn_hooks(path) -> list[dict]:
    """cairn's hooks in the agent settings file `path` (none for a file that is missing or unreadable)."""
    from cairn_cli.core.hooks import agent_settings as cs
    from cairn_cli.errors import InvalidInput

    try:
        hooks = cs.load(path).get("hooks") or {}
    except InvalidInput:
        return []
    groups = [g for event in hooks.values() if isinstance(event, list) for g in event if isinstance(g, dict)]
    return [h for g in groups for h in g.get("hooks") or [] if cs.is_cairn_hook(h)]


def _gemini_trusts(gemini_home, cwd) -> bool:
    """Whether Gemini CLI's trusted folders (~/.gemini/trustedFolders.json) hold this folder or a parent of it."""
    import json

    try:
        folders = json.loads((gemini_home / "trustedFolders.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(folders, dict):
        return False
    return any(
        str(cwd) == path or str(cwd).startswith(path.rstrip("/") + "/")
        for path, level in folders.items()
        if isinstance(path, str) and str(level).upper().startswith("TRUST")
    )


# -- home ----------------------------------------------------------------------------------------------------------


def _loose(path: str, st: os.stat_result) -> bool:
    return bool(st.st_mode & 0o077)


def check_home(home: str, *, apply: bool) -> list[Finding]:
    from cairn_cli.files import PRIVATE_DIR, PRIVATE_FILE

    if not os.path.isdir(home):
        return [Finding("home", OK, f"{home} does not exist yet (made by the first command that writes)")]
    loose: list[tuple[str, int]] = []
    for folder, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode) and _loose(path, st):
                loose.append((path, PRIVATE_DIR if stat.S_ISDIR(st.st_mode) else PRIVATE_FILE))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    st = os.stat(home)
    if _loose(home, st):
        loose.insert(0, (home, PRIVATE_DIR))
    if not loose:
        return [Finding("home", OK, f"{home} and its files are private (0700 / 0600)")]
    shown = ", ".join(f"{os.path.relpath(p, home) if p != home else p}" for p, _ in loose[:3])
    more = f" and {len(loose) - 3} more" if len(loose) > 3 else ""
    finding = Finding(
        "home",
        WARN,
        f"{len(loose)} paths under CAIRN_HOME are open to other accounts ({shown}{more}): they hold prompts and memories",
        "cairn doctor --apply (chmod 700 folders, 600 files)",
    )
    if apply:
        failed = 0
        for path, mode in loose:
            try:
                os.chmod(path, mode)
            except OSError:
                failed += 1
        finding.applied = f"made {len(loose) - failed} private" + (f", {failed} could not be changed" if failed else "")
        if not failed:
            finding.status = OK
    return [finding]


# -- stores --------------------------------------------------------------------------------------------------------


def check_stores(settings: Settings) -> list[Finding]:
    from cairn_cli import db
    from cairn_cli.errors import CairnError, NotFound

    findings = []
    for kind, url in (
        ("memory", config.memory_db_url(settings.DB_URL)),
        ("ephemeral", config.ephemeral_db_url(settings.EPHEMERAL_DB_URL)),
    ):
        where = db.safe_url(url)
        try:
            database = db.connect_store(kind, url, create=False, migrate=False)
        except NotFound as exc:
            if url == config.default_db_url(kind):
                findings.append(Finding(f"{kind} store", OK, f"{where} does not exist yet (made by the first write)"))
            else:  # a URL given on purpose that holds no store: every hook would fail on it
                findings.append(Finding(f"{kind} store", ERROR, exc.message, exc.hint))
            continue
        except CairnError as exc:
            findings.append(Finding(f"{kind} store", ERROR, exc.message, exc.hint))
            continue
        except db.errors() as exc:
            findings.append(_unreadable(kind, where, exc))
            continue
        try:
            findings.append(_check_open_store(kind, where, database))
        finally:
            database.close()
    return findings


def _unreadable(kind: str, where: str, exc: BaseException) -> Finding:
    from cairn_cli import db

    return Finding(
        f"{kind} store",
        ERROR,
        f"{where} cannot be read: {db.driver_message(exc)}",
        "restore it from a copy (`cairn db copy`), or move it aside to start a new one",
    )


def _check_open_store(kind: str, where: str, database) -> Finding:
    from cairn_cli import db
    from cairn_cli.db import integrity

    name = f"{kind} store"
    try:
        verdict = integrity.verdict(database)
        pending = db.pending_migrations(kind, database)
    except db.errors() as exc:
        return _unreadable(kind, where, exc)
    if verdict != "ok":
        return Finding(
            name,
            ERROR,
            f"{where} fails SQLite's integrity check: {verdict}",
            "copy what still reads into a new store (`cairn db copy --from … --to …`), then swap the files",
        )
    if pending:
        return Finding(
            name,
            WARN,
            f"{where} lacks {len(pending)} migrations ({', '.join(pending[:3])})",
            "run any cairn command that writes (e.g. `cairn stats deliveries`): it migrates the store",
        )
    return Finding(name, OK, f"{where} opens and passes the integrity check")


# -- spool ---------------------------------------------------------------------------------------------------------


def check_spool(home: str, settings: Settings, *, apply: bool, embed_with_model, embed) -> list[Finding]:
    from cairn_cli.core.hooks import spool
    from cairn_cli.core.hooks.stop import apply_spooled

    findings = []
    bad = spool.set_aside(home)
    if bad:
        findings.append(
            Finding(
                "spool",
                WARN,
                f"{len(bad)} spool files could not be read as a Stop and were set aside ({', '.join(bad[:3])})",
                f"look at them in {spool.spool_dir(home)}, then delete them",
            )
        )
    items = spool.waiting(home)
    if not items:
        return [*findings, Finding("spool", OK, "no Stop is waiting to be written")]
    age = time.time() - items[0].spooled_at
    finding = Finding(
        "spool",
        WARN,
        f"{len(items)} Stops are waiting to be written (the oldest for {_age(age)}): their memories, grades and "
        "engagement are not in the store yet",
        "cairn doctor --apply (the next Stop hook and the daemon apply them too)",
    )
    if apply:
        from cairn_cli.core.store import open_stores

        open_stores(settings, create=False)
        run = apply_spooled(
            home,
            settings,
            embed_with_model=embed_with_model or (lambda texts: None),
            embed=embed or (lambda texts: None),
        )
        left = spool.waiting(home)
        finding.applied = f"applied {len(run.applied)}" + (
            f"; {len(run.failed)} still fail: {next(iter(run.failed.values()))}" if run.failed else ""
        )
        if not left:
            finding.status = OK
    return [*findings, finding]


# -- retention -----------------------------------------------------------------------------------------------------


def check_retention(settings: Settings, *, apply: bool) -> list[Finding]:
    from cairn_cli import db
    from cairn_cli.core.store import retention
    from cairn_cli.errors import NotFound

    url = config.ephemeral_db_url(settings.EPHEMERAL_DB_URL)
    try:
        database = db.connect_store("ephemeral", url, create=False, migrate=True)
    except NotFound:
        return []
    try:
        status = retention.retention_status(settings, database=database)
        if status.cutoff is None:
            return [Finding("retention", OK, "retention is off (CAIRN_RETENTION_DAYS=0): the delivery log keeps all")]
        due = sum(t.expired for t in status.due)
        if not due:
            return [Finding("retention", OK, f"nothing older than {status.days:g} days waits to expire")]
        finding = Finding(
            "retention",
            WARN,
            f"{due} rows hold prompt or context text older than {status.days:g} days (CAIRN_RETENTION_DAYS)",
            "cairn doctor --apply (the daemon expires it once a day)",
        )
        if apply:
            report = retention.apply_retention(settings, database=database, by="cairn doctor --apply")
            finding.applied, finding.status = report.summary(), OK
        return [finding]
    finally:
        database.close()


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"
