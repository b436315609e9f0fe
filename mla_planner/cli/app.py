"""The `mla-plan` command line: parse, call the library, render. No modelling here."""

from __future__ import annotations

import signal
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup, TyperOption

try:  # newer typer parses with its own vendored copy of click (and does not install click)
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import exceptions as _click_errors
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
from mla_planner.cli.compare import compare_cmd  # noqa: E402
from mla_planner.cli.emit import emit_cmd  # noqa: E402
from mla_planner.cli.lint import lint_cmd  # noqa: E402
from mla_planner.cli.logcheck import check_log_cmd  # noqa: E402
from mla_planner.cli.memory import memory_cmd  # noqa: E402
from mla_planner.cli.plan import plan_cmd  # noqa: E402
from mla_planner.cli.show import models_cmd, show_cmd, topologies_cmd  # noqa: E402
from mla_planner.cli.verify import verify_cmd  # noqa: E402



class OneLineErrors(TyperGroup):
    """Click's own usage errors (unknown option, missing or mistyped value, extra argument) as one
    `error:` line on stderr with exit 2, like the library's PlanError (cli_common.guard) - no boxed panel."""

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


# commands
app.command("plan")(plan_cmd)
app.command("models")(models_cmd)
app.command("topologies")(topologies_cmd)
app.command("show")(show_cmd)
app.command("compare")(compare_cmd)
app.command("memory")(memory_cmd)
app.command("emit")(emit_cmd)
app.command("verify")(verify_cmd)
app.command("check-log")(check_log_cmd)
app.command("lint", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(lint_cmd)


def main() -> None:
    # A reader that closes the pipe early (`mla-plan plan | head`) ends the process as it ends `yes | head`:
    # by SIGPIPE, status 141, silently. Click would exit 1, which here means "no candidate meets the targets".
    # Not for verify: its torch.distributed sockets must see a closed peer as an error, not a signal.
    if hasattr(signal, "SIGPIPE") and sys.argv[1:2] != ["verify"]:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    app()


if __name__ == "__main__":
    main()
