"""In-process cost of the judged queries over a saved search index: each query's time
(median of ``--repeat`` rounds), a digest of every hit (url, score, snippet, marks) to
compare two versions by, and a cProfile of one round with ``--profile``.

    .venv/bin/python benchmarks/query_profile.py --config BIG/settings.yaml [--profile]

``search_bench.py --keep`` leaves such an index (``big/settings.yaml`` in its work folder).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from plugins.search.manager import SearchManager
from plugins.search.query import QueryEvaluator
from plugins.search.settings import text_processor
from rccrawler.manager import load_settings

sys.path.insert(0, str(Path(__file__).parent))
from search_bench import JUDGED

if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="settings of a search crawl")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over the queries")
    parser.add_argument("--profile", action="store_true", help="cProfile one round")
    parser.add_argument("--hits", help="write every query's hits (JSON) to this file")
    args = parser.parse_args(argv)
    _cls, settings = load_settings(args.config)
    index = SearchManager.load_index(settings)
    processor = text_processor(settings)
    queries = [query for _kind, query, _right in JUDGED]

    def run(query: str) -> list[dict[str, object]]:
        found = QueryEvaluator(index, processor).results(query, 10, 0)
        return [{"total": found.total}, *(hit.as_dict() for hit in found.hits)]

    hits = {query: run(query) for query in queries}  # a warm-up round
    rounds = []
    for _round in range(args.repeat):
        began = time.perf_counter()
        for query in queries:
            run(query)
        rounds.append((time.perf_counter() - began) / len(queries))
    text = json.dumps(hits, sort_keys=True)
    print(f"{len(queries)} queries, {args.repeat} rounds: "
          f"{statistics.median(rounds) * 1000:.1f} ms per query (median; "
          f"{min(rounds) * 1000:.1f}–{max(rounds) * 1000:.1f}); "
          f"hits digest {hashlib.sha256(text.encode()).hexdigest()[:16]}")  # fmt: skip
    if args.hits:
        Path(args.hits).write_text(text, encoding="utf-8")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for query in queries:
            run(query)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(35)
    return 0


if __name__ == "__main__":
    sys.exit(main())
