"""The sparkrun daemon as a real process: authentication, exposure, request validation, body limits.

Every test starts its own ``sparkrun daemon serve`` (see :mod:`tests.integration.daemon_harness`)
with the test operations of :mod:`tests.integration.daemon_plugins`, and stops it, its
workers and any deployment afterwards.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys

import httpx
import pytest

from tests.integration.daemon_harness import ROOT, daemon_environment

pytestmark = pytest.mark.integration


KNOWN_OPERATIONS = (
    "ask, benchmark, burst, coldsnap, console_demo, distribute, fail, image_relay, leak, legacy, legacy_events, "
    "logs, relay, result, run, sleep, status, stderr_flood, stop"
)
UNKNOWN_JOB = "0123456789abcdef0123456789abcdef"


# -- authentication and exposure ------------------------------------------------------------


def test_health_answers_without_a_token(daemon):
    response = httpx.get(f"{daemon.url}/v1/health", timeout=10)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


@pytest.mark.parametrize("header", [None, "Basic {token}", "Bearer", "{token}"])
def test_a_request_without_a_bearer_token_is_401(daemon, header):
    headers = {} if header is None else {"Authorization": header.format(token=daemon.token)}
    for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", f"/v1/jobs/{UNKNOWN_JOB}/events")):
        response = httpx.request(method, f"{daemon.url}{path}", headers=headers, timeout=10)
        assert response.status_code == 401, (method, path)
        assert response.json() == {"error": "missing bearer token (header=Authorization)"}


@pytest.mark.parametrize("wrong", ["not-the-token", "{token}x", "{token_prefix}"])
def test_a_wrong_token_is_403(daemon, wrong):
    token = wrong.format(token=daemon.token, token_prefix=daemon.token[:-1])
    response = httpx.get(f"{daemon.url}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 403
    assert response.json() == {"error": "wrong bearer token (header=Authorization)"}
    # The right token works, whatever the case of the scheme.
    right = httpx.get(f"{daemon.url}/v1/jobs", headers={"Authorization": f"bearer {daemon.token}"}, timeout=10)
    assert right.status_code == 200 and right.json() == {"jobs": [], "counts": {}}


def test_the_token_file_is_private_to_its_owner(daemon):
    assert stat.S_IMODE(daemon.token_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.token_path.parent.stat().st_mode) == 0o700
    assert len(daemon.token) >= 32
    info = json.loads(daemon.info_path.read_text())
    assert (info["url"], info["pid"]) == (daemon.url, daemon.process.pid)
    assert info["identity"]["pid"] == daemon.process.pid and info["identity"]["start_ticks"] > 0
    assert daemon.url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com"])
def test_a_non_loopback_host_is_refused_without_allow_remote(tmp_path, host):
    state = tmp_path / "state"
    completed = subprocess.run(
        [sys.executable, "-m", "sparkrun", "daemon", "serve", "--state-dir", str(state), "--port", "0", "--host", host],
        cwd=ROOT,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == (
        f"error: refusing to listen on a non-loopback address (host={host}); "
        "pass --allow-remote to expose the daemon beyond this machine"
    )
    assert not (state / "daemon" / "daemon.json").exists()


def test_allow_remote_listens_beyond_loopback_and_warns(start_daemon):
    daemon = start_daemon(args=("--host", "0.0.0.0", "--allow-remote"))
    assert daemon.url.startswith("http://0.0.0.0:")
    port = daemon.url.rsplit(":", 1)[1]
    assert httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=10).status_code == 401
    assert "the daemon is reachable from other machines; guard its token" in daemon.output()


# -- request validation ---------------------------------------------------------------------

JOB_ENDPOINTS = [
    ("GET", "/v1/jobs/{job_id}"),
    ("GET", "/v1/jobs/{job_id}/events"),
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("GET", "/v1/jobs/{job_id}/prompts"),
]


@pytest.mark.parametrize("method, path", [*JOB_ENDPOINTS, ("POST", "/v1/jobs/{job_id}/prompts/abc")])
@pytest.mark.parametrize("job_id", ["not-a-job", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcde"])
def test_a_malformed_job_id_is_400(daemon, method, path, job_id):
    response = daemon.client.request(method, path.format(job_id=job_id), json={"answer": True})
    assert response.status_code == 400
    assert response.json() == {"error": f"malformed job id (job_id={job_id!r}, expected 32 lowercase hex characters)"}


@pytest.mark.parametrize("method, path", JOB_ENDPOINTS)
def test_an_unknown_job_is_404(daemon, method, path):
    response = daemon.client.request(method, path.format(job_id=UNKNOWN_JOB))
    assert response.status_code == 404
    assert response.json() == {"error": f"unknown job (job_id={UNKNOWN_JOB})"}


def test_an_answer_for_an_unknown_job_is_404(daemon):
    response = daemon.client.post(f"/v1/jobs/{UNKNOWN_JOB}/prompts/abc", json={"answer": True})
    assert response.status_code == 404
    assert response.json() == {"error": f"no pending prompt with this id (job_id={UNKNOWN_JOB}, prompt_id='abc')"}


@pytest.mark.parametrize("operation", ["nope", None, 7])
def test_an_unknown_operation_is_400_naming_the_known_ones(daemon, operation):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": {}})
    assert response.status_code == 400
    assert response.json() == {"error": f"unknown operation (operation={operation!r}, known: {KNOWN_OPERATIONS})"}
    assert daemon.client.get("/v1/jobs").json() == {"jobs": [], "counts": {}}


@pytest.mark.parametrize(
    "operation, arguments, message",
    [
        ("run", {"recipe": "x", "port": "80"}, "argument port must be int, not str ('80')"),
        ("sleep", {"seconds": "x"}, "argument seconds must be float, not str ('x')"),
        ("burst", {"count": True}, "argument count must be int, not bool (True)"),
        ("burst", {"count": 1.5}, "argument count must be int, not float (1.5)"),
        ("stop", {"all": "yes"}, "argument all must be bool, not str ('yes')"),
        ("run", {"recipe": "x", "overrides": []}, "argument overrides must be dict, not list ([])"),
        ("run", {"recipe": 5}, "argument recipe must be str, not int (5)"),
    ],
)
def test_an_argument_of_the_wrong_type_is_400_naming_it(daemon, operation, arguments, message):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
    assert response.status_code == 400
    assert response.json() == {"error": message}
    assert daemon.client.get("/v1/jobs").json() == {"jobs": [], "counts": {}}


@pytest.mark.parametrize(
    "operation, arguments, message",
    [
        ("sleep", {"bogus": 1}, "unknown argument 'bogus' for operation sleep (expected: seconds)"),
        ("status", {"name": "x"}, "unknown argument 'name' for operation status (expected: none)"),
    ],
)
def test_an_unknown_argument_is_400(daemon, operation, arguments, message):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
    assert response.status_code == 400
    assert response.json() == {"error": message}


def test_a_missing_required_argument_is_400(daemon):
    response = daemon.client.post("/v1/jobs", json={"operation": "run", "arguments": {"port": 80}})
    assert response.status_code == 400
    assert response.json() == {"error": "argument recipe is required for operation run"}


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"operation": "sleep", "arguments": [1]}, "arguments must be a JSON object, not list"),
        (["sleep"], "the body must be a JSON object with operation and arguments"),
    ],
)
def test_a_body_of_the_wrong_shape_is_400(daemon, payload, message):
    response = daemon.client.post("/v1/jobs", json=payload)
    assert response.status_code == 400
    assert response.json() == {"error": message}


def _body_of_size(size: int) -> bytes:
    head = b'{"operation": "burst", "arguments": {"count": 1}, "padding": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_an_oversized_body_is_413(daemon):
    response = daemon.client.post("/v1/jobs", content=_body_of_size(64 * 1024 + 1))
    assert response.status_code == 413
    assert response.json() == {"error": "the body is too large (bytes=65537, limit=65536)"}
    # A chunked body declares no length; it is measured as it arrives.
    chunks = iter([b"x" * 40_000, b"x" * 40_000])
    response = daemon.client.post("/v1/jobs", content=chunks)
    assert response.status_code == 413
    measured = re.fullmatch(r"the body is too large \(bytes=(\d+), limit=65536\)", response.json()["error"])
    assert measured and 65536 < int(measured[1]) <= 80000
    # Exactly at the limit is fine.
    assert daemon.client.post("/v1/jobs", content=_body_of_size(64 * 1024)).status_code == 202
    # Prompt answers have the same limit.
    answer = daemon.client.post(f"/v1/jobs/{UNKNOWN_JOB}/prompts/abc", content=_body_of_size(70_000))
    assert answer.status_code == 413
    assert answer.json() == {"error": "the body is too large (bytes=70000, limit=65536)"}


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{nope", "the body is not JSON (Expecting property name enclosed in double quotes at column 2)"),
        (b"operation=sleep", "the body is not JSON (Expecting value at column 1)"),
    ],
)
def test_a_body_that_is_not_json_is_400(daemon, body, message):
    response = daemon.client.post("/v1/jobs", content=body)
    assert response.status_code == 400
    assert response.json() == {"error": message}


def test_a_body_that_is_not_utf8_is_400(daemon):
    response = daemon.client.post("/v1/jobs", content=b'{"operation": "\xff"}')
    assert response.status_code == 400
    assert "error" in response.json()


@pytest.mark.parametrize("limit", ["0", "x", "10001"])
def test_a_bad_job_list_limit_is_400(daemon, limit):
    response = daemon.client.get("/v1/jobs", params={"limit": limit})
    assert response.status_code == 400
    assert response.json() == {"error": f"limit must be an integer from 1 to 10000 (limit={limit!r})"}


# -- regressions: bugs these tests found ---------------------------------------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_the_body_are_rejected(daemon, constant):
    body = f'{{"operation": "sleep", "arguments": {{"seconds": {constant}}}}}'.encode()
    response = daemon.client.post("/v1/jobs", content=body)
    listing = daemon.client.get("/v1/jobs")
    assert listing.status_code == 200, listing.text  # one bad job must not break the listing
    assert response.status_code == 400


def test_a_deeply_nested_body_is_400(daemon):
    response = httpx.post(
        f"{daemon.url}/v1/jobs", headers=daemon.auth, content=b"[" * 30_000 + b"]" * 30_000, timeout=30
    )
    assert response.status_code == 400
