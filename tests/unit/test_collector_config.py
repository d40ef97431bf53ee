"""Structural checks of collector-config/: the Collector pipelines, the compose stack, Tempo and Prometheus.

Neither the Collector, Tempo, Jaeger nor Grafana can run here (no binaries, no container
engine), so these tests prove what can be proven without them: every component a pipeline
names is defined and every defined one is used, the processors are ordered, the span-metrics
connector bridges traces to metrics with low-cardinality dimensions, and the compose stack mounts
files that exist. That prometheus.yml passes the real ``promtool check config`` is checked in
``tests/integration/test_promtool.py``: it needs the external ``promtool`` binary.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"
OTELCOL = CONFIG_DIR / "otelcol.yaml"
COMPOSE = CONFIG_DIR / "compose.yaml"
PROMETHEUS = CONFIG_DIR / "prometheus.yml"
TEMPO = CONFIG_DIR / "tempo.yaml"
DATASOURCES = ROOT / "grafana" / "provisioning" / "datasources"

KINDS = ("receivers", "processors", "exporters", "connectors")
SPAN_METRICS_TYPES = ("span_metrics", "spanmetrics")  # current name, deprecated alias


def _load(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def otelcol() -> dict:
    return _load(OTELCOL)


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load(COMPOSE)


@pytest.fixture(scope="module")
def prometheus() -> dict:
    return _load(PROMETHEUS)


def _pipelines(config: dict) -> dict[str, dict]:
    return config["service"]["pipelines"]


def _type(component_id: str) -> str:
    """``otlp_grpc/tempo`` -> ``otlp_grpc``: the component type, without the instance name."""
    return component_id.split("/", 1)[0]


def _span_metrics_id(config: dict) -> str:
    found = [cid for cid in config.get("connectors") or {} if _type(cid) in SPAN_METRICS_TYPES]
    assert len(found) == 1, f"expected one span metrics connector, found {found}"
    return found[0]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(duration: str) -> float:
    """A Go duration string (``2500ms``, ``1m``, ``1h30m``) in seconds."""
    parts = _DURATION.findall(duration)
    assert parts and "".join(number + unit for number, unit in parts) == duration, f"not a Go duration: {duration!r}"
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _ottl_string(statement: str) -> str:
    """The string literal of an OTTL call, unescaped as OTTL does (``\\\\.`` -> ``\\.``)."""
    literal = statement.split('"', 1)[1].rsplit('"', 1)[0]
    return re.sub(r"\\(.)", r"\1", literal)


# -- the Collector configuration -------------------------------------------------------


def test_header_states_the_targeted_collector_version(otelcol):
    header = OTELCOL.read_text().split("\n\n", 1)[0]
    assert re.search(r"contrib\* distribution v0\.\d+\.\d+", header), header


def test_every_component_referenced_in_a_pipeline_is_defined(otelcol):
    defined = {kind: set(otelcol.get(kind) or {}) for kind in KINDS}
    connectors = defined["connectors"]
    for name, pipeline in _pipelines(otelcol).items():
        for receiver in pipeline.get("receivers", []):
            assert receiver in defined["receivers"] | connectors, f"pipeline {name}: receiver {receiver} is not defined"
        for processor in pipeline.get("processors", []):
            assert processor in defined["processors"], f"pipeline {name}: processor {processor} is not defined"
        for exporter in pipeline.get("exporters", []):
            assert exporter in defined["exporters"] | connectors, f"pipeline {name}: exporter {exporter} is not defined"


def test_every_defined_component_is_used(otelcol):
    used = {kind: set() for kind in KINDS}
    for pipeline in _pipelines(otelcol).values():
        used["processors"].update(pipeline.get("processors", []))
        for receiver in pipeline.get("receivers", []):
            used["connectors" if receiver in (otelcol.get("connectors") or {}) else "receivers"].add(receiver)
        for exporter in pipeline.get("exporters", []):
            used["connectors" if exporter in (otelcol.get("connectors") or {}) else "exporters"].add(exporter)
    for kind in KINDS:
        unused = set(otelcol.get(kind) or {}) - used[kind]
        assert not unused, f"{kind} defined but used in no pipeline: {sorted(unused)}"
    extensions = set(otelcol.get("extensions") or {})
    assert extensions == set(otelcol["service"].get("extensions") or []), "extensions defined and enabled differ"


def test_each_connector_is_an_exporter_in_one_pipeline_and_a_receiver_in_another(otelcol):
    pipelines = _pipelines(otelcol)
    for connector in otelcol.get("connectors") or {}:
        assert any(connector in p.get("exporters", []) for p in pipelines.values()), connector
        assert any(connector in p.get("receivers", []) for p in pipelines.values()), connector


def test_memory_limiter_is_first_and_batch_is_last_in_every_pipeline(otelcol):
    for name, pipeline in _pipelines(otelcol).items():
        processors = [_type(p) for p in pipeline.get("processors", [])]
        assert processors, f"pipeline {name} has no processors"
        assert processors[0] == "memory_limiter", f"pipeline {name}: {processors}"
        assert processors[-1] == "batch", f"pipeline {name}: {processors}"


def test_traces_go_to_tempo_and_jaeger_and_metrics_to_prometheus(otelcol):
    pipelines = _pipelines(otelcol)
    traces = [p for name, p in pipelines.items() if _type(name) == "traces"]
    metrics = [p for name, p in pipelines.items() if _type(name) == "metrics"]
    trace_exporters = {e for p in traces for e in p["exporters"]}
    assert {"otlp_grpc/tempo", "otlp_grpc/jaeger"} <= trace_exporters
    assert "prometheus" in {e for p in metrics for e in p["exporters"]}
    assert all("otlp" in p["receivers"] for p in traces + metrics)
    receivers = otelcol["receivers"]["otlp"]["protocols"]
    assert receivers["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert receivers["http"]["endpoint"] == "0.0.0.0:4318"
    assert otelcol["exporters"]["prometheus"]["endpoint"] == "0.0.0.0:8889"


def test_span_metrics_connector_bridges_traces_to_metrics(otelcol):
    connector = _span_metrics_id(otelcol)
    pipelines = _pipelines(otelcol)
    assert any(_type(n) == "traces" and connector in p["exporters"] for n, p in pipelines.items())
    assert any(_type(n) == "metrics" and connector in p["receivers"] for n, p in pipelines.items())


def test_span_metrics_dimensions_are_the_useful_low_cardinality_ones(otelcol):
    settings = otelcol["connectors"][_span_metrics_id(otelcol)]
    names = [dimension["name"] for dimension in settings["dimensions"]]
    assert {"sparkrun.source", "sparkrun.stage", "host.name"} <= set(names)
    ids = [name for name in names if name.endswith(("_id", ".id"))]
    assert not ids, f"ids are unbounded and must never be metric dimensions: {ids}"
    assert "status.code" not in settings.get("exclude_dimensions", []), "the status dimension must stay"


def test_span_metrics_buckets_increase_up_to_an_hour(otelcol):
    histogram = otelcol["connectors"][_span_metrics_id(otelcol)]["histogram"]
    seconds = [_seconds(bucket) for bucket in histogram["explicit"]["buckets"]]
    assert seconds == sorted(seconds) and len(set(seconds)) == len(seconds), seconds
    assert seconds[0] <= 0.1, "sub-second work must still land in a bucket of its own"
    assert seconds[-1] >= 3600, "minutes-long work needs buckets up to at least an hour"
    assert histogram["unit"] == "s"


def test_span_metrics_buckets_match_the_adapter_histograms(otelcol):
    from otel.metrics import DURATION_BUCKETS

    buckets = otelcol["connectors"][_span_metrics_id(otelcol)]["histogram"]["explicit"]["buckets"]
    assert [_seconds(bucket) for bucket in buckets] == [float(b) for b in DURATION_BUCKETS]


@pytest.mark.parametrize(
    ("key", "dropped"),
    [
        ("sparkrun.metric.hf_token", True),
        ("sparkrun.metric.registry_password", True),
        ("sparkrun.metric.api_key", True),
        ("sparkrun.metric.AWS_SECRET_ACCESS_KEY", True),
        ("sparkrun.metric.token", True),
        ("sparkrun.metric.tokens_per_second", False),
        ("sparkrun.metric.prompt_tokens", False),
        ("sparkrun.metric.bytes_per_second", False),
        ("sparkrun.metric.error_type", False),
        ("sparkrun.operation_id", False),
    ],
)
def test_secret_metric_keys_are_deleted_from_spans_and_span_events(otelcol, key, dropped):
    groups = otelcol["processors"]["transform/drop_secret_keys"]["trace_statements"]
    statements = [statement for group in groups for statement in group["statements"]]
    targets = {statement.split("(", 1)[1].split(",", 1)[0] for statement in statements}
    assert targets == {"span.attributes", "spanevent.attributes"}
    for statement in statements:
        assert statement.startswith("delete_matching_keys(")
        assert bool(re.search(_ottl_string(statement), key)) is dropped


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("Authorization: Bearer 3f9c0d7e-token.value", True),
        ("pulled with hf_abcdefghijklmnopqrstuvwxyz0123456789", True),
        ("push to https://bob:hunter2@registry.example/v2", True),
        ("key sk-abcdefghijklmnopqrstuvwx rejected", True),
        ("operation 7687e83dac9de1d53b235d379b4592e2 failed", False),
        ("task-abcdefghijklmnopqrstuvwxyz is running", False),
    ],
)
def test_secret_looking_values_are_masked_but_ids_are_not(otelcol, value, masked):
    redaction = otelcol["processors"]["redaction"]
    assert redaction["allow_all_keys"] is True
    assert {"sparkrun.operation_id", "sparkrun.activity_id"} <= set(redaction["ignored_keys"])
    assert any(re.search(pattern, value) for pattern in redaction["blocked_values"]) is masked


# -- the compose stack --------------------------------------------------------------------


def _bind_sources(service: dict) -> list[str]:
    sources = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                sources.append(volume["source"])
        elif volume.split(":", 1)[0].startswith((".", "/", "~", "$")):
            sources.append(volume.split(":", 1)[0])
    return sources


def test_compose_has_no_version_key_and_the_expected_services(compose):
    assert "version" not in compose
    assert {"otel-collector", "jaeger", "tempo", "prometheus", "grafana"} <= set(compose["services"])


def test_every_mounted_config_exists_in_the_repository(compose):
    checked = 0
    for name, service in compose["services"].items():
        for source in _bind_sources(service):
            if "$" in source:
                continue  # configured by the user's environment (the daemon token)
            path = (CONFIG_DIR / source).resolve()
            assert path.exists(), f"service {name} mounts {source}, which does not exist ({path})"
            checked += 1
    assert checked >= 5  # otelcol.yaml, tempo.yaml, prometheus.yml, grafana provisioning and dashboards


def test_services_mount_their_configuration_files(compose):
    services = compose["services"]
    assert "./otelcol.yaml" in _bind_sources(services["otel-collector"])
    assert "./tempo.yaml" in _bind_sources(services["tempo"])
    assert "./prometheus.yml" in _bind_sources(services["prometheus"])
    grafana = [volume.split(":")[:2] for volume in services["grafana"]["volumes"] if isinstance(volume, str)]
    assert ["../grafana/provisioning", "/etc/grafana/provisioning"] in grafana
    assert ["../grafana/dashboards", "/var/lib/grafana/dashboards"] in grafana


def test_collector_image_matches_the_version_the_config_targets(compose):
    targeted = re.search(r"contrib\* distribution v(\d+\.\d+\.\d+)", OTELCOL.read_text()).group(1)
    image = compose["services"]["otel-collector"]["image"]
    assert image == f"otel/opentelemetry-collector-contrib:{targeted}"
    for service in compose["services"].values():
        assert ":" in service["image"] and not service["image"].endswith(":latest"), service["image"]


def test_documented_ports_are_published(compose):
    published = set()
    for service in compose["services"].values():
        for mapping in service.get("ports", []):
            published.add(int(str(mapping).split(":")[0]))
    assert {4317, 4318, 8889, 16686, 3200, 9090, 3000} <= published


def test_collector_exporters_point_at_compose_services(otelcol, compose):
    for exporter_id in ("otlp_grpc/tempo", "otlp_grpc/jaeger"):
        host, port = otelcol["exporters"][exporter_id]["endpoint"].split(":")
        assert host in compose["services"] and port == "4317"
        assert otelcol["exporters"][exporter_id]["tls"]["insecure"] is True


def test_tempo_receives_otlp_grpc_and_serves_http_on_3200():
    tempo = _load(TEMPO)
    assert tempo["server"]["http_listen_port"] == 3200
    assert tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    assert tempo["storage"]["trace"]["backend"] == "local"


def test_grafana_datasources_point_at_compose_services(compose):
    files = sorted(DATASOURCES.glob("*.y*ml"))
    assert files, f"no datasource provisioning in {DATASOURCES}"
    services = compose["services"]
    seen = set()
    for file in files:
        for datasource in _load(file).get("datasources", []):
            url = urlsplit(datasource["url"])
            assert url.hostname in services, f"{file.name}: {datasource['name']} points at {url.hostname}"
            seen.add(url.hostname)
    assert {"prometheus", "tempo", "jaeger"} <= seen


# -- Prometheus -------------------------------------------------------------------------


def _targets(prometheus: dict) -> dict[str, list[str]]:
    return {
        job["job_name"]: [t for static in job.get("static_configs", []) for t in static["targets"]]
        for job in prometheus["scrape_configs"]
    }


def test_prometheus_scrapes_the_collector_and_the_daemon(prometheus):
    targets = [target for job in _targets(prometheus).values() for target in job]
    assert "otel-collector:8889" in targets
    assert "host.docker.internal:8765" in targets


def test_daemon_scrape_uses_the_mounted_bearer_token(prometheus, compose):
    (job,) = [job for job in prometheus["scrape_configs"] if "host.docker.internal:8765" in str(job)]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    service = compose["services"]["prometheus"]
    (token_mount,) = [v for v in service["volumes"] if isinstance(v, dict) and "$" in v["source"]]
    assert token_mount["target"] == job["authorization"]["credentials_file"]
    assert token_mount["read_only"] is True and token_mount["bind"]["create_host_path"] is False
    assert token_mount["source"].startswith("${SPARKRUN_TOKEN_FILE:-")
    assert "host.docker.internal:host-gateway" in service["extra_hosts"]
