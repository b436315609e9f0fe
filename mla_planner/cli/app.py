"""The `mla-plan` command line: parse, call the library, render. No modelling here."""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

try:  # newer typer parses with its own vendored copy of click (and does not install click)
    from typer._click import core as _click_core, exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import core as _click_core, exceptions as _click_errors
_USAGE = (_click_errors.ClickException,)
_ABORT = tuple({typer.Abort, getattr(_click_errors, "Abort", typer.Abort)})


def _flag_takes_no_value(display_type_rich):
    """typer 0.29's help prints "<bool>" beside every flag (even --help), as if it took a value; a flag
    takes none, so it shows no type (`--json true` is an error)."""
    def shown(self, ctx):
        return None if self.is_flag and self.metavar is None else display_type_rich(self, ctx)
    return shown


TyperOption.display_type_rich = _flag_takes_no_value(TyperOption.display_type_rich)

from mla_planner import __version__  # noqa: E402

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
                  "Hold an engine's log and bench.sh's output against the plan candidate that was launched."),
    "lint": ("mla_planner.cli.lint", "lint_cmd",
             "Check your own vLLM or SGLang launch command against the model, the cluster and the engines' rules."),
}
SETTINGS = {"lint": {"allow_extra_args": True, "ignore_unknown_options": True}}


def load_command(name: str) -> _click_core.Command:
    """The click command of NAME, built from its module's typer function (imported now)."""
    module, attr, _ = COMMANDS[name]
    callback = getattr(importlib.import_module(module), attr)
    info = typer.models.CommandInfo(name=name, callback=callback, context_settings=SETTINGS.get(name))
    return typer.main.get_command_from_info(info, pretty_exceptions_short=True, rich_markup_mode="rich")


class OneLineErrors(TyperGroup):
    """Click's own usage errors (unknown option, missing or mistyped value, extra argument) as one
    `error:` line on stderr with exit 2, like the library's PlanError (cli.common.guard) - no boxed panel.
    Commands are loaded when they run: the listing in `--help` shows COMMANDS' summaries."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        return TyperCommand(name, help=COMMANDS[name][2])   # a stand-in that lists it; resolve_command runs it

    def resolve_command(self, ctx, args):
        name, _, rest = super().resolve_command(ctx, args)
        return name, load_command(name), rest

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
        except _USAGE as exc:
            where = exc.ctx.command_path if getattr(exc, "ctx", None) else "mla-plan"
            print(f"error: {where}: {' '.join(exc.format_message().split())}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except _ABORT:
            print("error: aborted", file=sys.stderr)
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(name="mla-plan", cls=OneLineErrors, no_args_is_help=False, add_completion=False,
                  rich_markup_mode="rich",
                  context_settings={"help_option_names": ["-h", "--help"]}, pretty_exceptions_enable=False,
                  help="Plan, launch and verify Multi-head Latent Attention deployments (DeepSeek-V2/V3/R1, "
                       "Kimi-K2) on vLLM and SGLang. Start with `mla-plan plan` (no arguments: DeepSeek-V3 on "
                       "2 x 8 H100 with InfiniBand).")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mla-plan {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                          help="Print the version and exit.")] = None) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def main() -> None:
    # A reader that closes the pipe early (`mla-plan plan | head`) ends the process as it ends `yes | head`:
    # by SIGPIPE, status 141, silently. Click would exit 1, which here means "no candidate meets the targets".
    # Not for verify: its torch.distributed sockets must see a closed peer as an error, not a signal.
    if hasattr(signal, "SIGPIPE") and sys.argv[1:2] != ["verify"]:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    app()


if __name__ == "__main__":
    main()
