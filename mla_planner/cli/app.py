"""The `mla-plan` command line: parse, call the library, render. No modelling here."""

from __future__ import annotations

import errno
import gc
import importlib
import io
import os
import signal
import sys

import click

from mla_planner import __version__
from mla_planner.cli.params import Context, click_command

# Every command: (module, function, the first paragraph of its docstring). A command's module is imported
# only when that command runs (or shows its own --help), so `mla-plan --help` and `mla-plan models` do
# not pay for the search, the engines and the renderers; tests/test_architecture.py holds each summary
# equal to its docstring.
COMMANDS = {
    "plan": ("mla_planner.cli.plan", "plan_cmd",
             "Search every layout of MODEL on TOPOLOGY, choose every launch knob, rank, explain."),
    "models": ("mla_planner.cli.models", "models_cmd", "List the built-in model specs."),
    "topologies": ("mla_planner.cli.topologies", "topologies_cmd", "List the built-in cluster topologies."),
    "show": ("mla_planner.cli.show", "show_cmd",
             "Show a model's derived facts (parameters, weight bytes, KV bytes per token) or a topology."),
    "compare": ("mla_planner.cli.compare", "compare_cmd",
                "Compare layouts on the seed article's metrics: concurrency, throughput, decode step, network "
                "wait,\nmemory utilization (+ TPOT per user and TTFT), computed from the step and memory models."),
    "memory": ("mla_planner.cli.memory", "memory_cmd",
               "Per-GPU memory and the KV capacity the engine will report, with a FITS / DOES NOT FIT verdict."),
    "emit": ("mla_planner.cli.emit", "emit_cmd", "Write ready-to-run launch scripts for one plan candidate."),
    "verify": ("mla_planner.cli.verify", "verify_cmd",
               "Check a plan on the real GPUs: environment, memory fit, MLA attention, dense GEMMs and (under "
               "torchrun)\ncollectives, each measured against the planner's prediction, with --write-calibration "
               "to feed it back."),
    "check-log": ("mla_planner.cli.logcheck", "check_log_cmd",
                  "Read an engine's log: what it runs and sized; with --plan, held against the launched candidate."),
    "lint": ("mla_planner.cli.lint", "lint_cmd",
             "Check your own vLLM or SGLang launch command against the model, the cluster and the engines' rules."),
    "calibrate": ("mla_planner.cli.calibrate", "calibrate_cmd",
                  "Fit the planner to bench.sh's results at two or more concurrencies and write a calibration file."),
    "validate": ("mla_planner.cli.validate", "validate_cmd",
                 "Run every published measurement the project holds through the planner's own code: predicted vs "
                 "published."),
}
SETTINGS = {"lint": {"allow_extra_args": True, "ignore_unknown_options": True}}


HELP = dict(help_option_names=["-h", "--help"], max_content_width=120)


# Writing the report to stdout failed: a full disk, a quota, a file-size limit, an I/O error (a closed pipe ends the
# process by SIGPIPE instead: main)
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def load_command(name: str) -> click.Command:
    """The click command of NAME, built from its module's function (imported now). Python's cyclic collector is
    paused for the import: a command's modules build a hundred or so classes and tables that all stay alive, so
    the collections the allocations trigger free nothing (about 8 ms of a `plan`'s start on a 2-core machine:
    benchmarks/startup.py)."""
    module, attr, _ = COMMANDS[name]
    collecting = gc.isenabled()
    gc.disable()
    try:
        function = getattr(importlib.import_module(module), attr)
    finally:
        if collecting:
            gc.enable()
    return click_command(name, function, HELP | SETTINGS.get(name, {}))


class PipeClosed(Exception):
    """stdout's reader went away (`mla-plan verify | head`)."""


class PipeAwareStdout:
    """verify's stdout: a closed pipe raises PipeClosed, which click does not turn into its exit 1 (an OSError it
    does), so the command ends with the status SIGPIPE would give it, 141, as the others do (main); verify keeps
    SIGPIPE ignored for its torch.distributed sockets."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise PipeClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise PipeClosed from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class Commands(click.Group):
    """The commands, loaded when they run: the listing in `--help` shows COMMANDS' summaries. Click's own
    usage errors (unknown option, missing or mistyped value, extra argument) come out as one `error:` line
    on stderr with exit 2, like the library's PlanError (cli.common.guard)."""

    context_class = Context

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        summary = " ".join(COMMANDS[name][2].split())
        stand_in = click.Command(name, short_help=summary)
        stand_in.context_class = Context
        return stand_in   # a stand-in that lists it; resolve_command runs it

    def resolve_command(self, ctx, args):
        name, _, rest = super().resolve_command(ctx, args)
        return name, load_command(name), rest

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if isinstance(getattr(sys.stdout, "buffer", None), io.FileIO):
            # unbuffered (python -u, PYTHONUNBUFFERED): a raw write can be short (a file-size limit) and the text
            # layer drops the rest unseen; a buffered writer writes it all or raises, line by line as before
            sys.stdout = io.TextIOWrapper(io.BufferedWriter(sys.stdout.buffer), encoding=sys.stdout.encoding,
                                          errors=sys.stdout.errors, line_buffering=True)
        if (sys.argv[1:] if args is None else list(args))[:1] == ["verify"]:
            sys.stdout = PipeAwareStdout(sys.stdout)
        try:
            rv = super().main(args=args, prog_name=prog_name or "mla-plan", complete_var=complete_var,
                              standalone_mode=False, **extra)
            sys.stdout.flush()      # a full disk or a file-size limit under `> FILE` fails here, not silently at exit
        except click.ClickException as exc:
            where = exc.ctx.command_path if getattr(exc, "ctx", None) else "mla-plan"
            print(f"error: {where}: {' '.join(exc.format_message().split())}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except PipeClosed:
            sys.stdout = open(os.devnull, "w")    # nothing more to write, and no complaint at exit
            sys.exit(128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1)
        except click.Abort:         # Ctrl-C: the shell's 128 + SIGINT, not 1 (plan's "no candidate meets the targets")
            print("error: aborted", file=sys.stderr)
            sys.exit(130)
        except OSError as exc:
            if exc.errno not in OUTPUT_ERRNOS:
                raise
            sys.stdout = open(os.devnull, "w")    # nothing more to lose at exit, and no second complaint
            print(f"error: cannot write the output ({exc.strerror}); what was written is incomplete", file=sys.stderr)
            sys.exit(2)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group("mla-plan", cls=Commands, invoke_without_command=True, context_settings=HELP)
@click.version_option(__version__, "--version", prog_name="mla-plan", message="%(prog)s %(version)s",
                      help="Print the version and exit.")
@click.pass_context
def app(ctx: click.Context) -> None:
    """Plan, launch and verify Multi-head Latent Attention deployments (DeepSeek-V2/V3/R1, Kimi-K2) on vLLM
    and SGLang. Start with `mla-plan plan` (no arguments: DeepSeek-V3 on 2 x 8 H100 with InfiniBand)."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def main() -> None:
    # A reader that closes the pipe early (`mla-plan plan | head`) ends the process as it ends `yes | head`:
    # by SIGPIPE, status 141, silently. Click would exit 1, which here means "no candidate meets the targets".
    # Not for verify: its torch.distributed sockets must see a closed peer as an error, not a signal.
    if hasattr(signal, "SIGPIPE") and sys.argv[1:2] != ["verify"]:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        app()
    finally:
        # At exit Python collects the cycles among every object still alive (each class, each module's
        # functions, the search's memo tables): 0.1-0.2 s of a `plan` on a 2-core machine, more than its
        # imports. Frozen objects are skipped by that collection and left to the operating system; files the
        # commands write are closed by then and stdout is still flushed (benchmarks/startup.py measures it).
        # Not for verify, whose torch objects are torn down as torch expects.
        if sys.argv[1:2] != ["verify"]:
            gc.freeze()


if __name__ == "__main__":
    main()
