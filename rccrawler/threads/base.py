"""CrawlerThread: a named worker that repeats one step until the crawl's stop Event is set."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, ClassVar

from rccrawler.cpus import ThreadCores
from rccrawler.exceptions import StateError
from rccrawler.web.robots import RobotsRules, product_token

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.policy import ScopeRules

logger = logging.getLogger(__name__)


class CrawlerThread(threading.Thread):
    """Base of every worker thread.

    Subclasses override step() (one unit of work, True when it did some) and
    optionally close(). A crash is captured for the manager, which re-raises
    it after joining, and stops the whole crawl.

    Args:
        context: what the thread may use of its crawl (settings, storage, fetcher, stop).
        index: the thread's number among its kind, for its name.
    """

    idle_wait: ClassVar[float] = 0.05
    """Seconds to wait when step() found nothing to do."""
    work_kind: ClassVar[str] = "download"
    """What an idle thread waits for in DataManager.wait_for_work()."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(name=f"{type(self).__name__}-{index}", daemon=True)
        self.context = context
        self.data = context.data
        self.settings = context.settings
        self.stopping = context.stopping
        self.error: BaseException | None = None
        self.robots_token = product_token(self.settings.crawl.user_agent)
        """The crawler's name in robots rules: its User-Agent's product token."""
        self.retiring = False
        """Set by :meth:`retire`: the thread ends after the step it is in (an automatic
        pool shrinking), so a page it holds is stored, never lost or taken twice."""
        self.cores: ThreadCores | None = None
        """The CPUs this thread runs on, when ``threads.one_core`` keeps it on the crawl's
        core (see :class:`rccrawler.cpus.CrawlCores`)."""

    def run(self) -> None:
        try:
            if self.context.cores is not None:
                self.cores = self.context.cores.keep_this_thread()
            while not self.stopping.is_set() and not self.retiring:
                if not self.step():
                    self.data.wait_for_work(self.idle_wait, self.work_kind)
        except StateError as exc:
            # The state cannot be written (disk full...): the manager reports it, once.
            self.error = exc
            logger.debug("%s stopped: %s", self.name, exc)
            self.context.abort()
        except BaseException as exc:
            self.error = exc
            logger.exception("%s crashed; stopping the crawl", self.name)
            self.context.abort()
        finally:
            if self.cores is not None:
                self.cores.crawl.leave()
            self.close()

    def retire(self) -> None:
        """End this thread once its current step is done (from another thread)."""
        self.retiring = True

    def robots_for(self, host: str) -> RobotsRules:
        """The host's robots rules, parsed once for all threads (``CrawlContext.robots_rules``;
        two threads that race both parse, and either copy is right).

        A page is leased only after its host's robots.txt was stored, and it is
        stored once a crawl, so the first answer holds for the whole run.
        """
        shared = self.context.robots_rules
        rules = shared.get(host)
        if rules is None:
            if not self.settings.crawl.obey_robots:
                rules = RobotsRules.allow_all()
            else:
                data = self.data.host(host)
                text = data.robots_text if data is not None else ""
                rules = RobotsRules.parse(text, self.settings.crawl.user_agent)
            shared[host] = rules
        return rules

    def scope_for(self, host: str) -> ScopeRules:
        """The site's include/exclude rules (its own ``sites:`` overrides, else ``crawl:``)."""
        scope = self.context.scope_rules.get(host)
        if scope is None:
            scope = self.context.scope_rules[host] = self.settings.crawl_for(host).scope
        return scope

    def step(self) -> bool:
        """Do one unit of work; return False when there was nothing to do."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the thread holds. No-op by default."""
