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
    assert (
        result.exit_code == 2
        and "'nope' is not one of 'feedback', 'log', 'progress', 'benchmark', 'setup'" in result.output
    )


def _leaves(command, path=()):  # type: ignore[no-untyped-def]
    import click

    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, command


def test_every_option_of_every_command_has_help_text():
    import click

    missing = [
        (" ".join(path), option.opts[0])
        for path, command in _leaves(cli)
        for option in command.params
        if isinstance(option, click.Option) and not option.help
    ]
    assert missing == []


def test_global_options_work_before_and_after_the_command(tmp_path):
    runner = CliRunner()
    for args in (
        ["-q", "--no-otel", "--state-dir", str(tmp_path), "status"],
        ["status", "-q", "--no-otel", "--state-dir", str(tmp_path)],
        ["--state-dir", str(tmp_path), "status", "-q"],
    ):
        result = runner.invoke(cli, args)
        assert (result.exit_code, result.output) == (0, "no deployments\n"), args


def test_a_state_dir_before_the_command_is_the_one_it_uses(tmp_path):
    result = CliRunner().invoke(cli, ["--state-dir", str(tmp_path / "s"), "--otel", "doctor"])
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 's'} is writable" in result.output
    assert (tmp_path / "s" / "traces").is_dir()


def test_a_flag_before_the_command_is_not_undone_by_the_environment_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKRUN_OTEL", "1")
    result = CliRunner().invoke(cli, ["--no-otel", "doctor", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0 and not (tmp_path / "traces").exists()


def test_shell_completion_completes_commands():
    env = {"_SPARKRUN_COMPLETE": "bash_complete", "COMP_WORDS": "sparkrun da", "COMP_CWORD": "1"}
    result = CliRunner().invoke(cli, [], env=env, prog_name="sparkrun")
    assert result.output.split() == ["plain,daemon"]
