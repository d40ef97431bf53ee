"""Structural checks of the Grafana provisioning and dashboards in grafana/.

Grafana itself can't run here, so these checks catch what it would otherwise
reveal only in a browser: duplicate panel ids, datasources that provisioning
doesn't define, variables that resolve to nothing, unbalanced PromQL, id labels
in queries, and trace links that don't carry the operation id. Whether each
PromQL expression returns data is proven against a real Prometheus in
tests/integration/test_prometheus_dashboards.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "datasources.yaml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "dashboards.yaml"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))

#: Where the dashboard provider reads from inside the Grafana container (the compose file mounts grafana/dashboards).
DASHBOARD_MOUNT = "/var/lib/grafana/dashboards"
#: Where Grafana reads provisioning inside its container.
PROVISIONING_MOUNT = "/etc/grafana/provisioning"

#: Variables Grafana defines itself.
BUILTIN_VARIABLES = {
    "__all",
    "__auto",
    "__dashboard",
    "__from",
    "__interval",
    "__interval_ms",
    "__name",
    "__org",
    "__range",
    "__range_ms",
    "__range_s",
    "__rate_interval",
    "__rate_interval_ms",
    "__timezone",
    "__to",
    "__user",
}
#: Datasource uids Grafana defines itself (annotations, mixed panels, panels reusing another panel's query).
BUILTIN_DATASOURCES = {"-- Grafana --", "-- Mixed --", "-- Dashboard --", "grafana"}

#: ``$var``, ``${var}``, ``${var:format}`` and the deprecated ``[[var]]``.
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
#: Labels whose values are per operation or activity: one series each would make Prometheus's cardinality explode.
_ID_LABEL = re.compile(r"\b(?:sparkrun_)?(?:operation|activity|job|trace|span)_id\b")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _load_dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def panels_of(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    yield from walk(dashboard.get("panels", []))


def _datasource_uid(reference: Any) -> str | None:
    if isinstance(reference, dict):
        return reference.get("uid")
    return reference  # a name (legacy) or None


def _panel_datasource(panel: dict[str, Any], target: dict[str, Any]) -> Any:
    return target.get("datasource") or panel.get("datasource")


def prometheus_expressions(dashboard: dict[str, Any], prometheus_uid: str = "prometheus") -> list[tuple[str, str]]:
    """(panel title, expr) of every Prometheus target of ``dashboard``."""
    found = []
    for panel in panels_of(dashboard):
        for target in panel.get("targets", []):
            if _datasource_uid(_panel_datasource(panel, target)) == prometheus_uid and "expr" in target:
                found.append((panel.get("title", f"panel {panel.get('id')}"), target["expr"]))
    return found


def variable_query(variable: dict[str, Any]) -> str:
    """The query text of a templating variable (Grafana stores it as a string or an object)."""
    query = variable.get("query", "")
    if isinstance(query, dict):
        query = query.get("query", "")
    return query or variable.get("definition", "")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def variables_in(text: str) -> set[str]:
    return {next(name for name in match.groups() if name) for match in _VARIABLE.finditer(text)}


def unbalanced(expr: str) -> str | None:
    """Why ``expr``'s brackets or quotes don't balance, or None."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    without_strings = _STRING.sub('""', expr)
    if any(quote in without_strings.replace('""', "") for quote in "\"'`"):
        return "an unterminated string"
    for char in without_strings:
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return f"an unmatched {char!r}"
    return f"an unclosed {stack[-1]!r}" if stack else None


def compose_files() -> list[Path]:
    return sorted(path for pattern in ("*compose*.yaml", "*compose*.yml") for path in ROOT.glob(f"*/{pattern}"))


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def datasources() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))
    assert document["apiVersion"] == 1
    return {source["uid"]: source for source in document["datasources"]}


@pytest.fixture(scope="module", params=DASHBOARD_FILES, ids=lambda path: path.name)
def dashboard(request) -> dict[str, Any]:
    return _load_dashboard(request.param)


# -- provisioning ---------------------------------------------------------------------------


def test_there_are_dashboards_to_check():
    assert [path.name for path in DASHBOARD_FILES] == ["sparkrun-operations.json"]


def test_datasources_have_unique_uids_and_one_default():
    document = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))
    uids = [source["uid"] for source in document["datasources"]]
    assert len(uids) == len(set(uids)), uids
    assert {source["type"] for source in document["datasources"]} == {"prometheus", "tempo", "jaeger"}
    assert [source["uid"] for source in document["datasources"] if source.get("isDefault")] == ["prometheus"]
    for source in document["datasources"]:
        assert urlsplit(source["url"]).scheme in ("http", "https"), source


def test_the_dashboard_provider_reads_the_mounted_dashboards_dir():
    document = yaml.safe_load(PROVIDERS.read_text(encoding="utf-8"))
    assert document["apiVersion"] == 1
    (provider,) = document["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == DASHBOARD_MOUNT


def _bind_mounts(compose: Path, service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a compose service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0]
        else:
            source, target = volume.get("source", ""), volume.get("target", "")
        if source.startswith((".", "/")):
            mounts[target] = (compose.parent / source).resolve()
    return mounts


def test_the_compose_stack_mounts_provisioning_and_dashboards_where_grafana_reads_them():
    files = compose_files()
    if not files:
        pytest.fail("no compose file (*compose*.yaml) in a top-level directory such as collector-config/")
    grafana_services = []
    for compose in files:
        document = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
        for name, service in (document.get("services") or {}).items():
            image = str(service.get("image", "")).rsplit("/", 1)[-1].split(":")[0]
            if image in ("grafana", "grafana-oss", "grafana-enterprise"):
                grafana_services.append((compose, name, _bind_mounts(compose, service)))
    assert grafana_services, f"no Grafana service in {[str(path.relative_to(ROOT)) for path in files]}"
    for compose, name, mounts in grafana_services:
        where = f"{compose.relative_to(ROOT)} service {name}"
        assert mounts.get(DASHBOARD_MOUNT) == DASHBOARD_DIR, (
            f"{where} must mount grafana/dashboards at {DASHBOARD_MOUNT}"
        )
        provisioning = GRAFANA / "provisioning"
        assert mounts.get(PROVISIONING_MOUNT) == provisioning or all(
            mounts.get(f"{PROVISIONING_MOUNT}/{kind}") == provisioning / kind for kind in ("datasources", "dashboards")
        ), f"{where} must mount grafana/provisioning at {PROVISIONING_MOUNT}"


# -- dashboards -----------------------------------------------------------------------------


def test_panels_in_collapsed_rows_are_walked():
    nested = {"panels": [{"id": 1, "type": "row", "panels": [{"id": 2}, {"id": 3}]}, {"id": 4}]}
    assert [panel["id"] for panel in panels_of(nested)] == [1, 2, 3, 4]


def test_the_dashboard_has_a_stable_uid_and_a_modern_schema(dashboard):
    assert dashboard["uid"] == "sparkrun-operations"
    assert dashboard["schemaVersion"] >= 36  # Grafana 9.x+; 10 and 11 migrate it forward
    assert "id" not in dashboard or dashboard["id"] is None, "provisioned dashboards must not pin a database id"


def test_panel_ids_are_unique(dashboard):
    seen: dict[int, str] = {}
    for panel in panels_of(dashboard):
        assert isinstance(panel.get("id"), int), f"panel {panel.get('title')!r} has no integer id"
        assert panel["id"] not in seen, (
            f"panels {seen[panel['id']]!r} and {panel.get('title')!r} share id {panel['id']}"
        )
        seen[panel["id"]] = panel.get("title", "")


def test_panels_are_described_and_laid_out_without_overlap(dashboard):
    cells: dict[tuple[int, int], str] = {}
    for panel in panels_of(dashboard):
        title = panel.get("title")
        if panel["type"] != "row":
            assert panel.get("description"), f"panel {title!r} has no description"
            refs = [target.get("refId") for target in panel.get("targets", [])]
            assert refs and len(refs) == len(set(refs)), f"panel {title!r} needs targets with distinct refIds: {refs}"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, f"panel {title!r} is off the grid"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]!r} and {title!r} overlap at x={x}, y={y}"
                cells[(x, y)] = title


def test_every_datasource_reference_exists_in_provisioning(dashboard, datasources):
    references = []
    for panel in panels_of(dashboard):
        references.append((panel.get("title"), panel.get("datasource")))
        references += [(panel.get("title"), target.get("datasource")) for target in panel.get("targets", [])]
    references += [(f"variable {v['name']}", v.get("datasource")) for v in dashboard["templating"]["list"]]
    references += [(f"annotation {a['name']}", a.get("datasource")) for a in dashboard["annotations"]["list"]]
    for where, reference in references:
        if reference is None:
            continue
        assert isinstance(reference, dict), f"{where}: refer to datasources by uid, not by name ({reference!r})"
        uid = reference.get("uid")
        if uid in BUILTIN_DATASOURCES:
            continue
        assert uid in datasources, f"{where}: datasource uid {uid!r} is not provisioned ({sorted(datasources)})"
        assert reference.get("type") in (None, datasources[uid]["type"]), (
            f"{where}: datasource {uid!r} is a {datasources[uid]['type']}, not a {reference.get('type')}"
        )


def test_every_variable_used_is_defined(dashboard):
    defined = {variable["name"] for variable in dashboard["templating"]["list"]} | BUILTIN_VARIABLES
    places = [(f"panel {panel.get('title')!r}", panel) for panel in panels_of(dashboard)]
    places += [(f"variable {v['name']}", v) for v in dashboard["templating"]["list"]]
    places += [(f"dashboard link {link.get('title')!r}", link) for link in dashboard.get("links", [])]
    for where, value in places:
        for text in _strings(value):
            unknown = variables_in(text) - defined
            assert not unknown, f"{where} uses undefined variable(s) {sorted(unknown)} in {text!r}"


def test_every_variable_is_used(dashboard):
    used = set()
    for text in _strings([dashboard["panels"], dashboard.get("links", [])]):
        used |= variables_in(text)
    for variable in dashboard["templating"]["list"]:
        assert variable["name"] in used, f"variable {variable['name']} is defined but no panel or link uses it"


def test_prometheus_expressions_are_balanced_and_free_of_id_labels(dashboard):
    expressions = prometheus_expressions(dashboard)
    assert expressions, "the dashboard has no Prometheus expressions"
    expressions += [
        (f"variable {v['name']}", variable_query(v)) for v in dashboard["templating"]["list"] if v["type"] == "query"
    ]
    for title, expr in expressions:
        assert isinstance(expr, str) and expr.strip(), f"panel {title!r} has an empty expression {expr!r}"
        problem = unbalanced(expr)
        assert problem is None, f"panel {title!r}: expression has {problem}: {expr}"
        ids = _ID_LABEL.findall(expr)
        assert not ids, f"panel {title!r} uses per-operation id label(s) {ids}: {expr}"


def test_template_matchers_are_regexes_that_all_can_match(dashboard):
    """Multi-value and All selections expand to regexes; All must also match series without the label."""
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    for title, expr in prometheus_expressions(dashboard):
        for label, operator, value in _MATCHER.findall(expr):
            for name in variables_in(value):
                if name in BUILTIN_VARIABLES:
                    continue
                variable = variables[name]
                assert operator == "=~", f"panel {title!r} must match ${name} with =~, not {operator}: {expr}"
                if variable.get("includeAll"):
                    assert variable.get("allValue") == ".*", (
                        f"variable {name} needs allValue '.*' so All keeps series without {label}: panel {title!r}"
                    )


def test_the_host_filter_is_only_on_per_host_panels(dashboard):
    for title, expr in prometheus_expressions(dashboard):
        if "$host" in expr or "${host" in expr:
            assert "host_name" in re.sub(r"\{[^}]*\}", "", expr), (
                f"panel {title!r} filters by host but does not break its result down by host_name: {expr}"
            )


def _links(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    links = [("dashboard", link["url"]) for link in dashboard.get("links", []) if link.get("type") == "link"]
    for panel in panels_of(dashboard):
        links += [(f"panel {panel.get('title')!r}", link["url"]) for link in panel.get("links", [])]
    return links


def test_a_trace_panel_shows_the_operation_trace_from_tempo(dashboard):
    traces = [panel for panel in panels_of(dashboard) if panel["type"] == "traces"]
    assert traces, "the dashboard has no traces panel"
    for panel in traces:
        assert _datasource_uid(panel["datasource"]) == "tempo"
        queries = [target.get("query", "") for target in panel["targets"]]
        assert any("operation_id" in variables_in(query) for query in queries), queries


def _explore_queries(url: str) -> list[dict[str, Any]]:
    """The queries of a Grafana Explore URL (``panes`` of Grafana 10+, or the older ``left``)."""
    parts = urlsplit(url)
    assert parts.path.endswith("/explore"), url
    params = parse_qs(parts.query)
    if "panes" in params:
        panes = json.loads(params["panes"][0])
        return [query for pane in panes.values() for query in pane["queries"]]
    return json.loads(params["left"][0])["queries"]


def test_links_open_the_operation_trace_in_tempo_and_jaeger(dashboard):
    links = _links(dashboard)
    tempo = [(where, url) for where, url in links if "/explore" in url]
    jaeger = [(where, url) for where, url in links if "/trace/" in url]
    assert {where for where, _ in tempo} >= {"dashboard"}, "the dashboard needs a link to the trace in Tempo"
    assert {where for where, _ in jaeger} >= {"dashboard"}, "the dashboard needs a link to the trace in Jaeger"
    for where, url in tempo:
        queries = _explore_queries(url)
        assert queries, f"{where}: the Explore link has no query: {url}"
        for query in queries:
            assert _datasource_uid(query.get("datasource")) == "tempo", f"{where}: {query}"
            assert variables_in(query["query"]) == {"operation_id"}, f"{where}: {query}"
    for where, url in jaeger:
        assert re.fullmatch(r"https?://[^/]+/trace/\$\{operation_id\}", url), f"{where}: {url}"
