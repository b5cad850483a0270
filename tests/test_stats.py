"""The statistics snapshot: each site's numbers, and the memo that spares making them anew."""

from __future__ import annotations

from rccrawler.data.stats import StateCounts, StatsMemo, snapshot
from rccrawler.records import HostData, PageState, RobotsState


def test_a_snapshot_makes_anew_only_the_sites_whose_numbers_changed():
    hosts = [HostData(host=f"h{n}.test", robots_state=RobotsState.READY) for n in range(3)]
    counts = [StateCounts({PageState.WAITING: 5, PageState.DONE: 2}, {}) for _ in hosts]
    known: StatsMemo = {}
    first = snapshot([(h, c, 0) for h, c in zip(hosts, counts, strict=True)], 1.0, known)
    counts[1].by_state[PageState.WAITING] -= 1
    counts[1].by_state[PageState.RUNNING] = 1
    hosts[2].stop_reason = "no waiting links left"
    second = snapshot([(h, c, 0) for h, c in zip(hosts, counts, strict=True)], 2.0, known)
    assert second.hosts[0] is first.hosts[0]
    assert (second.hosts[1].waiting, second.hosts[1].running) == (4, 1)
    assert (first.hosts[1].waiting, first.hosts[1].running) == (5, 0)  # frozen, not changed
    assert second.hosts[2].stop_reason == "no waiting links left" != first.hosts[2].stop_reason
    # The same numbers with a memo or without.
    assert snapshot([(h, c, 0) for h, c in zip(hosts, counts, strict=True)], 2.0) == second
