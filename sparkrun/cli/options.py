"""What every ``sparkrun`` command shares: global options, errors, the state directory.

The global options (``-v``, ``-q``, ``--debug``, ``--otel/--no-otel``,
``--otel-shutdown-timeout``, ``--state-dir``) are accepted before the
command name and after it alike (``sparkrun -q run X`` and ``sparkrun run X
-q``): every command built with :class:`Command` (and every group built with
:class:`Group`) carries them, and each one updates the one :class:`CliState`
of the invocation.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import click

from sparkrun.errors import SparkrunError

#: The exit status of a command whose reader closed the pipe (128 + SIGPIPE, as a shell reports it).
PIPE_CLOSED = 141

__all__ = [
    "PIPE_CLOSED",
    "CliState",
    "Command",
    "Group",
    "Interrupted",
    "UserError",
    "events_jsonl_option",
    "json_events_option",
    "operation_options",
    "resolved_state_dir",
    "state_dir_option",
]


class UserError(click.ClickException):
    """A mistake the user can fix, rendered as one ``error:`` line (exit 1)."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class Interrupted(UserError):
    """Ctrl+C: one line saying what was cleaned up, exit 130 (128 + SIGINT) as shells expect."""

    exit_code = 130


@dataclass
class CliState:
    """The global options of one invocation, wherever on the command line they were given."""

    debug: bool = False
    quiet: bool = False
    verbose: int = 0
    otel: bool = True
    otel_shutdown_timeout: float = 2.0
    state_dir: Path | None = None
    _handler: logging.Handler | None = field(default=None, repr=False)

    def configure_logging(self) -> None:
        """(Re)apply the log level the options ask for: PROGRESS, or -v INFO, -vv DEBUG, -q WARNING."""
        from sparkrun.core.log_bridge import PROGRESS

        level = logging.WARNING if self.quiet else (PROGRESS, logging.INFO, logging.DEBUG)[min(self.verbose, 2)]
        root = logging.getLogger()
        if self._handler is None:
            self._handler = logging.StreamHandler(sys.stderr)
            self._handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            root.addHandler(self._handler)
        root.setLevel(level)
        # The OpenTelemetry SDK logs every failed export attempt; the CLI says it once, naming the endpoint.
        logging.getLogger("opentelemetry").setLevel(logging.DEBUG if self.verbose >= 2 else logging.CRITICAL)

    @property
    def handler(self) -> logging.Handler | None:
        return self._handler


def _state(ctx: click.Context) -> CliState:
    state = ctx.find_object(CliState)
    if state is None:  # a command invoked on its own (tests, other click apps)
        state = ctx.ensure_object(CliState)
        state.configure_logging()
    return state


def _setter(name: str, *, relog: bool = False) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback that records an option in the invocation's state; absent options (None, or no -v) change nothing."""

    def apply(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        state = _state(ctx)
        if value is None or (value == 0 and name == "verbose"):
            return
        setattr(state, name, state.verbose + value if name == "verbose" else value)
        if relog:
            state.configure_logging()

    return apply


def _global_params(*, root: bool) -> list[click.Parameter]:
    """The global options; only the root group reads their environment variables (so a flag given before the
    command is not overridden by the environment after it)."""

    def env(name: str) -> str | None:
        return name if root else None

    return [
        click.Option(
            ["-v", "--verbose"],
            count=True,
            expose_value=False,
            callback=_setter("verbose", relog=True),
            help="More detail: -v shows info reports and INFO logs, -vv debug ones too.",
        ),
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            default=None,
            expose_value=False,
            callback=_setter("quiet", relog=True),
            help="Only warnings, errors and results.",
        ),
        click.Option(
            ["--debug"],
            is_flag=True,
            default=None,
            expose_value=False,
            callback=_setter("debug"),
            help="Show tracebacks for errors.",
        ),
        click.Option(
            ["--otel/--no-otel"],
            default=None,
            envvar=env("SPARKRUN_OTEL"),
            expose_value=False,
            callback=_setter("otel"),
            help="Export operations as OpenTelemetry traces: to OTEL_EXPORTER_OTLP_ENDPOINT if set, else to the "
            "local trace store [SPARKRUN_OTEL; default: --otel].",
        ),
        click.Option(
            ["--otel-shutdown-timeout"],
            type=click.FloatRange(min=0),
            default=None,
            envvar=env("SPARKRUN_OTEL_SHUTDOWN_TIMEOUT"),
            expose_value=False,
            callback=_setter("otel_shutdown_timeout"),
            help="Seconds to wait at exit for telemetry to be delivered [SPARKRUN_OTEL_SHUTDOWN_TIMEOUT; default: 2].",
        ),
    ]


class Command(click.Command):
    """A command that accepts the global options after its name, and renders sparkrun errors as one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params(root=False))

    def invoke(self, ctx: click.Context) -> Any:
        return _invoked(ctx, super().invoke)


def _invoked(ctx: click.Context, invoke: Callable[[click.Context], Any]) -> Any:
    """Run a command: sparkrun's errors become one ``error:`` line, a reader that left ends it quietly."""
    try:
        return invoke(ctx)
    except (SparkrunError, ValueError) as error:
        if _state(ctx).debug:
            raise
        raise UserError(str(error)) from error
    except BrokenPipeError:
        # The reader of our output left (`sparkrun ... | head`): stop writing and exit as a piped tool does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        ctx.exit(PIPE_CLOSED)


class Group(click.Group):
    """A group whose commands and subgroups are :class:`Command` and :class:`Group`."""

    command_class = Command

    def __init__(self, *args: Any, root: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params(root=root))

    def invoke(self, ctx: click.Context) -> Any:
        return _invoked(ctx, super().invoke)


Group.group_class = Group


def _remember_state_dir(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A --state-dir given to a group is the default of the commands under it."""
    if value is not None:
        _state(ctx).state_dir = value
    return value if value is not None else _state(ctx).state_dir


def state_dir_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--state-dir`` option every state-touching command takes."""
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="SPARKRUN_STATE_DIR",
        callback=_remember_state_dir,
        help="State directory (default: $XDG_STATE_HOME/sparkrun).",
    )(command)


def resolved_state_dir(state_dir: Path | None) -> Path:
    """The state directory a command works in: ``--state-dir``, else the configured or default one."""
    from sparkrun.config import load_config

    return load_config(state_dir=state_dir).state_dir


def json_events_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: the operation's events, then its result, as JSON lines on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print events, then the result, as JSON lines.")(
        command
    )


def events_jsonl_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--events-jsonl PATH``: record the operation's native events (for replay or audit)."""
    return click.option(
        "--events-jsonl",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Append every native event of the operation to this JSON-lines file.",
    )(command)


def operation_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``, ``--events-jsonl`` and ``--state-dir``: what every command that runs an operation takes."""
    return json_events_option(events_jsonl_option(state_dir_option(command)))
