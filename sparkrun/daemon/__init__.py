"""The sparkrun daemon: job journal, workers and the HTTP API that serves them."""
