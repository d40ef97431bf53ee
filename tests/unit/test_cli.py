"""The command line's global behaviour."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sparkrun import __version__
from sparkrun.cli.main import cli


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"sparkrun, version {__version__}"


def test_help_lists_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "schema" in result.output


def test_schema_command_prints_json_schema():
    result = CliRunner().invoke(cli, ["schema", "feedback"])
    assert result.exit_code == 0 and json.loads(result.output)["properties"]["type"] == {"const": "feedback"}


def test_unknown_schema_is_a_usage_error():
    result = CliRunner().invoke(cli, ["schema", "nope"])
    assert result.exit_code == 2 and "'nope' is not one of 'feedback', 'log', 'progress'" in result.output
