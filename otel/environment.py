"""Checking the ``OTEL_*`` environment before the SDK reads it.

Telemetry configuration must never break work. The SDK reacts to a bad value
in several ways: it raises (a span limit that is not an integer), logs a
traceback (a batch setting), warns twice (a timeout), or carries on and fails
at export time (a missing certificate). So :func:`check_environment` reads
every variable that configures trace or metric export, and a bad value turns
off the telemetry it configures, with one warning naming the variable:

- a variable of the OTLP exporter of one signal (protocol, endpoint, headers,
  timeout, compression, certificate files): that signal's export is off;
- a batch span processor setting or a span limit: traces are off;
- a metric reader setting: metrics are off;
- ``OTEL_RESOURCE_ATTRIBUTES``: both are off, since every span and metric
  would carry the wrong resource.

The operation itself always runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

from sparkrun.config import otlp_endpoint

__all__ = ["PROTOCOLS", "EnvironmentCheck", "check_environment"]

PROTOCOLS = ("http/protobuf", "grpc")
_COMPRESSIONS = ("gzip", "deflate", "none")
_FILES = ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
_BATCH = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
)
_SPAN_LIMITS = (
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
)
_METRIC_READER = ("OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT")


@dataclass(frozen=True)
class EnvironmentCheck:
    """What :func:`check_environment` found: one line per bad variable, and what is switched off."""

    problems: tuple[str, ...] = ()
    traces_off: bool = False
    metrics_off: bool = False
    protocols: dict[str, str] = field(default_factory=dict)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def _setting(env: Mapping[str, str], signal: str, name: str) -> tuple[str, str] | None:
    """(variable, value) of an exporter setting: the per-signal variable wins over the general one."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = env.get(variable)
        if value is not None and value.strip():
            return variable, value.strip()
    return None


def _exporter_problem(env: Mapping[str, str], signal: str, protocol: str) -> str | None:
    endpoint = _setting(env, signal, "ENDPOINT")
    if endpoint is not None:
        variable, value = endpoint
        parsed = urlparse(value if "://" in value or protocol == "http/protobuf" else f"http://{value}")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return f"{variable} is {_shown(value)}; expected a URL such as http://collector:4318"
        try:
            parsed.port  # noqa: B018 - raises for a port that is not a number
        except ValueError:
            return f"{variable} is {_shown(value)}; its port is not a number"
    headers = _setting(env, signal, "HEADERS")
    if headers is not None:
        variable, value = headers
        for item in value.split(","):
            name, sep, _ = item.partition("=")
            if item.strip() and (not sep or not unquote(name).strip()):
                return f"{variable} has {_shown(item.strip())}; expected comma-separated name=value pairs"
    timeout = _setting(env, signal, "TIMEOUT")
    if timeout is not None:
        variable, value = timeout
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds < 0:
            return f"{variable} is {_shown(value)}; expected a non-negative number"
    compression = _setting(env, signal, "COMPRESSION")
    if compression is not None and compression[1].lower() not in _COMPRESSIONS:
        variable, value = compression
        return f"{variable} is {_shown(value)}; expected one of {', '.join(_COMPRESSIONS)}"
    for name in _FILES:
        found = _setting(env, signal, name)
        if found is not None and not os.path.isfile(found[1]):
            return f"{found[0]} is {_shown(found[1])}; no such file"
    return None


def _integer_problem(env: Mapping[str, str], variables: tuple[str, ...], minimum: int) -> str | None:
    for variable in variables:
        value = env.get(variable)
        if value is None or not value.strip():
            continue
        text = value.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= minimum):
            return f"{variable} is {_shown(value)}; expected an integer >= {minimum}"
    return None


def _resource_problem(env: Mapping[str, str]) -> str | None:
    value = env.get("OTEL_RESOURCE_ATTRIBUTES")
    if not value:
        return None
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, _ = item.partition("=")
        if not sep or not unquote(key).strip():
            return f"OTEL_RESOURCE_ATTRIBUTES has {_shown(item.strip())}; expected comma-separated key=value pairs"
    return None


def check_environment(env: Mapping[str, str]) -> EnvironmentCheck:
    """Check every ``OTEL_*`` value that configures export; see the module docstring for what a problem turns off."""
    found: dict[str, list[str]] = {}  # problem -> the signals it switches off, in order
    protocols: dict[str, str] = {}
    for signal in ("TRACES", "METRICS"):
        if otlp_endpoint(env, signal) is None:
            continue  # traces go to the local store; metrics are only exported over OTLP
        setting = _setting(env, signal, "PROTOCOL")
        protocol = setting[1] if setting else "http/protobuf"
        if protocol not in PROTOCOLS:
            variable = setting[0] if setting else "OTEL_EXPORTER_OTLP_PROTOCOL"
            problem: str | None = f"{variable} is {_shown(protocol)}; expected one of {', '.join(PROTOCOLS)}"
        else:
            protocols[signal] = protocol
            problem = _exporter_problem(env, signal, protocol)
        if problem:
            found.setdefault(problem, []).append(signal)
    for variables, minimum in ((_BATCH, 1), (_SPAN_LIMITS, 0)):
        problem = _integer_problem(env, variables, minimum)
        if problem:
            found.setdefault(problem, []).append("TRACES")
    problem = _integer_problem(env, _METRIC_READER, 1)
    if problem and otlp_endpoint(env, "METRICS") is not None:
        found.setdefault(problem, []).append("METRICS")
    problem = _resource_problem(env)
    if problem:
        found.setdefault(problem, []).extend(("TRACES", "METRICS"))
    off = {signal for signals in found.values() for signal in signals}
    problems = tuple(
        f"{problem}: {' and '.join(dict.fromkeys(signal.lower() for signal in signals))} are not exported"
        for problem, signals in found.items()
    )
    return EnvironmentCheck(problems, "TRACES" in off, "METRICS" in off, protocols)
