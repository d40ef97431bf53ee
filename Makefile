# The two Quick start commands: `make demo` and `make test`.
# Each creates its own virtual environment from the project's files.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Phoenix (the OTLP backend the integration tests export to) gets its own venv:
# it is large and pulls in dependencies the project must not see.
PHOENIX_VENV ?= .venv-phoenix
# The benchmark frameworks sparkrun runs (llama-benchy, tool-eval-bench) live in environments of their
# own, pinned, which sparkrun's environment manager installs (`sparkrun benchmark setup`): the tests use
# that cache instead of installing on first use.
BENCH_ENVS ?= .bench-envs

.PHONY: demo test lint bench bench-env clean phoenix prometheus sshd oci-tools chromium

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(PHOENIX_VENV)/.installed:
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install --quiet 'arize-phoenix==20.26.1'
	touch $@

phoenix: $(PHOENIX_VENV)/.installed

# `benchmark setup` installs only what is missing (or pinned differently), so this runs it every time.
bench-env: $(VENV)/.installed
	SPARKRUN_BENCHMARK_ENVS=$(abspath $(BENCH_ENVS)) $(VENV)/bin/sparkrun benchmark setup --no-otel

# Debian's Prometheus server, which the dashboard validation runs for real.
prometheus:
	@command -v prometheus >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Debian's OpenSSH server: the SSH executor's tests log into real sshd processes on loopback
# (tests/integration/ssh_hosts.py). In a container the postinst may say policy-rc.d denied starting it: fine.
sshd:
	@test -x /usr/sbin/sshd || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }

# Debian's umoci and skopeo build and read the real OCI image layouts of the image relay's tests
# (tests/integration/oci_images.py); rsync is the baseline the relay benchmark compares with.
oci-tools:
	@command -v umoci >/dev/null && command -v skopeo >/dev/null && command -v rsync >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    umoci skopeo rsync >/dev/null; }

# Debian's Chromium and its chromedriver (/usr/bin/chromedriver): the web console's tests drive a real
# headless browser through Selenium (tests/integration/browser.py); a small font so screenshots show text.
chromium:
	@test -x /usr/bin/chromedriver || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver fonts-dejavu-core >/dev/null; }

# The main job: launch the example chat server from its recipe, show it, show the
# operation's trace, ask it something, and stop it (state kept in .state/demo).
demo: $(VENV)/.installed
	@export SPARKRUN_STATE_DIR="$(CURDIR)/.state/demo"; sparkrun="$(VENV)/bin/sparkrun"; \
	$$sparkrun stop example-chat >/dev/null 2>&1; \
	$$sparkrun run examples/recipes/example-chat.yaml && $$sparkrun status && \
	$$sparkrun trace show latest && $(PY) examples/ask.py example-chat "hello from the demo"; \
	status=$$?; $$sparkrun stop example-chat; exit $$status

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# --durations: the slowest tests are listed after every run, so a test that grows slow shows up.
test: lint $(PHOENIX_VENV)/.installed bench-env prometheus sshd oci-tools chromium
	SPARKRUN_PHOENIX_PYTHON=$(abspath $(PHOENIX_VENV))/bin/python SPARKRUN_BENCHMARK_ENVS=$(abspath $(BENCH_ENVS)) \
	  $(PY) -m pytest --durations=15

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_feedback.py
	$(PY) benchmarks/bench_otel.py
	$(PY) benchmarks/bench_journal.py
	$(PY) benchmarks/bench_stream.py
	$(PY) benchmarks/bench_benchmarks.py
	$(PY) benchmarks/bench_ssh.py
	$(PY) benchmarks/bench_relay.py

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) $(BENCH_ENVS) .pytest_cache .ruff_cache .mypy_cache .hypothesis build *.egg-info
