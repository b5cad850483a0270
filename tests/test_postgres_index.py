"""On PostgreSQL the search posting lists are hash-partitioned by keyword (SPEC §7, seed 000 IV)."""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest
import yaml
from webserver import Resource

from plugins.search import SearchManager
from rccrawler.data.postgres import DEFAULT_PARTITIONS, schema_for
from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings


@pytest.mark.parametrize("partitions", [None, 3])  # the default, and search.partitions
def test_postings_are_hash_partitioned_and_one_term_reads_one_partition(
    serve, tmp_path, postgresql, partitions
):
    words = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel"]
    site = {"/": Resource(b"".join(b"<a href='/%d'>x</a>" % n for n in range(len(words))))}
    for n, word in enumerate(words):
        site[f"/{n}"] = Resource(f"<title>{word}</title><p>{word} orchard</p>".encode())
    server = serve({"s.test": site})
    name = f"partitions-{uuid.uuid4().hex}"
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump({
        "manager": "plugins.search.SearchManager", "sites": ["s.test"], "storage": postgresql,
        "name": name, "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "crawl": {"crawl_delay_ms": 0, "resolve": server.resolve},
        **({"search": {"partitions": partitions}} if partitions else {}),
    }))  # fmt: skip
    manager_cls, settings = load_settings(config)
    try:
        assert manager_cls(settings).run()
        assert [hit["url"] for hit in SearchManager.search(settings, "cherry") or []] == [
            "http://s.test/2"
        ]
        schema = schema_for(name)
        with psycopg.connect(postgresql) as conn:
            conn.execute(f"SET search_path TO {schema}")
            kind, strategy = conn.execute(
                "SELECT c.relkind, p.partstrat FROM pg_class c JOIN pg_partitioned_table p "
                "ON p.partrelid = c.oid WHERE c.oid = 'search_lists'::regclass"
            ).fetchone()
            assert (kind, strategy) == ("p", "h")  # partitioned, by hash
            parts = conn.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'search_lists'::regclass"
            ).fetchone()[0]
            assert parts == (partitions or DEFAULT_PARTITIONS)
            spread = conn.execute("SELECT count(DISTINCT tableoid) FROM search_lists").fetchone()[0]
            assert spread > 1  # the terms really are spread over several partitions
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    "EXPLAIN SELECT batch, pages, weights, counts, positions FROM search_lists "
                    "WHERE term = %s",
                    ("cherri",),
                )
            )
        scanned = set(re.findall(r"search_lists_p\d+", plan))
        assert len(scanned) == 1, plan
    finally:
        discard_storage(settings)
