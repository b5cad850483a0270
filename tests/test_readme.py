"""The README's promises hold: its task example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from webserver import Resource

README = Path(__file__).parent.parent / "README.md"


def test_the_readme_task_example_crawls(serve, tmp_path):
    code = re.search(r"```python\n(# mytask\.py\n.*?)```", README.read_text(), re.S)
    assert code, "the README lost its task example"
    (tmp_path / "mytask.py").write_text(code.group(1))
    server = serve({"a.test": {
        "/": Resource(b"<title>Home</title><a href='/b'>b</a>"),
        "/b": Resource(b"<title>Page B</title>"),
    }})  # fmt: skip
    settings = {"manager": "mytask.TitleManager", "sites": ["a.test"],
                "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                "crawl": {"crawl_delay_ms": 0, "resolve": server.resolve}}  # fmt: skip
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run([sys.executable, "-m", "rccrawler", "--config", str(config), "-q"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "http://a.test/ Home" in proc.stdout
    assert "http://a.test/b Page B" in proc.stdout
    assert (tmp_path / "out" / "a.test.nodes.csv").exists()
