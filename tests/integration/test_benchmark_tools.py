"""The parsers and result readers against the real frameworks, run against a stub server on loopback.

The frameworks are not sparkrun dependencies: they run from the environments
sparkrun's environment manager prepares (the ``benchmark_tools`` fixture). These
tests catch a change in the tools' formats that the unit tests, built from the
formats as read, cannot.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrun.application import initialize
from sparkrun.benchmarking.parsers import LlamaBenchyParser, ToolEvalBenchParser
from sparkrun.benchmarking.results import read_llama_benchy_result, read_tool_eval_bench_result
from tests.unit.benchmarking.conftest import delivering

pytestmark = pytest.mark.integration
WORDS = [f"word{n}" for n in range(200)]


class _Stub(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers every chat in a few words, and serves a book."""

    book = b""

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, value: object) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.endswith("/book.txt"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.book)))
            self.end_headers()
            self.wfile.write(self.book)
        else:
            self._json({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not request.get("stream"):
            message = {"role": "assistant", "content": "I cannot help with that."}
            self._json({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in WORDS[:5]:
            chunk = {"choices": [{"index": 0, "delta": {"content": f"{word} "}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.005)
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def stub_url() -> Iterator[str]:
    rng = random.Random(7)
    _Stub.book = " ".join(rng.choice(WORDS) for _ in range(20_000)).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _run(command: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1"}
    # cwd: tool-eval-bench keeps its run database under ./data of the working directory.
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=home, check=False)


def _feed(tmp_path: Path, parser, stderr: str, result, *, success: bool):
    sctx = initialize(state_dir=tmp_path / "state", config_path=None)
    sctx.events = lambda event: None
    with delivering(sctx, parser) as run:
        run.start()
        run.feed_all(stderr.splitlines())
        run.finish(result, success=success)
    ignored = [event["message"] for event in run.events if event["message"].startswith("Ignored a line")]
    assert ignored == []
    return run.events


@pytest.mark.parametrize("trials", [1, 2])
def test_tool_eval_bench_as_it_runs(benchmark_tools, tmp_path, stub_url, trials):
    result_file = tmp_path / "result.json"
    done = _run(
        [
            str(benchmark_tools["tool-eval-bench"] / "tool-eval-bench"),
            *f"run --base-url {stub_url}/v1 --model stub --json --json-file {result_file}".split(),
            *f"--scenarios TC-01 TC-02 TC-03 --trials {trials} --no-preflight --no-warmup".split(),
            *f"--output-dir {tmp_path / 'out'}".split(),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = read_tool_eval_bench_result(result_file)
    assert result.measured and result.scenarios == 3
    events = _feed(tmp_path, ToolEvalBenchParser(trials=trials), done.stderr, result, success=True)
    live = [event for event in events if event["stage"] == "scenarios" and event["level"] == "progress"]
    assert len(live) == 3 * trials
    final = events[-1]
    if trials == 1:
        assert [event["current"] for event in live] == [1, 2, 3]
        assert all(event["total"] == 3 and event["total_kind"] == "exact" for event in live)
        assert (final["current"], final["total"], final["status"]) == (3, 3, "succeeded")
    else:
        assert [event["current"] for event in live] == [1, 2, 3, 4, 5, 6]
        assert (final["current"], final["total_kind"], final["unit"]) == (6, "unknown", "scenario results")
    assert final["metrics"]["scenarios_failed"] == result.failed


def test_llama_benchy_as_it_runs(benchmark_tools, tmp_path, stub_url):
    tokenizer = tmp_path / "tokenizer.json"
    vocabulary = {"[UNK]": 0, **{word: index + 1 for index, word in enumerate(WORDS)}}
    special = {"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False}
    tokenizer.write_text(
        json.dumps(
            {
                "version": "1.0",
                "truncation": None,
                "padding": None,
                "added_tokens": [{**special, "normalized": False, "special": True}],
                "normalizer": None,
                "pre_tokenizer": {"type": "Whitespace"},
                "post_processor": None,
                "decoder": None,
                "model": {"type": "WordLevel", "vocab": vocabulary, "unk_token": "[UNK]"},
            }
        )
    )
    result_file = tmp_path / "result.json"
    done = _run(
        [
            str(benchmark_tools["llama-benchy"] / "llama-benchy"),
            *f"--base-url {stub_url}/v1 --model stub --tokenizer {tokenizer} --book-url {stub_url}/book.txt".split(),
            *["--pp", "64", "--tg", "5", "--depth", "0", "--concurrency", "2", "--runs", "2"],
            *["--no-warmup", "--skip-coherence"],
            *f"--format json --save-result {result_file} --emit-progress /dev/stderr".split(),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    result = read_llama_benchy_result(result_file)
    assert result.measured and result.benchmarks == 1 and result.rows[0].concurrency == 2
    events = _feed(tmp_path, LlamaBenchyParser(), done.stderr, result, success=True)
    stages = [event["stage"] for event in events]
    assert stages[0] == "preparation" and "requests" in stages and stages[-1] == "finalization"
    final = events[-1]
    assert (final["current"], final["total_kind"], final["status"]) == (4, "unknown", "succeeded")
    assert final["metrics"]["requests_started"] == 4 and final["metrics"]["tg_tokens_per_second"] > 0
