"""`python -m mla_planner.verify.launcher [torchrun options] -m mla_planner.cli verify ...`: torchrun itself
(torch.distributed.run's own parser and launch, every option as torchrun takes it), with a failing rank reported
as one line per rank instead of torchrun's ChildFailedError traceback and its per-failure log lines. What
`verify --print-launch` prints.

Each rank prints its own `error:` line (verify's one-line contract; a rank whose results rank 0 could not gather
says why, report.rank_line); this launcher adds one line per failed rank: its rank, local rank and pid, and its
exit status or the signal that ended it (torchrun sends SIGTERM to the other ranks once one has failed). Its own
exit status follows verify's contract from the ranks that exited by themselves: 2 when each of them exited 2
(bad input), else 1 (a check failed or errored, or every failed rank was ended by a signal); 0 when none failed.
torchrun's own failures (a rendezvous that never formed, a port in use) are one `error: torchrun: ...` line, 1.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Optional

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

QUIET_LOGGERS = ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")


def failure_lines(failures: dict) -> list[str]:
    """One `error:` line per failed rank, in rank order, from ChildFailedError.failures (rank -> ProcessFailure)."""
    lines = []
    for rank, f in sorted(failures.items()):
        code = f.exitcode
        if code is not None and code < 0:
            try:
                ended = f"was ended by {signal.Signals(-code).name}"
            except ValueError:
                ended = f"was ended by signal {-code}"
            ended += " (torchrun stops the other ranks once one fails)" if -code == signal.SIGTERM else ""
        else:
            ended = f"exited with status {code}"
        lines.append(f"error: rank {rank} (local rank {f.local_rank}, pid {f.pid}) {ended}")
    return lines


def exit_status(failures: dict) -> int:
    """2 when every rank that exited by itself exited 2 (bad input), else 1; 0 without failures."""
    if not failures:
        return 0
    own = [f.exitcode for f in failures.values() if f.exitcode is not None and f.exitcode >= 0]
    return 2 if own and all(code == 2 for code in own) else 1


def main(argv: Optional[list[str]] = None) -> int:
    """Run torchrun on `argv` (default: this process's arguments); on a failed rank, its lines and status."""
    for name in QUIET_LOGGERS:    # torchrun logs each failure (and the SIGTERMs it sends) before raising
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(sys.argv[1:] if argv is None else argv))
    except ChildFailedError as exc:
        sys.stdout.flush()
        for line in failure_lines(exc.failures):
            print(line, file=sys.stderr)
        return exit_status(exc.failures)
    except Exception as exc:  # noqa: BLE001 - a rendezvous that never formed, a port in use: one line, not a traceback
        text = str(exc).strip().splitlines()
        print(f"error: torchrun: {type(exc).__name__}: {text[0] if text else ''}".rstrip(": "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
