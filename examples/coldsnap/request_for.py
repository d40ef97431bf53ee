"""Print the example request (request-example.json, a capture) re-aimed at another operation.

For running the example controller by hand: the id, ``lifecycle`` and ``artifact``/``output``
change the way sparkrun would change them; the output is sorted, indented JSON ending in a
newline, as sparkrun sends it.

Usage:
    python3 examples/coldsnap/request_for.py OPERATION [--artifact /abs/dir] | \\
        python3 examples/coldsnap/controller.py OPERATION --request-json - ...
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path

EXAMPLE = Path(__file__).with_name("request-example.json")
OPERATIONS = ("capture", "publish", "publish-native", "restore", "sleep", "wake", "status")
WRITES_OUTPUT = ("capture", "publish", "publish-native")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The example ColdSnap request for one operation.")
    parser.add_argument("operation", choices=OPERATIONS)
    parser.add_argument("--artifact", help="artifact directory (absolute); default: the example's")
    args = parser.parse_args(argv)
    request = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    location = request.pop("output")
    if args.artifact:
        location["uri"] = args.artifact
    operation = args.operation
    workload = request["workload"]["name"]
    suffix = f"-{secrets.token_hex(6)}" if operation in WRITES_OUTPUT else ""
    request.update(operation=operation, id=f"{workload}-{operation}{suffix}")
    request["output" if operation in WRITES_OUTPUT else "artifact"] = location
    if operation == "status":
        request.pop("lifecycle")
    else:
        request["lifecycle"] = {"activation_state": "sleeping" if operation == "sleep" else "active"}
    sys.stdout.write(json.dumps(request, sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
