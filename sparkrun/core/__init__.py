"""Core machinery: operations, envelopes, the logging bridge, the context."""
