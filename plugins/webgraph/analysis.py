"""Link analysis of a site's web graph: in-degree and PageRank (SPEC §8, ``H.nodes.csv``).

Pure computation over page ids and arcs, kept in flat arrays (one ``array`` entry per
node and per arc, not a dict per edge), so a graph of a million arcs costs a few
megabytes. The unloaders read the graph from the DataManager once per site and share
the result through :func:`site_analysis`.
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING

from rccrawler.policy import is_node
from rccrawler.unloaders import shared_result, site_arcs, site_pages

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rccrawler.context import CrawlContext

DAMPING = 0.85
"""The probability that the random surfer follows a link (Brin & Page; networkx's alpha)."""
TOLERANCE = 1e-12
"""Power iteration stops when the L1 change of the vector falls below this."""
MAX_ITERATIONS = 1000
"""A bound on the power iteration (0.85**170 is already below 1e-12)."""


@dataclass(frozen=True, slots=True)
class LinkAnalysis:
    """In-degree and PageRank of every node of one site's graph.

    ``ids``, ``in_degree`` and ``pagerank`` are parallel arrays in the order the node
    ids were given; :meth:`of` looks one page up.
    """

    ids: array[int]
    in_degree: array[int]
    pagerank: array[float]
    iterations: int
    """Power iterations until convergence (0 for an empty graph)."""
    index: dict[int, int]
    """Page id to position in the arrays."""

    def of(self, page_id: int) -> tuple[int, float] | None:
        """(in_degree, pagerank) of a node, None for a page that is not one."""
        position = self.index.get(page_id)
        if position is None:
            return None
        return self.in_degree[position], self.pagerank[position]

    def top(self, count: int) -> list[tuple[int, int, float]]:
        """The ``count`` nodes of highest PageRank as (id, in_degree, pagerank),
        ties broken by in-degree, then by id."""
        order = sorted(
            range(len(self.ids)), key=lambda i: (-self.pagerank[i], -self.in_degree[i], self.ids[i])
        )
        return [(self.ids[i], self.in_degree[i], self.pagerank[i]) for i in order[:count]]


def analyse(
    node_ids: Iterable[int],
    arcs: Iterable[tuple[int, int]],
    *,
    damping: float = DAMPING,
    tolerance: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> LinkAnalysis:
    """In-degree and PageRank of a directed graph.

    Arcs whose ends are not both nodes are ignored; an arc given twice counts twice
    (the web graph's arcs are unique already). A node without out-links (dangling)
    spreads its rank evenly over every node, as networkx's ``pagerank`` does by
    default, so the ranks always sum to 1.

    Args:
        node_ids: the graph's nodes, each once.
        arcs: (from, to) pairs of node ids.
        damping: probability of following a link rather than jumping anywhere.
        tolerance: stop when the L1 change of one iteration is below this.
        max_iterations: stop after this many iterations even if not converged.

    Returns:
        The arrays, in the order of ``node_ids``.
    """
    ids = array("q", node_ids)
    index = {page_id: position for position, page_id in enumerate(ids)}
    if len(index) != len(ids):
        raise ValueError("node ids must be unique")
    count = len(ids)
    sources, targets = array("q"), array("q")
    out_degree = array("q", bytes(8 * count))
    in_degree = array("q", bytes(8 * count))
    for source, target in arcs:
        s, t = index.get(source), index.get(target)
        if s is None or t is None:
            continue
        sources.append(s)
        targets.append(t)
        out_degree[s] += 1
        in_degree[t] += 1
    if count == 0:
        return LinkAnalysis(ids, in_degree, array("d"), 0, index)
    # Slot ``count`` of the rank and of what nodes send is always 0.0: every getter below
    # also reads it, so each returns a tuple, even for one index or none, and a whole
    # round is map() over C callables, with no Python step per node or per arc (a site
    # has ten or more arcs per node). Adding 0.0 leaves every sum as it was.
    dangling = itemgetter(*(i for i in range(count) if out_degree[i] == 0), count, count)
    rank = [1.0 / count] * count + [0.0]
    # Each arc carries damping * rank[source] / out_degree[source]: precompute 1 / out_degree.
    share = [1.0 / d if d else 0.0 for d in out_degree] + [0.0]
    # Each node gathers what its in-links send with one itemgetter call a round.
    incoming: list[list[int]] = [[] for _ in range(count)]
    for s, t in zip(sources, targets, strict=True):
        incoming[t].append(s)
    gathers = [itemgetter(*found, count, count) for found in incoming]
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        base = (1.0 - damping + damping * sum(dangling(rank))) / count
        send = list(map(operator.mul, map(damping.__mul__, rank), share))  # along each arc
        new = [*map(base.__add__, map(sum, map(operator.call, gathers, repeat(send)))), 0.0]
        change = sum(map(abs, map(operator.sub, new, rank)))
        rank = new
        if change < tolerance:
            break
    del rank[count]
    total = sum(rank)
    normalized = array("d", (value / total for value in rank))  # rounding drift only
    return LinkAnalysis(ids, in_degree, normalized, iterations, index)


def site_analysis(context: CrawlContext, host: str) -> LinkAnalysis:
    """The link analysis of one site of a finished crawl, computed once per crawl
    (the CSV, GraphML and HTML unloaders all need it)."""

    def compute() -> LinkAnalysis:
        # A duplicate is not a node of its own: its links count for the page it duplicates.
        pages = site_pages(context, host)
        nodes = (p.id for p in pages if is_node(p) and p.replace_id is None)
        return analyse(nodes, site_arcs(context, host))  # the arcs of H.arcs.csv

    return shared_result(context, "webgraph.analysis", host, compute)
