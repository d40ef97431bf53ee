"""Every PromQL expression of the Grafana dashboards, evaluated by a real Prometheus.

A real ``sparkrun daemon serve`` runs the test operations (a relay to two hosts with
a failing one, an image relay and a model copy ending in verified reports, a burst
of progress, a failing job, the example recipe's run and a stop), then Debian's
``prometheus`` scrapes its ``GET /metrics`` with the daemon's bearer token every
second. A second round of jobs runs once Prometheus has scraped the first, so
rates and quantiles see counters move. Then every panel expression
and every variable query of every dashboard in grafana/dashboards/ must succeed and
return series with a value: a typo in a metric or label name, a label the daemon
doesn't expose, or a filter that drops everything fails here, naming the panel.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.daemon_harness import ROOT, DaemonProcess, wait_for

pytestmark = pytest.mark.integration

DASHBOARD_FILES = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
INSTALL_HINT = "install Debian's prometheus (`make prometheus`)"
SCRAPE_JOB = "sparkrun-daemon"

#: Jobs before Prometheus starts (every kind of series exists at its first scrape)...
FIRST_ROUND = [
    ("relay", {}, "succeeded"),
    ("image_relay", {}, "succeeded"),
    ("burst", {"count": 200}, "succeeded"),
    ("fail", {}, "failed"),
    ("run", {"recipe": str(EXAMPLE_RECIPE)}, "succeeded"),
    ("stop", {"all": True}, "succeeded"),
]
#: ...and after its first scrapes, so that rate(), increase() and the quantiles see counters move.
SECOND_ROUND = [
    ("relay", {}, "succeeded"),
    ("image_relay", {}, "succeeded"),
    ("burst", {"count": 200}, "succeeded"),
    ("fail", {}, "failed"),
]

#: Grafana's built-in variables, as a dashboard would have them over a short range of 1 s scrapes.
BUILTIN_VALUES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
    "__interval_ms": "15000",
    "__rate_interval_ms": "60000",
}
#: Label values the jobs above must make the label_values() variables offer.
EXPECTED_VARIABLE_VALUES = {
    "source": {
        "test.relay",
        "test.burst",
        "oci-relay",
        "model-copy",
        "sparkrun.launch",
        "sparkrun.stop",
        "benchmark.llama-benchy",
    },
    "host": {"spark-1", "spark-2"},
    "framework": {"llama-benchy", "tool-eval-bench"},
}


def _benchmark_jobs(tokenizer: Path, corpus_url: str) -> list[tuple[str, dict[str, Any], str]]:
    """A real llama-benchy sweep and a real tool-eval-bench run, so the benchmark panels have data."""
    recipes = ROOT / "examples" / "recipes"
    llama = {
        "target": str(recipes / "example-bench.yaml"),
        "framework": "llama-benchy",
        "arguments": {
            "tokenizer": str(tokenizer),
            "book-url": corpus_url,
            "pp": "64",
            "tg": "16",
            "runs": "1",
            "concurrency": "1 2",
        },
    }
    tools = {
        "target": str(recipes / "example-chat.yaml"),
        "framework": "tool-eval-bench",
        "arguments": {"short": True, "no-preflight": True},
    }
    return [("benchmark", llama, "succeeded"), ("benchmark", tools, "succeeded")]


_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<match>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$", re.DOTALL)


# -- the dashboards' expressions ---------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _is_prometheus(reference: Any) -> bool:
    return isinstance(reference, dict) and (
        reference.get("type") == "prometheus" or reference.get("uid") == "prometheus"
    )


def _test_id(*parts: str) -> str:
    return ":".join(re.sub(r"[^\w.]+", "-", part).strip("-") for part in parts)


def _collect() -> tuple[list[Any], list[Any]]:
    panel_exprs, variable_queries = [], []
    for path in DASHBOARD_FILES:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        variables = dashboard.get("templating", {}).get("list", [])
        for panel in _panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if "expr" in target and _is_prometheus(target.get("datasource") or panel.get("datasource")):
                    title = panel.get("title", f"panel {panel.get('id')}")
                    panel_exprs.append(
                        pytest.param(title, target["expr"], variables, id=_test_id(path.stem, title, target["refId"]))
                    )
        for variable in variables:
            if variable.get("type") == "query" and _is_prometheus(variable.get("datasource")):
                query = variable.get("query")
                query = query.get("query") if isinstance(query, dict) else query
                variable_queries.append(
                    pytest.param(
                        variable["name"],
                        query or variable.get("definition", ""),
                        variables,
                        id=_test_id(path.stem, variable["name"]),
                    )
                )
    return panel_exprs, variable_queries


PANEL_EXPRESSIONS, VARIABLE_QUERIES = _collect()


def substitute(where: str, expr: str, variables: list[dict[str, Any]]) -> str:
    """``expr`` with its variables as Grafana would expand them with everything selected."""
    by_name = {variable["name"]: variable for variable in variables}

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        if name in BUILTIN_VALUES:
            return BUILTIN_VALUES[name]
        variable = by_name.get(name)
        if variable is None:
            pytest.fail(f"{where}: undefined variable ${name} in {expr}", pytrace=False)
        if variable.get("type") != "query" or not variable.get("includeAll"):
            pytest.fail(
                f"{where}: ${name} ({variable.get('type')}) has no 'All' value to evaluate with; "
                f"only Tempo queries may use free-text variables such as operation ids: {expr}",
                pytrace=False,
            )
        return variable.get("allValue") or ".*"

    return _VARIABLE.sub(value, expr)


# -- a real Prometheus --------------------------------------------------------------------


def prometheus_binary() -> str:
    """The Prometheus server to run: $SPARKRUN_PROMETHEUS, else ``prometheus`` on PATH."""
    configured = os.environ.get("SPARKRUN_PROMETHEUS")
    if configured:
        if not (Path(configured).is_file() and os.access(configured, os.X_OK)):
            pytest.fail(f"SPARKRUN_PROMETHEUS={configured} is not an executable file; {INSTALL_HINT}", pytrace=False)
        return configured
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail(f"no prometheus on PATH: {INSTALL_HINT}", pytrace=False)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrometheusServer:
    """A Prometheus on a loopback port scraping one daemon every second; always :meth:`stop` it."""

    def __init__(self, binary: str, root: Path, daemon: DaemonProcess) -> None:
        self.binary, self.root, self.daemon = binary, root, daemon
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def write_config(self) -> Path:
        target = urlsplit(self.daemon.url).netloc
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": SCRAPE_JOB,
                    "metrics_path": "/metrics",
                    "scheme": "http",
                    "authorization": {"type": "Bearer", "credentials_file": str(self.daemon.token_path)},
                    "static_configs": [{"targets": [target]}],
                }
            ],
        }
        path = self.root / "prometheus.yml"
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")  # JSON is YAML
        return path

    def start(self) -> PrometheusServer:
        argv = [
            self.binary,
            f"--config.file={self.write_config()}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with open(self.log, "wb") as output:
            self.process = process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited with code {process.returncode}:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
            return False

        wait_for(ready, timeout=30, interval=0.1, what="prometheus to be ready")
        return self

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    # -- HTTP API -------------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        try:
            body = response.json()
        except ValueError:
            body = {"status": "error", "error": response.text, "errorType": f"HTTP {response.status_code}"}
        return body

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        return self.api("query", query=expr, **({"time": f"{at:.3f}"} if at is not None else {}))

    def samples(self, expr: str) -> list[float]:
        body = self.query(expr)
        if body.get("status") != "success" or body["data"]["resultType"] != "vector":
            return []
        return [float(series["value"][1]) for series in body["data"]["result"]]

    def wait_for_target(self, timeout: float = 30.0) -> None:
        last: list[dict[str, Any]] = []

        def up() -> bool:
            last[:] = self.api("targets").get("data", {}).get("activeTargets", [])
            return any(target["health"] == "up" for target in last)

        try:
            wait_for(up, timeout=timeout, interval=0.2, what="the daemon's scrape target to be up")
        except AssertionError as exc:
            errors = [target.get("lastError") for target in last]
            raise AssertionError(f"{exc}; targets: {errors}\n{self.output()}") from None


# -- the scenario ---------------------------------------------------------------------------


def _run_jobs(daemon: DaemonProcess, jobs: list[tuple[str, dict[str, Any], str]]) -> None:
    for operation, arguments, expected in jobs:
        response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
        assert response.status_code == 202, response.text
        job = daemon.wait_state(response.json()["job_id"], timeout=180)
        assert job["state"] == expected, f"job {operation} {arguments} ended {job['state']}: {job}"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, benchmark_tools, tokenizer, corpus_url) -> Iterator[PrometheusServer]:
    """Prometheus scraping a daemon that ran both rounds of jobs, with every sample in."""
    from tests.integration.benchmark_harness import offline_environment

    binary = prometheus_binary()
    root = tmp_path_factory.mktemp("dashboards")
    # traces off (SPARKRUN_OTEL=0): the metrics come from the journal
    daemon = DaemonProcess(root / "daemon", env=offline_environment(root / "home"))
    benchmarks = _benchmark_jobs(tokenizer, corpus_url)
    server: PrometheusServer | None = None
    try:
        daemon.start()
        _run_jobs(daemon, [*FIRST_ROUND, *benchmarks])
        server = PrometheusServer(binary, root / "prometheus", daemon).start()
        server.wait_for_target()
        wait_for(lambda: server.samples("sparkrun_daemon_jobs"), timeout=30, interval=0.2, what="a scrape of jobs")
        _run_jobs(daemon, [*SECOND_ROUND, *benchmarks])
        total = len(FIRST_ROUND) + len(SECOND_ROUND) + 2 * len(benchmarks)
        wait_for(
            lambda: server.samples(f"sum(sparkrun_operation_duration_seconds_count) >= {total}"),
            timeout=30,
            interval=0.2,
            what=f"a scrape showing all {total} operations",
        )
        wait_for(
            lambda: server.samples(f'count_over_time(up{{job="{SCRAPE_JOB}"}}[1m]) >= 6'),
            timeout=30,
            interval=0.2,
            what="six scrapes of the daemon",
        )
        yield server
    finally:
        if server is not None:
            server.stop()
        daemon.stop()


@pytest.fixture(scope="module")
def evaluated_at(prometheus) -> float:
    """One instant for every query, so all panels see the same data."""
    return time.time()


# -- the checks -----------------------------------------------------------------------------


def test_the_dashboards_have_expressions_to_check():
    assert DASHBOARD_FILES, "no dashboards in grafana/dashboards"
    assert PANEL_EXPRESSIONS, "the dashboards have no Prometheus panel expressions"
    assert VARIABLE_QUERIES, "the dashboards have no Prometheus variable queries"


@pytest.mark.parametrize(("title", "expr", "variables"), PANEL_EXPRESSIONS)
def test_every_panel_expression_returns_series(prometheus, evaluated_at, title, expr, variables):
    query = substitute(f"panel {title!r}", expr, variables)
    body = prometheus.query(query, evaluated_at)
    assert body.get("status") == "success", (
        f"panel {title!r}: Prometheus rejected {query}: {body.get('errorType')}: {body.get('error')}"
    )
    data = body["data"]
    if data["resultType"] == "scalar":
        values = [float(data["result"][1])]
    else:
        assert data["result"], f"panel {title!r}: no series for {query}"
        values = [float(series["value"][1]) for series in data["result"]] if data["resultType"] == "vector" else []
        values += [float(value) for series in data["result"] for _, value in series.get("values", [])]
    assert any(not math.isnan(value) for value in values), f"panel {title!r}: only NaN for {query}: {data['result']}"


@pytest.mark.parametrize(("name", "query", "variables"), VARIABLE_QUERIES)
def test_every_variable_query_offers_values(prometheus, evaluated_at, name, query, variables):
    match = _LABEL_VALUES.match(query)
    where = f"variable {name!r}"
    if match is None:
        pytest.fail(f"{where}: only label_values(metric, label) queries are checked, not {query!r}", pytrace=False)
    params: dict[str, Any] = {"end": f"{evaluated_at:.3f}", "start": f"{evaluated_at - 300:.3f}"}
    if match["match"]:
        params["match[]"] = substitute(where, match["match"], variables)
    body = prometheus.api(f"label/{match['label']}/values", **params)
    assert body.get("status") == "success", f"{where}: Prometheus rejected {query}: {body.get('error')}"
    values = set(body["data"]) - {""}
    assert values, f"{where}: {query} offers no values"
    missing = EXPECTED_VARIABLE_VALUES.get(name, set()) - values
    assert not missing, f"{where}: {query} offers {sorted(values)}, not {sorted(missing)}"


#: What one ``image_relay`` job reports (tests/integration/daemon_plugins.py), by (source, host):
#: (outcome, reused bytes, bytes per second).
IMAGE_RELAY = {
    ("oci-relay", "spark-1"): ("succeeded", 5_242_880, 2_097_152.0),
    ("oci-relay", "spark-2"): ("failed", 2_097_152, 524_288.0),
    ("model-copy", "spark-1"): ("succeeded", 1_048_576, 1_048_576.0),
}
IMAGE_RELAY_JOBS = sum(operation == "image_relay" for operation, _, _ in FIRST_ROUND + SECOND_ROUND)


def _panel_query(title: str) -> str:
    """The expression of the panel titled ``title``, expanded as Grafana would with every value selected."""
    for path in DASHBOARD_FILES:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        variables = dashboard.get("templating", {}).get("list", [])
        for panel in _panels(dashboard.get("panels", [])):
            if panel.get("title") == title:
                (target,) = panel["targets"]
                return substitute(f"panel {title!r}", target["expr"], variables)
    raise AssertionError(f"no panel titled {title!r} in {[path.name for path in DASHBOARD_FILES]}")


def _series(prometheus: PrometheusServer, query: str, at: float, *labels: str) -> dict[tuple[str, ...], float]:
    body = prometheus.query(query, at)
    assert body.get("status") == "success", f"Prometheus rejected {query}: {body.get('error')}"
    return {
        tuple(series["metric"].get(label, "") for label in labels): float(series["value"][1])
        for series in body["data"]["result"]
    }


def test_relay_throughput_panel_shows_the_last_succeeded_transfer_of_each_host(prometheus, evaluated_at):
    query = _panel_query("Relay throughput per host (last verified transfer)")
    found = _series(prometheus, query, evaluated_at, "sparkrun_source", "host_name")
    expected = {key: rate for key, (outcome, _, rate) in IMAGE_RELAY.items() if outcome == "succeeded"}
    assert found == expected, query  # the failed host has no throughput


def test_reused_bytes_panel_shows_each_host_and_the_counter_holds_every_job(prometheus, evaluated_at):
    query = _panel_query("Reused bytes by host")
    found = _series(prometheus, query, evaluated_at, "sparkrun_source", "host_name")
    assert set(found) == set(IMAGE_RELAY), query
    for key, (_, reused, _) in IMAGE_RELAY.items():
        # the second round's job, at least, moved the counter within the range (extrapolation only adds)
        assert reused <= found[key] < 2 * reused, (key, found[key], query)
    totals = _series(prometheus, "sparkrun_transfer_reused_bytes_total", evaluated_at, "sparkrun_source", "host_name")
    assert totals == {key: IMAGE_RELAY_JOBS * reused for key, (_, reused, _) in IMAGE_RELAY.items()}


def test_verified_transfers_panel_shows_each_host_by_outcome(prometheus, evaluated_at):
    query = _panel_query("Verified transfers by outcome")
    labels = ("sparkrun_source", "host_name", "sparkrun_outcome")
    found = _series(prometheus, query, evaluated_at, *labels)
    expected = {(*key, outcome) for key, (outcome, _, _) in IMAGE_RELAY.items()}
    assert set(found) == expected, query
    assert all(1 <= value < 2 for value in found.values()), (found, query)
    totals = _series(prometheus, "sparkrun_transfer_verified_total", evaluated_at, *labels)
    assert totals == dict.fromkeys(expected, float(IMAGE_RELAY_JOBS))
