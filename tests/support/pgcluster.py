"""A PostgreSQL cluster of a test's own, made with initdb in a temporary folder.

A test that restarts its database must not touch the shared server (127.0.0.1:5432)
that other tests, and other copies of the suite, use at the same time. This one
listens on a free loopback port, keeps its data in a temporary folder that goes with
it, and is run as the ``postgres`` user when the tests run as root (initdb refuses
root). Durability is off (``fsync``): a restart is clean, and nothing outlives the test.

The folder is in memory (``/dev/shm``) where there is one, so the server's writes
never wait on the disk: on this kind of VM, a small file's fsync took up to 7 s
while a restart test ran beside two busy cores.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crawling import wait_until

__all__ = ["BIN", "Cluster", "own_cluster", "unavailable"]

BIN = Path(os.environ.get("RCCRAWLER_PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where PostgreSQL's programs are (initdb, pg_ctl, postgres, pg_isready)."""
MEMORY = Path("/dev/shm")
"""A file system in memory, for the cluster's folder when the machine has it."""


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
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    """The server (under ``runuser`` when the tests run as root) while it runs."""

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

    def start(self, timeout: float = 120) -> None:
        """Start the server and wait until it takes connections.

        Not with ``pg_ctl start``: that starts it in a session of its own, and on this
        kind of VM (Linux 6.18) such a server, started while the cores were busy, once
        sat 24 s on the run queue without a tick of CPU while the test's own processes
        ran: the workers' ``storage_wait_s`` ran out before it was up (the restart tests
        failed 5 runs in 14 beside two CPU burners; started from here, none in 8)."""
        with (self.folder / "server.log").open("ab") as log:
            command = [str(BIN / "postgres"), "-D", str(self.data), *shlex.split(self.options)]
            self.process = subprocess.Popen(
                as_postgres(command), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        ready = [str(BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        server = self.process

        def up() -> bool:
            return subprocess.run(ready, timeout=timeout, check=False).returncode == 0

        # Ends early when the server exits instead (a bad option, a port taken).
        answered = wait_until(lambda: server.poll() is not None or up(), timeout, interval=0.05)
        if not answered or server.poll() is not None:
            log_text = (self.folder / "server.log").read_text(errors="replace")
            raise RuntimeError(f"the server did not start:\n{log_text[-2000:]}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server as a restart does (``fast``: every session is ended at once)."""
        self.pg_ctl("-m", mode, "stop")
        if self.process is not None:
            self.process.wait(60)


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
    folder = Path(tempfile.mkdtemp(prefix="rccrawler-pg-", dir=MEMORY if MEMORY.is_dir() else None))
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
                cluster.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)
