"""The command line (SPEC §3): the parser (main), the crawl runner with its signal
handling and live view (runner, signals), and one module per subcommand. A task adds
its own subcommands through ``ApplicationManager.commands``."""

EXIT_OK = 0
"""The crawl ran and every site fetched something (or: the command did what it said)."""
EXIT_FAILED = 1
"""Some site failed entirely (unreachable, robots.txt 5xx), or writing the output failed."""
EXIT_USAGE = 2
"""Usage, settings or state error: nothing was crawled or written."""
EXIT_INTERRUPTED = 130
"""Interrupted twice: stopped at once (the finished pages are saved)."""
EXIT_OUTPUT_GONE = 141
"""The reader of standard output went away (``| head``): what was left to print was
dropped. 128 + SIGPIPE, what a shell reports for a C tool that a closed pipe ends."""
EXIT_CODES = """exit codes:
  0    the crawl ran and every site fetched something (or it was stopped, to resume)
  1    some site failed entirely (unreachable, robots.txt 5xx) or writing output failed
  2    usage, settings or state error (nothing crawled or written)
  130  interrupted twice (Ctrl-C, Ctrl-C)
  141  the reader of its output went away (| head): the rest was not printed"""

__all__ = [
    "EXIT_CODES", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_OUTPUT_GONE", "EXIT_USAGE",
]  # fmt: skip
