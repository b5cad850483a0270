"""What in-degree and PageRank cost the unloaders: plugins.webgraph.analysis on big graphs.

    python benchmarks/link_analysis.py [--nodes 10000 100000] [--fanout 10] [--rounds 3]

The graph is shaped like a site: a breadth-first tree from page 0 (so every page is
reachable) plus random links, with a tenth of the pages dangling (no out-links). Prints,
per size, the median and range of the wall time of ``analyse`` over the rounds and the
power iterations it took.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from plugins.webgraph.analysis import analyse


def site_graph(nodes: int, fanout: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    arcs = {(page // fanout, page) for page in range(1, nodes)}
    dangling = set(rng.sample(range(nodes), nodes // 10))
    for page in range(nodes):
        if page not in dangling:
            arcs.update((page, rng.randrange(nodes)) for _ in range(fanout - 1))
    return sorted(arcs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--fanout", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'nodes':>9} {'arcs':>10} {'iter':>5} {'median s':>9} {'range s':>13}")
    for nodes in args.nodes:
        arcs = site_graph(nodes, args.fanout)
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            result = analyse(range(nodes), arcs)
            times.append(time.perf_counter() - started)
        print(f"{nodes:>9} {len(arcs):>10} {result.iterations:>5} {statistics.median(times):>9.2f} "
              f"{min(times):>6.2f}–{max(times):<6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
