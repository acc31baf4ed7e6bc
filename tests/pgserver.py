"""A throw-away PostgreSQL server for the tests: `initdb` + `pg_ctl` on a temporary directory, listening on a Unix
socket in it and on a free loopback port. Run as the `postgres` system user when the tests run as root (`initdb`
refuses root). `available()` says why not when the binaries are missing."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def bindir() -> Path | None:
    """Where initdb and pg_ctl are: `pg_config --bindir`, else /usr/lib/postgresql/<newest>/bin."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip())
        except OSError:
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if bindir() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql or put pg_config on PATH"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: initdb refuses root"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install 'cairn_cli[postgres]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self) -> None:
        self.bin = bindir()
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
            orphan.bin, orphan.root, orphan.data = bindir(), Path(root), Path(root) / "data"
            orphan.as_root = os.geteuid() == 0
            orphan.stop()

    def start(self) -> PgServer:
        (self.root / "owner").write_text(str(os.getpid()))
        self.sock.mkdir()
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.sock, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        self.start_server()
        return self

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
