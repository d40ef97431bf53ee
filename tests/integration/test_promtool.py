"""collector-config/prometheus.yml passes the real ``promtool check config``, and a broken copy does not.

These tests run Debian's ``promtool`` (``make prometheus`` installs it), an external binary, so they
live with the integration tests; the structural checks of the same file stay in
``tests/unit/test_collector_config.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.daemon_harness import ROOT

pytestmark = pytest.mark.integration

PROMETHEUS = ROOT / "collector-config" / "prometheus.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool not found: run `make prometheus` (installs Debian's prometheus package, which ships it)")
    return binary


def _check_config(promtool: str, text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    return subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )


def _with_real_token_file(tmp_path: Path) -> str:
    """prometheus.yml with the container's token path replaced by a real file (promtool checks it exists)."""
    token = tmp_path / "sparkrun-token"
    token.write_text("0123456789abcdef\n")
    text = PROMETHEUS.read_text()
    replaced = 0
    for job in yaml.safe_load(text)["scrape_configs"]:
        if "authorization" in job:
            text = text.replace(job["authorization"]["credentials_file"], str(token))
            replaced += 1
    assert replaced, "no scrape job reads a credentials file; this helper has nothing to replace"
    return text


def test_promtool_accepts_prometheus_yml(promtool, tmp_path):
    result = _check_config(promtool, _with_real_token_file(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_rejects_a_broken_copy(promtool, tmp_path):
    # Proves the check above is real: the same file with one misspelt field fails.
    text = _with_real_token_file(tmp_path)
    assert "metrics_path:" in text
    result = _check_config(promtool, text.replace("metrics_path:", "metric_path:"), tmp_path)
    assert result.returncode != 0
    assert "metric_path" in result.stdout + result.stderr
