"""The example workload's "model": deterministic, rule-based replies behind ``openai_server.py``.

Split from the HTTP server so each rule is short enough to read in one sitting:

- ``text``: the token rule, the echo reply, the few facts it knows, and how a reply is stretched or cut
  to a requested length;
- ``tools``: how a request that offers tools becomes OpenAI ``tool_calls``, and how tool results become
  a final answer;
- ``chat``: parsing and validating a chat completion request, and turning the reply into the token-sized
  deltas that both the streamed and the plain response are built from;
- ``tracing``: joining the launching operation's trace (``TRACEPARENT``), with one span per request when
  an OTLP endpoint is configured; the OpenTelemetry SDK is imported only then.

Standard library only, like the server (``tracing`` imports the SDK lazily, when it exports).
"""
