"""In-degree and PageRank of the web graph (SPEC §8), checked against networkx."""

from __future__ import annotations

import random

import networkx as nx
import pytest
from auditsite import AUDIT, audit_sites
from support.sites import generated_site

from plugins.webgraph.analysis import analyse
from rccrawler.unloaders import host_file_stem


def networkx_ranks(nodes: list[int], arcs: list[tuple[int, int]]) -> dict[int, float]:
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(arcs)
    return nx.pagerank(graph, alpha=0.85, tol=1e-13, max_iter=1000)  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", range(5))
def test_pagerank_matches_networkx_on_random_graphs(seed):
    rng = random.Random(seed)
    nodes = rng.sample(range(1, 10_000), 60)
    arcs = sorted({(rng.choice(nodes), rng.choice(nodes)) for _ in range(150)})  # self-loops too
    dangling = set(nodes) - {s for s, _ in arcs}
    assert dangling, "the graph should have dangling pages"
    result = analyse(nodes, arcs)
    expected = networkx_ranks(nodes, arcs)
    assert sum(result.pagerank) == pytest.approx(1.0, abs=1e-12)
    for node in nodes:
        in_degree, rank = result.of(node) or (None, None)
        assert in_degree == sum(1 for _, t in arcs if t == node)
        assert rank == pytest.approx(expected[node], abs=1e-10)


def test_small_graphs():
    assert len(analyse([], []).pagerank) == 0
    alone = analyse([7], [])
    assert alone.of(7) == (0, pytest.approx(1.0))
    # Arcs to pages that are not nodes do not count; a cycle ranks evenly.
    cycle = analyse([1, 2, 3], [(1, 2), (2, 3), (3, 1), (3, 99), (99, 1)])
    assert [cycle.of(n) for n in (1, 2, 3)] == [(1, pytest.approx(1 / 3))] * 3
    assert cycle.of(99) is None
    with pytest.raises(ValueError, match="unique"):
        analyse([1, 1], [])


def test_nodes_csv_and_graphml_carry_in_degree_and_pagerank(serve, crawler):
    server = serve(audit_sites())
    result = crawler.run(["a.test"], server.resolve, **AUDIT)
    assert result.finished
    graph = result.graph("a.test")
    assert list(graph.nodes[0])[-2:] == ["in_degree", "pagerank"]
    nodes = {int(n["id"]): n for n in graph.nodes if not n["duplicate_of"]}
    assert {n["url"] for n in nodes.values()} == {
        f"http://a.test{p}" for p in ("/", "/a", "/b", "/c", "/contact", "/q?a=1&b='x'")
    }
    expected = networkx_ranks(list(nodes), graph.arcs)
    assert sum(float(n["pagerank"]) for n in nodes.values()) == pytest.approx(1.0, abs=1e-9)
    for node_id, node in nodes.items():
        assert int(node["in_degree"]) == sum(1 for _, t in graph.arcs if t == node_id)
        assert float(node["pagerank"]) == pytest.approx(expected[node_id], abs=1e-9)
    # /c is linked from /, /b, and (as its duplicate /c-copy) from /b again: one arc.
    by_url = {n["url"]: n for n in nodes.values()}
    assert by_url["http://a.test/c"]["in_degree"] == "2"
    duplicate = next(n for n in graph.nodes if n["duplicate_of"])
    assert (duplicate["in_degree"], duplicate["pagerank"]) == ("", "")

    graphml = nx.read_graphml(result.output_dir / f"{host_file_stem('a.test')}.graphml")
    for node_id, node in nodes.items():
        attributes = graphml.nodes[f"n{node_id}"]
        assert attributes["in_degree"] == int(node["in_degree"])
        assert attributes["pagerank"] == float(node["pagerank"])


def test_pagerank_of_a_generated_site_matches_networkx(serve, crawler):
    server = serve({"g.test": generated_site("g.test", 120, fanout=5, seed=3)})
    result = crawler.run(["g.test"], server.resolve)
    graph = result.graph("g.test")
    nodes = [int(n["id"]) for n in graph.nodes if not n["duplicate_of"]]
    expected = networkx_ranks(nodes, graph.arcs)
    ranks = {int(n["id"]): float(n["pagerank"]) for n in graph.nodes if not n["duplicate_of"]}
    assert ranks == pytest.approx(expected, abs=1e-9)
