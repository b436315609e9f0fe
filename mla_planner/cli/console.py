"""The rich console the reports print their tables to (plan, memory, compare, show, emit, check-log, lint,
verify); the listings and the error line do without rich (cli/common.py)."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def console() -> Console:
    """Rich console on stdout. Width follows the terminal; piped into a file or another program (where rich
    would assume 80 columns) it is 120 unless COLUMNS says otherwise, so tables stay readable."""
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
    return Console(highlight=False, emoji=False, soft_wrap=False, width=width)


def stderr_console() -> Console:
    """Rich console on stderr, for a warning or an error beside a report (or beside JSON on stdout)."""
    return Console(stderr=True, highlight=False, emoji=False)
