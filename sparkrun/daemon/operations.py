"""Operations the daemon can run as jobs, and validation of their arguments.

The built-ins are the launch pipeline's API calls; plugins add more with
:func:`register_operation`, from modules listed under ``daemon.plugins`` in
the configuration (imported by the daemon and by every worker) or through
the ``sparkrun.daemon_operations`` entry point group.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrun.core.context import SparkrunContext
from sparkrun.core.names import check_name
from sparkrun.core.registry import Registry
from sparkrun.errors import SparkrunError

__all__ = [
    "DaemonOperation",
    "Param",
    "Prompter",
    "UnknownOperation",
    "find_operation",
    "load_plugins",
    "register_operation",
]

ENTRY_POINT_GROUP = "sparkrun.daemon_operations"


class UnknownOperation(SparkrunError):
    """No operation of that name is registered."""


class Prompter:
    """How a job asks its user something and waits for the answer (see the worker)."""

    def confirm(self, question: str) -> bool:
        raise NotImplementedError

    def choice(self, question: str, choices: list[str]) -> str:
        raise NotImplementedError

    def secret(self, question: str) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Param:
    """One argument: its JSON type (str, int, float, bool, dict, list), whether it is required, and an
    optional ``check(field, value)`` that raises ``ValueError`` naming the field for a value out of range."""

    kind: type
    required: bool = False
    check: Callable[[str, Any], Any] | None = None


def _in_range(low: int, high: int) -> Callable[[str, Any], Any]:
    def check(field: str, value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"{field} is {value}; it must be from {low} to {high}")
        return value

    return check


@dataclass(frozen=True)
class DaemonOperation:
    """A job the daemon can run. On cancel its worker gets SIGTERM (raised in the job as
    ``OperationCancelled``), then SIGKILL after ``cancel_grace_seconds``."""

    name: str
    run: Callable[[SparkrunContext, dict[str, Any], Prompter], Any]
    params: Mapping[str, Param] = field(default_factory=dict)
    description: str = ""
    cancel_grace_seconds: float = 3.0

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the parameters; errors name the argument and the expected type."""
        if not isinstance(arguments, dict):
            raise ValueError(f"arguments must be a JSON object, not {type(arguments).__name__}")
        for name, value in arguments.items():
            param = self.params.get(name)
            if param is None:
                expected = ", ".join(self.params) or "none"
                raise ValueError(f"unknown argument {name!r} for operation {self.name} (expected: {expected})")
            if value is None and not param.required:
                continue
            if not _is_kind(value, param.kind):
                raise ValueError(
                    f"argument {name} must be {param.kind.__name__}, not {type(value).__name__} ({value!r:.60})"
                )
            if param.check is not None:
                param.check(f"argument {name}", value)
        for name, param in self.params.items():
            if param.required and arguments.get(name) is None:
                raise ValueError(f"argument {name} is required for operation {self.name}")
        return dict(arguments)


def _is_kind(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


_registry: Registry[DaemonOperation] = Registry(entry_points=ENTRY_POINT_GROUP, key=lambda operation: operation.name)


def register_operation(operation: DaemonOperation) -> None:
    """Make ``operation`` available to daemon jobs (a later registration of the same name wins)."""
    _registry.add(operation)


def load_plugins(modules: Iterable[str]) -> None:
    """Import plugin modules (they register operations when imported); entry points load on first use."""
    for module in modules:
        importlib.import_module(module)


def find_operation(name: Any) -> DaemonOperation:
    operation = _registry.get(name) if isinstance(name, str) else None
    if operation is None:
        known = ", ".join(sorted(known.name for known in _registry.items()))
        raise UnknownOperation(f"unknown operation (operation={name!r}, known: {known})")
    return operation


def _run(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    options = api.RunOptions(
        recipe=arguments["recipe"],
        overrides=arguments.get("overrides") or {},
        port=arguments.get("port"),
        name=arguments.get("name"),
    )
    return _plain(api.run(options, sctx=sctx))


def _stop(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    results = api.stop(arguments.get("name"), all=bool(arguments.get("all")), sctx=sctx)
    return [_plain(result) for result in results]


def _status(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    return [_plain(status) for status in api.status(sctx=sctx)]


def _logs(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    return list(api.logs(arguments["name"], tail=arguments.get("tail"), host=arguments.get("host"), sctx=sctx))


def _distribute(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    hosts = arguments["hosts"]
    if not all(isinstance(host, str) for host in hosts):
        raise ValueError(f"hosts is {str(hosts)[:200]}; it must be a list of host names")
    result = api.distribute(
        arguments["kind"],
        arguments["source"],
        hosts,
        force=bool(arguments.get("force")),
        platform=arguments.get("platform"),
        sctx=sctx,
    )
    return _plain(result)


def _coldsnap(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    options = api.ColdSnapOptions(
        arguments["operation"],
        arguments["target"],
        controller=arguments.get("controller"),
        snapshot_driver=arguments.get("snapshot_driver"),
    )
    return _plain(api.coldsnap(options, sctx=sctx))


def _benchmark(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> Any:
    from sparkrun import api

    resume = arguments.get("resume")
    if resume is not None:
        result = api.benchmark_resume(resume, sctx=sctx)
    else:
        for name in ("target", "framework"):
            if not arguments.get(name):
                raise ValueError(f"argument {name} is required for operation benchmark (unless resume is given)")
        request = api.BenchmarkRequest(
            target=arguments["target"],
            framework=arguments["framework"],
            schedule=arguments.get("schedule"),
            overrides={str(k): str(v) for k, v in (arguments.get("overrides") or {}).items()},
            arguments=arguments.get("arguments") or {},
            task_timeout=float(arguments.get("task_timeout") or 3600.0),
            exit_on_first_failure=bool(arguments.get("exit_on_first_failure")),
        )
        result = api.benchmark(request, sctx=sctx)
    return _plain(result)


def _one_of(*choices: str) -> Callable[[str, Any], Any]:
    def check(field: str, value: str) -> str:
        if value not in choices:
            raise ValueError(f"{field} is {value!r}; it must be one of {', '.join(choices)}")
        return value

    return check


def _host_name(field: str, value: str) -> str:
    from sparkrun.core.executors.inventory import check_host_name

    try:
        return check_host_name(value, field=field)
    except SparkrunError as error:
        raise ValueError(str(error)) from None


def _plain(value: Any) -> Any:
    from dataclasses import asdict

    return {key: (str(item) if hasattr(item, "__fspath__") else item) for key, item in asdict(value).items()}


def _register_builtins() -> None:
    """The launch pipeline's API calls, registered when this module is imported (plugins may replace them)."""
    for operation in (
        DaemonOperation(
            "run",
            _run,
            {
                "recipe": Param(str, True),
                "overrides": Param(dict),
                "port": Param(int, check=_in_range(1, 65535)),
                "name": Param(str, check=check_name),
            },
            "Launch a recipe.",
        ),
        DaemonOperation(
            "stop", _stop, {"name": Param(str, check=check_name), "all": Param(bool)}, "Stop a deployment."
        ),
        DaemonOperation("status", _status, {}, "List deployments."),
        DaemonOperation(
            "distribute",
            _distribute,
            {
                "kind": Param(str, True, check=_one_of("image", "model")),
                "source": Param(str, True),
                "hosts": Param(list, True),
                "force": Param(bool),
                "platform": Param(str),
            },
            "Copy an image (oci:PATH[:TAG]) or a model directory to hosts, verified on each.",
        ),
        DaemonOperation(
            "benchmark",
            _benchmark,
            {
                "target": Param(str),
                "framework": Param(str),
                "schedule": Param(str),
                "overrides": Param(dict),
                "arguments": Param(dict),
                "task_timeout": Param(float, check=_in_range(1, 604_800)),
                "exit_on_first_failure": Param(bool),
                "resume": Param(str),
            },
            "Run (or resume) a scheduled benchmark.",
            cancel_grace_seconds=20.0,  # the running attempt and a launched workload are stopped, each gently
        ),
        DaemonOperation(
            "coldsnap",
            _coldsnap,
            {
                "operation": Param(str, True, check=_one_of("capture", "restore", "sleep", "wake", "status")),
                "target": Param(str, True),
                "controller": Param(str),
                "snapshot_driver": Param(str),
            },
            "Run a ColdSnap operation through its controller.",
            # the controller may clean up for up to 300 s after SIGTERM; the worker then reports how it ended
            cancel_grace_seconds=310.0,
        ),
        DaemonOperation(
            "logs",
            _logs,
            {
                "name": Param(str, True, check=check_name),
                "tail": Param(int, check=_in_range(0, 100_000)),
                "host": Param(str, check=_host_name),
            },
            "Read a deployment's log (every host's, each line marked [host], or one host's).",
        ),
    ):
        register_operation(operation)


_register_builtins()
