"""sparkrun benchmark runs in a subprocess, with the example fake framework as a plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
FAKE_DIR = ROOT / "examples" / "benchmarks"


def offline_environment(home: Path) -> dict[str, str]:
    """What a benchmark run needs here: the frameworks' environments, a HOME of its own, no network."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "SPARKRUN_BENCHMARK_ENVS": os.environ.get("SPARKRUN_BENCHMARK_ENVS", str(ROOT / ".bench-envs")),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


class Bench:
    """A state directory and a configuration that loads the fake framework."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.config = root / "config.yaml"
        self.config.write_text("benchmark:\n  plugins: [fake_framework]\n", encoding="utf-8")

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
        return {
            **env,
            **offline_environment(self.root / "home"),
            "SPARKRUN_CONFIG": str(self.config),
            "PYTHONPATH": str(FAKE_DIR),
            "COLUMNS": "160",
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "sparkrun", "benchmark", *args, "--state-dir", str(self.state_dir)]

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout)

    def run_fake(
        self, *args: str, mode: str = "ok", tasks: int = 1, lines: int = 10, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.cli(
            "run",
            str(EXAMPLE_RECIPE),
            "--framework",
            "fake",
            "--arg",
            f"mode={mode}",
            "--arg",
            f"tasks={tasks}",
            "--arg",
            f"lines={lines}",
            *args,
            timeout=timeout,
        )

    def state(self, benchmark_id: str) -> dict[str, Any]:
        return json.loads((self.state_dir / "benchmarks" / benchmark_id / "run.json").read_text())

    def leftovers(self) -> list[int]:
        """Pids of fake tools and example servers started under this state directory."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if any(str(self.state_dir) in word for word in words) and any("fake_framework" in w for w in words):
                found.append(int(entry.name))
        return found
