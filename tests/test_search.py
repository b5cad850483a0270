"""The search task (SPEC §7): content processing, weighting, every query operator, the CLI."""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import subprocess
import sys
import urllib.request
from itertools import islice

import psycopg
import pytest
import yaml
from crawling import CrawlRunner
from webserver import Resource

from plugins.search import SearchManager, TextProcessor
from plugins.search.content import extract_content
from plugins.search.index import Posting, PostingCache, build_document, keyword_factor
from plugins.search.processing import WORD, load_stopwords, load_synonyms, words
from plugins.search.query import QueryError, QueryEvaluator, closeness, tokenize
from plugins.search.settings import text_processor
from plugins.search.snippet import skip_words
from rccrawler.data.postgres import schema_for
from rccrawler.data.sqlite import STATE_FILE
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.manager import load_settings
from rccrawler.records import PageId

pytestmark = pytest.mark.both_backends
HOST = "s.test"
BASE = f"http://{HOST}"
MANAGER = "plugins.search.SearchManager"


def page(title: str, body: str, keywords: str = "", headings: str = "") -> Resource:
    meta = f'<meta name="keywords" content="{keywords}">' if keywords else ""
    heading = f"<h2>{headings}</h2>" if headings else ""
    return Resource(
        f"<html><head><title>{title}</title>{meta}</head>"
        f"<body>{heading}<p>{body}</p></body></html>".encode()
    )


# The corpus: every query below has an exactly known answer.
CORPUS = {
    "/p1.html": page("Apple pie recipe", "Bake the apple pie with cinnamon."),
    "/p2.html": page("Banana bread", "A banana bread with apple slices and cinnamon."),
    "/p3.html": page("Cherry tart", "A cherry tart from the orchard."),
    "/p4.html": page("Orange juice", "Fresh orange juice, pie not included."),
    "/p5.html": page("Pineapple salad", "Pineapple with mint."),
    "/p6.html": page("Dessert notes", "A pie made of apple and pear."),
    "/p7.html": page("Garage", "An automobile repair shop."),
    # Weighting: the word in the title beats the word (twice) in the body ...
    "/w1.html": page("Zebra facts", "Animals of Africa."),
    "/w2.html": page("Animals", "The zebra, the zebra is striped."),
    # ... headings beat the body, and stuffed meta keywords count for little.
    "/w3.html": page("Savanna", "Tall necks.", headings="Giraffe"),
    "/w4.html": page("Savanna two", "Giraffe necks are tall."),
    "/w5.html": page("Plains", "Some okapi live here.", keywords="okapi, forest"),
    "/w6.html": page("Plains two", "Some okapi live here.", keywords=", ".join(["okapi"] * 40)),
    # Length: the same words weigh the same in a long page and in a short one.
    "/l1.html": page("Quokka notes", "Quokka wombat. " + "Marsupial " * 300),
    "/l2.html": page("Quokka notes", "Quokka wombat."),
    "/notes.txt": Resource(
        b"Kangaroo habitat notes", headers=(("Content-Type", "text/plain; charset=utf-8"),)
    ),
    "/report.pdf": Resource(b"%PDF-1.4 \x00\x01", headers=(("Content-Type", "application/pdf"),)),
}
# The index page's anchors say only "more", a stopword, so it matches no query.
INDEX = Resource(
    (
        "<html><head><title>Welcome</title></head><body>"
        + "".join(f'<a href="{path}">more</a>' for path in CORPUS)
        + "</body></html>"
    ).encode()
)


@pytest.fixture
def indexed(serve, crawler):
    """Crawl the corpus with the search task; return its settings."""
    server = serve({HOST: {"/": INDEX, **CORPUS}})
    result = crawler.run([HOST], server.resolve, manager=MANAGER)
    assert result.finished
    return result.manager.settings


def paths(settings, query: str) -> list[str]:
    hits = SearchManager.search(settings, query, limit=100)
    assert hits is not None
    return [hit["url"].removeprefix(BASE) for hit in hits]


# -- content processing ----------------------------------------------------------


def test_words_are_lowercase_letter_runs():
    assert words("Web-Crawler2024 robots.txt l'été_Ünïcode") == [
        "web", "crawler", "robots", "txt", "l", "été", "ünïcode",
    ]  # fmt: skip


def test_stopwords_synonyms_and_stemming():
    processor = TextProcessor.default()
    assert "the" in load_stopwords() and load_synonyms()["automobile"] == "car"
    assert processor.terms("The crawling of the Crawlers") == ["crawl", "crawler"]
    assert processor.terms("automobiles") == processor.terms("car") == ["car"]
    assert processor.terms("Movies and films") == ["film", "film"]
    assert processor.terms("running runs") == ["run", "run"]


def test_word_lists_from_files(tmp_path):
    (tmp_path / "stop.txt").write_text("# comment\nzebra\n", encoding="utf-8")
    (tmp_path / "syn.txt").write_text("horse pony, stallion\n", encoding="utf-8")
    processor = TextProcessor(
        load_stopwords(tmp_path / "stop.txt"), load_synonyms(tmp_path / "syn.txt")
    )
    assert processor.terms("the zebra ponies stallion") == ["the", "hors", "hors"]


def test_content_filters_by_type():
    html = extract_content(
        "http://x.test/a.html",
        b'<title>T</title><meta name="description" content="D"><h1>H</h1><p>Body</p>',
        "text/html",
    )
    assert (html.title, html.summary, html.headings, html.text) == ("T", "D", ("H",), "H Body")
    text = extract_content("http://x.test/dir/read%20me.txt", b"Plain  words", "text/plain")
    assert (text.title, text.text) == ("read me.txt", "Plain words")
    other = extract_content("http://x.test/files/report.pdf?x=1", b"%PDF", "application/pdf")
    assert (other.title, other.text) == ("report.pdf", "")


def test_keyword_stuffing_shrinks_the_keyword_weight():
    assert keyword_factor(["a", "b"]) == 1.0
    assert keyword_factor(["a"] * 40) < 0.01
    processor = TextProcessor.default()
    honest = build_document(
        extract_content("u", b"<meta name=keywords content=okapi>", "text/html"), processor
    )
    stuffed = build_document(
        extract_content(
            "u", b"<meta name=keywords content='" + b"okapi," * 40 + b"'>", "text/html"
        ),
        processor,
    )
    assert stuffed.postings["okapi"].weight < honest.postings["okapi"].weight


def test_query_tokens():
    assert tokenize('a AND (b OR c*) NOT "x y" d') == [
        ("word", "a"), ("AND", "AND"), ("(", "("), ("word", "b"), ("OR", "OR"),
        ("word", "c*"), (")", ")"), ("NOT", "NOT"), ("phrase", "x y"), ("word", "d"),
    ]  # fmt: skip


# -- the crawled index -----------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("apple", {"/p1.html", "/p2.html", "/p6.html"}),
        ("apple AND cinnamon", {"/p1.html", "/p2.html"}),
        ("apple cinnamon", {"/p1.html", "/p2.html"}),  # implicit AND
        ("banana OR cherry", {"/p2.html", "/p3.html"}),
        ("pie NOT apple", {"/p4.html"}),
        ("pie AND NOT apple", {"/p4.html"}),
        ("(banana OR orange) juice", {"/p4.html"}),
        ("(banana OR cherry) NOT (tart OR orange)", {"/p2.html"}),
        ("pine*", {"/p5.html"}),
        ("app*", {"/p1.html", "/p2.html", "/p6.html"}),
        ("cherr* OR orang*", {"/p3.html", "/p4.html"}),
        ('"apple pie"', {"/p1.html"}),
        ("apple pie", {"/p1.html", "/p6.html"}),
        ('"pie apple"', set()),
        ("baking", {"/p1.html"}),  # stemming: Bake
        ("cars", {"/p7.html"}),  # synonym automobile → car, stemmed
        ("the", set()),  # only a stopword
        ("kangaroo", {"/notes.txt"}),
        ("report pdf", {"/report.pdf"}),
    ],
)
def test_operators_on_a_known_corpus(indexed, query, expected):
    found = paths(indexed, query)
    assert len(found) == len(set(found))
    assert set(found) == expected


def test_ranking_by_location(indexed):
    assert paths(indexed, "apple")[0] == "/p1.html"  # in the title
    assert paths(indexed, "zebra") == ["/w1.html", "/w2.html"]  # title > body (twice)
    assert paths(indexed, "giraffe") == ["/w3.html", "/w4.html"]  # heading > body
    assert paths(indexed, "okapi") == ["/w5.html", "/w6.html"]  # stuffed keywords lose


def test_several_words_prefer_the_shorter_page(indexed):
    # Equal weights tie, and ties go by URL; several plain words weigh in the length.
    assert paths(indexed, "quokka") == ["/l1.html", "/l2.html"]
    assert paths(indexed, '"quokka wombat"') == ["/l1.html", "/l2.html"]
    assert paths(indexed, "quokka wombat") == ["/l2.html", "/l1.html"]


def test_hits_carry_url_title_summary_and_the_graph_is_written(indexed):
    hits = SearchManager.search(indexed, "kangaroo OR report", limit=10)
    by_url = {hit["url"]: hit for hit in hits or []}
    assert by_url[f"{BASE}/notes.txt"]["title"] == "notes.txt"
    assert by_url[f"{BASE}/notes.txt"]["summary"] == "Kangaroo habitat notes"
    assert by_url[f"{BASE}/report.pdf"]["title"] == "report.pdf"
    (hit,) = SearchManager.search(indexed, "orchard", limit=10) or []
    assert hit["title"] == "Cherry tart" and hit["summary"] == "A cherry tart from the orchard."
    assert hit["score"] > 0
    assert len(SearchManager.search(indexed, "apple", limit=2) or []) == 2
    assert (indexed.output_dir / f"{HOST}.nodes.csv").exists()
    assert (indexed.output_dir / f"{HOST}.graphml").exists()
    with pytest.raises(QueryError):
        SearchManager.search(indexed, "(apple", limit=10)


def test_words_with_document_counts(indexed):
    assert SearchManager.words(indexed, "app") == [("apple", 3)]
    assert dict(SearchManager.words(indexed) or [])["pie"] == 3


# -- settings and the command line -----------------------------------------------


def test_search_settings_are_validated(tmp_path):
    base = {"manager": MANAGER, "sites": ["a.test"], "state_dir": str(tmp_path / "s")}
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({**base, "search": {"colour": "red"}}))
    with pytest.raises(ConfigError, match=r"search\.colour"):
        load_settings(path)
    path.write_text(yaml.safe_dump({**base, "search": {"language": "klingon"}}))
    with pytest.raises(ConfigError, match=r"search\.language"):
        load_settings(path)
    path.write_text(yaml.safe_dump({**base, "search": {"stopwords": "missing.txt"}}))
    with pytest.raises(ConfigError, match=r"search\.stopwords"):
        load_settings(path)
    (tmp_path / "stop.txt").write_text("zebra\n")
    path.write_text(yaml.safe_dump({**base, "search": {"stopwords": "stop.txt"}}))
    load_settings(path)  # relative to the settings file


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rccrawler", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_search_and_words(indexed, tmp_path):
    config = str(indexed.source)
    proc = _cli("search", "--config", config, "apple OR zebra", "--json", "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    hits = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(hits) == 3
    assert set(hits[0]) == {"url", "title", "summary", "score", "snippet", "marks"}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    proc = _cli("search", "--config", config, '"apple', 'pie"')
    assert proc.returncode == 0 and proc.stdout.startswith("1. Apple pie recipe"), proc.stdout
    proc = _cli("words", "--config", config, "pi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["pie\t3", "pineapple\t1"]
    for query, message in [
        ("(apple", "'(' is not closed"),
        ('"apple pie', "'\"' is not closed"),
        ("NOT apple", "only words to leave out"),
        ("NOT (apple OR pie)", "only words to leave out"),
        ("(" * 250 + "apple", "nests deeper than"),
        ("NOT " * 250 + "apple", "nests deeper than"),
        ("apple " * 2000, "longer than"),
        (" ".join(["apple"] * 65), "more than 64 words"),
    ]:
        proc = _cli("search", "--config", config, query)
        assert proc.returncode == 2, (query, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    webgraph = tmp_path / "webgraph.yaml"
    webgraph.write_text(yaml.safe_dump({"sites": ["a.test"], "state_dir": str(indexed.state_dir)}))
    proc = _cli("search", "--config", str(webgraph), "apple")
    assert proc.returncode == 2 and "has no command 'search'" in proc.stderr


def test_export_of_a_search_crawl_writes_its_files_and_leaves_the_index_alone(indexed):
    """``export`` opens the state read-only: the lists the crawl derived stay as they are."""
    state = indexed.state_dir / STATE_FILE
    before = state.read_bytes() if indexed.storage == "sqlite" else None
    nodes = indexed.output_dir / f"{HOST}.nodes.csv"
    nodes.unlink()
    proc = _cli("export", "--config", str(indexed.source))
    assert proc.returncode == 0, proc.stderr
    assert "exported the finished crawl" in proc.stdout and nodes.exists()
    if before is not None:
        assert state.read_bytes() == before
    assert paths(indexed, "apple")


# -- the web page (more in test_search_web.py) ------------------------------------


def test_cli_serve_answers_and_other_tasks_refuse(indexed, tmp_path):
    with subprocess.Popen(
        [sys.executable, "-m", "rccrawler", "serve", "--config", str(indexed.source),
         "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[3]
            with urllib.request.urlopen(url + "?q=orchard", timeout=10) as response:
                body = response.read().decode()
                headers = response.headers
            assert "Cherry tart" in body and f"{BASE}/p3.html" in body
            assert "<mark>orchard</mark>" in body
            assert "script-src" not in headers["Content-Security-Policy"]
            assert "default-src 'none'" in headers["Content-Security-Policy"]
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Server"] is None
        finally:
            proc.terminate()
    webgraph = tmp_path / "webgraph.yaml"
    webgraph.write_text(yaml.safe_dump({"sites": ["a.test"], "state_dir": str(tmp_path)}))
    done = _cli("serve", "--config", str(webgraph), "--port", "0")
    assert done.returncode == 2 and "no report.html" in done.stderr


# -- the same hits on every storage backend --------------------------------------

SAME_HITS_QUERIES = [
    "apple", "apple OR pie", "pie NOT apple", "app*", '"apple pie"', "(banana OR orange) juice",
    "zebra", "giraffe", "okapi", "kangaroo OR report", "cars", "baking", "orchard",
]  # fmt: skip


def x_robots_tag(resource: Resource, value: str) -> Resource:
    return Resource(resource.body, headers=(*resource.headers, ("X-Robots-Tag", value)))


def test_a_page_that_says_noindex_is_crawled_and_followed_but_not_indexed(serve, crawler):
    plain = (("Content-Type", "text/plain; charset=utf-8"),)
    meta = b'<meta name="robots" content="NOINDEX">'
    site = {
        "/meta.html": Resource(b"<html><head>" + meta + b"<title>Aardvark meta</title></head>"
                               b'<body>aardvark <a href="/behind.html">more</a></body></html>'),
        "/behind.html": page("Aardvark behind", "aardvark"),
        "/header.html": x_robots_tag(page("Aardvark header", "aardvark"), "noindex"),
        "/ours.html": x_robots_tag(page("Aardvark ours", "aardvark"), "rccrawler: noindex"),
        "/theirs.html": x_robots_tag(page("Aardvark theirs", "aardvark"), "otherbot: noindex"),
        "/notes.txt": x_robots_tag(Resource(b"aardvark notes", headers=plain), "noindex"),
        "/kept.txt": Resource(b"aardvark kept", headers=plain),
    }  # fmt: skip
    links = "".join(f'<a href="{path}">more</a>' for path in site if path != "/behind.html")
    index = Resource(f"<html><body>{links}</body></html>".encode())
    server = serve({HOST: {"/": index, **site}})
    result = crawler.run([HOST], server.resolve, manager=MANAGER)
    assert result.finished
    assert set(server.paths_for(HOST)) == {"/robots.txt", "/", *site}
    found = paths(result.manager.settings, "aardvark")
    assert sorted(found) == ["/behind.html", "/kept.txt", "/theirs.html"]


def test_both_backends_give_the_same_hits(serve, tmp_path, postgresql):
    server = serve({HOST: {"/": INDEX, **CORPUS}})
    hits = {}
    for name, storage in (("sqlite", "sqlite"), ("postgresql", postgresql)):
        runner = CrawlRunner(tmp_path / name, storage=storage)
        try:
            settings = runner.run([HOST], server.resolve, manager=MANAGER).manager.settings
            hits[name] = {q: SearchManager.search(settings, q, limit=100)
                          for q in SAME_HITS_QUERIES}  # fmt: skip
        finally:
            runner.discard()
    assert sum(len(found or []) for found in hits["sqlite"].values()) >= 20
    for query in SAME_HITS_QUERIES:
        sqlite_hits, pg_hits = hits["sqlite"][query] or [], hits["postgresql"][query] or []
        assert [(h["url"], h["title"], h["summary"]) for h in pg_hits] == [
            (h["url"], h["title"], h["summary"]) for h in sqlite_hits
        ], query
        assert [h["score"] for h in pg_hits] == pytest.approx([h["score"] for h in sqlite_hits])


# -- the index's storage -----------------------------------------------------------


def _execute(settings, statement: str) -> None:
    """Run one statement on a crawl's state, behind the DataManager's back."""
    if settings.storage == "sqlite":
        with contextlib.closing(sqlite3.connect(settings.state_dir / STATE_FILE)) as db:
            db.execute(statement)
            db.commit()
    else:
        with psycopg.connect(settings.storage) as conn:
            conn.execute(f"SET search_path TO {schema_for(settings.crawl_name)}")
            conn.execute(statement)


def test_an_open_index_sees_what_another_connection_writes(indexed):
    """The index a server keeps open counts its documents again only when the storage
    says it may have changed (SQLite's data_version, a count on PostgreSQL): a change
    made behind its back shows at the next query."""
    index = SearchManager.load_index(indexed)
    try:
        documents = index.document_count()
        assert index.lists_built()
        assert index.document_count() == documents
        _execute(indexed, "DELETE FROM search_built")
        assert index.document_count() == documents
        assert not index.lists_built()
        _execute(indexed, f"INSERT INTO search_built VALUES ({documents})")
        index.document_count()
        assert index.lists_built()
    finally:
        index.data.close()


def test_posting_lists_are_derived_when_the_crawl_ends(indexed):
    """A crawl writes one row per page; the term-keyed lists are derived at its end.
    Without them (a running or stopped crawl) a search scans the pages' rows, and finds
    the same hits."""
    with SearchManager.open_index(indexed) as index:
        assert index.lists_built()
        documents = index.document_count()
        assert index.data.task_rows("search_built") == [(documents,)]
        lists = index.data.task_row_total("search_lists")
        assert 0 < lists < 3 * documents  # a row per term (and batch), not per page and term
    finished = {query: SearchManager.search(indexed, query, limit=100)
                for query in SAME_HITS_QUERIES}  # fmt: skip
    assert sum(len(hits or []) for hits in finished.values()) >= 20
    words = SearchManager.words(indexed)
    _execute(indexed, "DELETE FROM search_built")
    with SearchManager.open_index(indexed) as index:
        assert not index.lists_built()
    for query, hits in finished.items():
        assert SearchManager.search(indexed, query, limit=100) == hits, query
    assert SearchManager.words(indexed) == words
    assert SearchManager.words(indexed, "app") == [("apple", 3)]


def test_a_state_of_the_old_layout_is_refused_with_what_to_do(indexed):
    """A state whose search tables have other columns (an older version of the task)
    is never misread: searching or resuming it says to crawl again."""
    _execute(indexed, "ALTER TABLE search_docs DROP COLUMN word_terms")
    with pytest.raises(StateError, match=r"task table search_docs .*--fresh"):
        SearchManager.search(indexed, "apple")


def test_positions_round_trip_packed():
    from plugins.search.index import decode_positions, encode_positions

    for positions in ([], [0], [5, 6, 7], [300, 301, 305], [3, 200, 201, 70_000, 70_001, 2**31]):
        encoded = encode_positions(positions)
        assert decode_positions(encoded) == positions
        for limit in (1, 2, 10):
            assert decode_positions(encoded, limit) == positions[:limit]
    assert len(encode_positions(list(range(0, 1000, 3)))) == 1 + 2 * (1000 // 3 + 1)  # 2 bytes
    assert len(encode_positions([1, 70_000])) == 1 + 2 * 4


def test_caps_on_words_and_positions_are_recorded():
    processor = TextProcessor.default()
    body = " ".join(["zebra"] * 50 + ["okapi"] * 50)
    content = extract_content("u", f"<title>Zoo</title><p>{body}</p>".encode(), "text/html")
    document = build_document(content, processor, max_words=31, max_positions=10)
    # The title's word and the first 30 body words are indexed; "okapi" is cut.
    assert "okapi" not in document.postings and "zebra" in document.postings
    assert len(document.postings["zebra"].positions) == 10
    assert document.truncated == "words 101>31; positions of 1 terms>10"
    assert document.text.split() == ["zebra"] * 30
    full = build_document(content, processor)
    assert full.truncated == "" and len(full.postings["okapi"].positions) == 50


@pytest.mark.parametrize("key", ["max_words", "partitions"])
@pytest.mark.parametrize("value", [0, -1, True, "many", 10**9])
def test_cap_settings_are_validated(tmp_path, key, value):
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({"manager": MANAGER, "sites": ["a.test"],
                                    "search": {key: value}}))  # fmt: skip
    with pytest.raises(ConfigError, match=rf"search\.{key}"):
        load_settings(path)


def test_phrase_positions_scanned_are_bounded(indexed, monkeypatch):
    import plugins.search.query as query

    assert paths(indexed, '"apple pie"') == ["/p1.html"]
    # p1 holds "apple" and "pie" twice each (title, body): four positions to scan.
    monkeypatch.setattr(query, "MAX_PHRASE_POSITIONS", 3)
    assert paths(indexed, '"apple pie"') == []
    assert paths(indexed, "apple pie") == ["/p1.html", "/p6.html"]  # plain words: no scan


PAGING_QUERIES = ("pie", "apple OR cinnamon OR pie", "quokka", "pie NOT cherry", "pine* OR apple")


def test_each_page_of_hits_is_the_slice_of_the_whole_ranking(indexed):
    """Only the ties reaching into the page asked for are read: every page is still
    the slice of the whole ranking, ties ordered by URL."""
    with SearchManager.open_index(indexed) as index:
        evaluator = QueryEvaluator(index, text_processor(indexed))
        for query in PAGING_QUERIES:
            whole = evaluator.results(query, None)
            assert whole.total == len(whole.hits) >= 2, query
            key = [(-hit.score, hit.url) for hit in whole.hits]
            assert key == sorted(key), query
            for size in (1, 2, 3):
                for offset in range(0, whole.total + 1):
                    page = evaluator.results(query, size, offset)
                    assert page.hits == whole.hits[offset : offset + size], (query, size)


def test_a_long_lived_index_caches_and_notices_new_documents(indexed):
    """A SearchIndex kept open (``serve``) keeps decoded posting lists, within their
    bound, and drops them when the documents or the lists change."""
    with SearchManager.open_index(indexed) as index:
        evaluator = QueryEvaluator(index, text_processor(indexed))
        first = {query: evaluator.results(query, None) for query in SAME_HITS_QUERIES}
        assert 0 < len(index.cache) <= index.cache.budget
        evaluator = QueryEvaluator(index, text_processor(indexed))
        assert {query: evaluator.results(query, None) for query in first} == first
        _execute(indexed, "DELETE FROM search_built")
        evaluator = QueryEvaluator(index, text_processor(indexed))  # looks again
        assert not index.lists_built()
        assert len(index.cache) == 0
        assert {query: evaluator.results(query, None) for query in first} == first
        assert len(index.cache) == 0  # scanned postings are not kept


def test_the_posting_cache_keeps_the_lists_asked_for_most_within_its_bound():
    """A list comes in only when its term was asked for more often than each list it
    would push out, the least recently used first; a list larger than the bound never."""
    cache = PostingCache(5)
    postings = {name: dict.fromkeys(range(size), Posting(1.0)) for name, size in
                (("a", 2), ("b", 2), ("c", 2), ("huge", 6))}  # fmt: skip

    def ask(name: str) -> dict[PageId, Posting] | None:
        """What a search does: look in the cache, and put the list there on a miss."""
        found = cache.get(name)
        if found is None:
            cache.put(name, postings[name])
        return found

    assert ask("a") is None and ask("b") is None
    assert len(cache) == 4
    assert ask("a") is postings["a"]  # a: asked twice, b: once
    assert ask("c") is None  # once, no more than b: it stays out, and b stays in
    assert cache.get("c") is None and ask("b") is postings["b"]
    assert ask("c") is None  # c: 3 asks, a: 2, the least recently used: a goes
    assert cache.get("c") is postings["c"]
    assert cache.get("a") is None
    assert cache.get("b") is postings["b"]
    assert len(cache) == 4
    for _ in range(3):
        assert ask("huge") is None  # larger than the whole bound: never kept
    assert len(cache) == 4
    cache.clear()
    assert len(cache) == 0
    assert cache.get("b") is None


def test_a_round_of_queries_larger_than_the_posting_cache_still_finds_lists_there():
    """Six terms asked in turn, room for five: LRU pushed out each list just before its
    term came round again, and found none; the cache keeps five of them."""
    cache = PostingCache(10)
    postings = {term: dict.fromkeys(range(2), Posting(1.0)) for term in "abcdef"}
    hits = 0
    for _round in range(5):
        for term in postings:
            found = cache.get(term)
            if found is None:
                cache.put(term, postings[term])
            hits += found is not None
    assert hits == 4 * 5
    assert len(cache) == 10


def _smallest_window(positions: list[list[int]]) -> float:
    """:func:`closeness` by brute force: every window between two positions."""
    spots = sorted({p for plist in positions for p in plist})
    widths = [right - left + 1 for left in spots for right in spots if right >= left
              and all(any(left <= p <= right for p in plist) for plist in positions)]  # fmt: skip
    return len(positions) / min(widths) if widths else 0.0


def test_closeness_is_the_smallest_window_holding_every_term():
    rng = random.Random(16)
    for _ in range(300):
        spots = rng.sample(range(60), rng.randint(0, 25))
        cuts = sorted(rng.randint(0, len(spots)) for _ in range(rng.randint(1, 3)))
        lists = [sorted(spots[a:b]) for a, b in zip([0, *cuts], [*cuts, len(spots)], strict=True)]
        if rng.random() < 0.2:
            lists.append(lists[0])  # a word twice in the query
        assert closeness(lists) == _smallest_window(lists), lists


def test_a_snippet_passes_words_as_its_letter_runs():
    rng = random.Random(16)
    for _ in range(40):
        text = "".join(rng.choice("ab é_1 .,-İß\u0301\n漢") for _ in range(rng.choice((50, 9000))))
        count = len(WORD.findall(text))
        for start in (0, 31, 32, 33, count // 2, count - 1, count, count + 3):
            expected = [m.span() for m in islice(WORD.finditer(text), start, start + 30)]
            at, rest = skip_words(text, max(0, start))
            found = [m.span() for m in islice(WORD.finditer(text, at), rest, rest + 30)]
            assert found == expected
