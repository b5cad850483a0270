"""``rccrawler drop`` (issue 39, SPEC §3): a crawl's saved state goes (its SQLite file,
or its PostgreSQL schema) after a confirmation or ``--yes``, never while a worker of it
runs; its output files only with ``--output``, and then only those it wrote."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import yaml
from crawling import RUN_TIMEOUT, cli, running
from support.sites import generated_site


def write_settings(folder: Path, server: Any, **keys: Any) -> None:
    crawl = {"crawl_delay_ms": 0, "timeout_s": 5, "sitemaps": False, "resolve": server.resolve,
             **keys.pop("crawl", {})}  # fmt: skip
    settings = {"sites": sorted(server.sites), "state_dir": "state", "output_dir": "out",
                "threads": {"downloading": 2, "parsing": 1}, "crawl": crawl, **keys}  # fmt: skip
    (folder / "settings.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")


def digests(folder: Path) -> dict[str, str]:
    """The crawl's saved state, file by file (the lock says who looked last, and a reader
    of a SQLite file makes its -wal and -shm: those are not the state's content)."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir())
            if path.is_file() and path.name in ("crawl.sqlite3", "last-settings.json",
                                                "runs.log")}  # fmt: skip


def test_drop_asks_first_and_keeps_the_output_unless_told(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 20, fanout=4)})
    write_settings(tmp_path, server)
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    state = tmp_path / "state"
    kept = digests(state)
    assert "crawl.sqlite3" in kept and "last-settings.json" in kept

    no = cli("drop", "--config", "settings.yaml", cwd=tmp_path, stdin="n\n")
    assert no.returncode == 1
    assert "drop the saved crawl in state (20 pages)? [y/N]" in no.stderr
    assert "nothing was removed" in no.stderr
    assert digests(state) == kept
    closed = cli("drop", "--config", "settings.yaml", cwd=tmp_path, stdin="")  # no answer
    assert closed.returncode == 1 and digests(state) == kept

    yes = cli("drop", "--config", "settings.yaml", cwd=tmp_path, stdin="y\n")
    assert yes.returncode == 0, yes.stderr
    assert "dropped the saved crawl in state; its output files stay in out" in yes.stdout
    assert not state.exists()  # its files were all the crawl's: the folder went too
    assert (tmp_path / "out" / "a.test.nodes.csv").exists()
    again = cli("drop", "--config", "settings.yaml", "--yes", cwd=tmp_path)
    assert again.returncode == 1 and "no saved crawl in state" in again.stderr


def test_drop_output_removes_only_the_files_the_crawl_wrote(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 10, fanout=3)})
    write_settings(tmp_path, server)
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    (tmp_path / "out" / "notes.txt").write_text("mine\n")
    (tmp_path / "out" / "b.test.nodes.csv").write_text("another crawl's\n")
    (tmp_path / "state" / "my-notes.txt").write_text("mine too\n")
    dropped = cli("drop", "--config", "settings.yaml", "--yes", "--output", cwd=tmp_path)
    assert dropped.returncode == 0, dropped.stderr
    assert "and 6 output files" in dropped.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b.test.nodes.csv",
                                                                   "notes.txt"]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["my-notes.txt"]


def test_drop_is_refused_while_the_crawl_runs(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300, fanout=6)})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 20})
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
        assert server.wait_for_hits(10, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
        refused = cli("drop", "--config", "settings.yaml", "--yes", "--output", cwd=tmp_path)
        assert refused.returncode == 2
        assert "in use by pid" in refused.stderr and len(refused.stderr.splitlines()) == 1
        assert (tmp_path / "state" / "crawl.sqlite3").exists()
        assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
        proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0
    resumed = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout.startswith("resuming: ")
    paths = [hit.path for hit in server.hits if hit.path != "/robots.txt"]
    assert len(paths) == len(set(paths)) == 300  # the state survived whole


def schema_exists(url: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    return row is not None


def test_drop_of_a_postgresql_crawl_removes_its_schema_never_while_a_worker_runs(
    serve, tmp_path, postgresql
):
    from rccrawler.data.postgres import PostgresDataManager, schema_for

    server = serve({"a.test": generated_site("a.test", 300, fanout=6)})
    name = f"drop-{uuid.uuid4().hex}"
    schema = schema_for(name)
    write_settings(tmp_path, server, storage=postgresql, name=name, crawl={"crawl_delay_ms": 20})
    try:
        with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
            assert server.wait_for_hits(10, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
            refused = cli("drop", "--config", "settings.yaml", "--yes", cwd=tmp_path)
            assert refused.returncode == 2, refused.stderr
            assert f"pid {proc.pid} on " in refused.stderr and "is running" in refused.stderr
            assert schema_exists(postgresql, schema)
            assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
            proc.communicate(timeout=RUN_TIMEOUT)
        assert proc.returncode == 0
        # Stopped: the crawl can go. Found by its state folder, no settings file needed.
        dropped = cli("drop", "--state", "state", "--yes", cwd=tmp_path)
        assert dropped.returncode == 0, dropped.stderr
        assert f"dropped the saved crawl '{name}' in {postgresql}" in dropped.stdout
        assert not schema_exists(postgresql, schema)
        assert not (tmp_path / "state").exists()
    finally:
        PostgresDataManager.drop(postgresql, schema)
