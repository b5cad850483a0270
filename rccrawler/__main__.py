"""`python -m rccrawler` is the `rccrawler` command."""

from __future__ import annotations

import sys

from rccrawler.commands.main import main

sys.exit(main())
