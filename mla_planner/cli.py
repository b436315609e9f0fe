"""The `mla-plan` command line: parse, call the library, render. No modelling here."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import __version__
from .cli_compare import compare_cmd
from .cli_emit import emit_cmd
from .cli_memory import memory_cmd
from .cli_plan import plan_cmd
from .cli_show import models_cmd, show_cmd, topologies_cmd
from .cli_verify import verify_cmd

app = typer.Typer(name="mla-plan", no_args_is_help=False, add_completion=False, rich_markup_mode="rich",
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


def main() -> None:
    app()
if __name__ == "__main__":
    main()
