"""A PostgreSQL cluster of a test's own, made with initdb in a temporary folder.

A test that restarts its database must not touch the shared server (127.0.0.1:5432)
that other tests, and other copies of the suite, use at the same time. This one
listens on a free loopback port, keeps its data in a temporary folder that goes with
it, and is run as the ``postgres`` user when the tests run as root (initdb refuses
root). Durability is off (``fsync``): a restart is clean, and nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BIN", "Cluster", "own_cluster", "unavailable"]

BIN = Path(os.environ.get("RCCRAWLER_PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where initdb and pg_ctl are."""


def unavailable() -> str | None:
    """Why no cluster can be made here, or None."""
    if not (BIN / "initdb").exists() or not (BIN / "pg_ctl").exists():
        return f"initdb and pg_ctl are not in {BIN}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root, and runuser is missing"
    return None


@dataclass
class Cluster:
    """A running cluster: its folder, port and URL."""

    folder: Path
    port: int

    @property
    def options(self) -> str:
        """The server's options: its own port and socket folder, never the defaults
        (a start without them would try the shared server's port)."""
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} "
            "-c fsync=off -c full_page_writes=off -c max_connections=60"
        )

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def pg_ctl(self, *args: str, timeout: float = 60) -> None:
        """Run pg_ctl on this cluster (waiting for it to finish what it was asked)."""
        log = str(self.folder / "server.log")
        run([str(BIN / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", *args], timeout)

    def start(self) -> None:
        self.pg_ctl("-o", self.options, "start")

    def stop(self) -> None:
        """Stop the server as a restart does: every session is ended at once."""
        self.pg_ctl("-m", "fast", "stop")


def as_postgres(command: list[str]) -> list[str]:
    """The command as the postgres user when this runs as root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def run(command: list[str], timeout: float) -> None:
    done = subprocess.run(
        as_postgres(command), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def own_cluster() -> Iterator[Cluster]:
    """A new cluster, running for the block, then stopped and removed."""
    folder = Path(tempfile.mkdtemp(prefix="rccrawler-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    cluster = Cluster(folder, free_port())
    try:
        run([str(BIN / "initdb"), "-D", str(cluster.data), "-A", "trust", "-U", "postgres",
             "--no-sync", "-E", "UTF8"], 120)  # fmt: skip
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if (cluster.data / "postmaster.pid").exists():
                cluster.pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)
