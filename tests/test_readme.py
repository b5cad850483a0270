"""The README's promises hold: its task example runs as written, on every backend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from webserver import Resource

README = Path(__file__).parent.parent / "README.md"


@pytest.mark.both_backends
def test_the_readme_task_example_keeps_and_reads_its_own_results(serve, tmp_path, storage):
    code = re.search(r"```python\n(# mytask\.py\n.*?)```", README.read_text(), re.S)
    assert code, "the README lost its task example"
    (tmp_path / "mytask.py").write_text(code.group(1))
    server = serve({"a.test": {
        "/": Resource(b"<title>Home</title><p>one two three</p><a href='/b'>b</a>"),
        "/b": Resource(b"<title>Page B</title><p>just four words here</p>"),
    }})  # fmt: skip
    name = f"readme-{uuid.uuid4().hex}"
    settings = {"manager": "mytask.TitleManager", "sites": ["a.test"], "storage": storage,
                "name": name, "state_dir": str(tmp_path / "state"),
                "output_dir": str(tmp_path / "out"),
                "crawl": {"crawl_delay_ms": 0, "resolve": server.resolve}}  # fmt: skip
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rccrawler", "--config", str(config), "-q"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = sorted((tmp_path / "out" / "titles.tsv").read_text().splitlines())
        # Titles and word counts ("one two three b", "just four words here").
        assert rows == ["http://a.test/\t4\tHome", "http://a.test/b\t4\tPage B"]
        assert (tmp_path / "out" / "a.test.nodes.csv").exists()
    finally:
        if storage != "sqlite":
            from rccrawler.data.postgres import PostgresDataManager, schema_for

            PostgresDataManager.drop(storage, schema_for(name))
