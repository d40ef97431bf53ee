"""The ``sparkrun`` command: assembles the command groups.

Only click is imported at module level so ``sparkrun --help`` stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import click

from sparkrun import __version__
from sparkrun.cli.options import Group, state_dir_option

__all__ = ["cli", "main"]


@click.group(cls=Group, root=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sparkrun")
@state_dir_option
def cli(state_dir: object) -> None:
    """Launch and manage inference workloads, with structured feedback.

    Global options (-v, -q, --debug, --otel/--no-otel, --state-dir) work
    before or after the command name.
    """


def _register_subcommands() -> None:
    from sparkrun.cli.benchmark import benchmark
    from sparkrun.cli.coldsnap import coldsnap
    from sparkrun.cli.daemon import daemon
    from sparkrun.cli.distribute import distribute
    from sparkrun.cli.doctor import doctor
    from sparkrun.cli.schema import schema
    from sparkrun.cli.trace import trace
    from sparkrun.cli.workloads import logs, run, status, stop

    for command in (run, stop, status, logs, distribute, benchmark, coldsnap, doctor, trace, daemon, schema):
        cli.add_command(command)


_register_subcommands()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="sparkrun")
