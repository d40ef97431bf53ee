"""The host inventory: every value that reaches the ssh command line is checked, errors name field and value."""

from __future__ import annotations

import pytest

from sparkrun.core.executors.inventory import HostEntry, check_host_name, read_inventory, read_ssh_options
from sparkrun.errors import ConfigError


def test_a_full_entry_and_an_empty_one():
    inventory = read_inventory(
        {
            "hosts": {
                "spark-1": {
                    "address": "10.0.0.2",
                    "user": "u",
                    "port": 2222,
                    "identity_file": "~/.ssh/id",
                    "known_hosts_file": "/k",
                    "python": "/opt/venv/bin/python",
                },
                "spark-2": None,
            }
        }
    )
    one, two = inventory["spark-1"], inventory["spark-2"]
    assert one.destination == "10.0.0.2" and one.port == 2222 and not one.identity_file.startswith("~")
    assert two == HostEntry("spark-2") and two.destination == "spark-2" and two.python == "python3"
    assert HostEntry.from_json(one.to_json()) == one


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("spark-1", "hosts is 'spark-1'; it must be a mapping of host name to settings"),
        ({"spark-1": ["a"]}, "hosts.spark-1 is ['a']; it must be a mapping of settings"),
        ({"-oProxyCommand=x": {}}, "hosts: '-oProxyCommand=x' is not a host name"),
        ({"spark-1": {"adress": "x"}}, "hosts.spark-1: unknown field 'adress' (fields: address, user, port"),
        (
            {"spark-1": {"address": "-oProxyCommand=touch /tmp/x"}},
            "hosts.spark-1.address is '-oProxyCommand=touch /tmp/x'",
        ),
        ({"spark-1": {"user": "-l root"}}, "hosts.spark-1.user is '-l root'; it must be a user name"),
        ({"spark-1": {"port": 0}}, "hosts.spark-1.port is 0; it must be an integer from 1 to 65535"),
        ({"spark-1": {"port": 70000}}, "hosts.spark-1.port is 70000; it must be an integer from 1 to 65535"),
        ({"spark-1": {"port": "22"}}, "hosts.spark-1.port is '22'; it must be an integer from 1 to 65535"),
        ({"spark-1": {"port": True}}, "hosts.spark-1.port is True; it must be an integer"),
        ({"spark-1": {"identity_file": ""}}, "hosts.spark-1.identity_file is ''; it must be a file path"),
        (
            {"spark-1": {"known_hosts_file": "a\nb"}},
            "hosts.spark-1.known_hosts_file is 'a\\nb'; it must be a file path",
        ),
    ],
)
def test_bad_entries_name_the_field_and_the_value(hosts, message):
    with pytest.raises(ConfigError) as raised:
        read_inventory({"hosts": hosts})
    assert message in str(raised.value)


def test_recipe_host_names_that_ssh_would_read_as_options_are_refused():
    assert check_host_name("spark-1.lan") == "spark-1.lan"
    for bad in ("-oProxyCommand=id", "", "a b", "x" * 300, None, "host;id"):
        with pytest.raises(ConfigError, match="is not a host name"):
            check_host_name(bad)


def test_ssh_options_are_checked():
    assert read_ssh_options({}).control_persist == 120
    assert read_ssh_options({"ssh": {"parallel": 2, "control_persist": 0}}).parallel == 2
    with pytest.raises(ConfigError, match=r"ssh.parallel is 0; it must be an integer from 1 to 256"):
        read_ssh_options({"ssh": {"parallel": 0}})
    with pytest.raises(ConfigError, match=r"ssh: unknown field 'persist'"):
        read_ssh_options({"ssh": {"persist": 1}})
    with pytest.raises(ConfigError, match=r"ssh.connect_timeout is inf"):
        read_ssh_options({"ssh": {"connect_timeout": float("inf")}})
