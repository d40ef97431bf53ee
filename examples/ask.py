"""Ask a running deployment one chat question through its OpenAI-compatible API.

Usage: ``python examples/ask.py DEPLOYMENT "question"``. The deployment's URL
comes from ``sparkrun.api.status``, so this works from any process.
"""

from __future__ import annotations

import json
import sys
import urllib.request

from sparkrun import api


def ask(deployment: str, question: str) -> str:
    (found,) = [d for d in api.status() if d.name == deployment and d.state == "running"] or [None]
    if found is None:
        raise SystemExit(f"error: no running deployment named {deployment!r}")
    with urllib.request.urlopen(f"{found.url}/v1/models", timeout=10) as response:
        model = json.load(response)["data"][0]["id"]
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}]}).encode()
    request = urllib.request.Request(
        f"{found.url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[2])
    print(f"{sys.argv[1]} answered: {ask(sys.argv[1], sys.argv[2])}")
