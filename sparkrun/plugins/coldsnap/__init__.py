"""ColdSnap controller integration (source ``coldsnap``).

ColdSnap is an external controller that captures and restores process
snapshots of inference servers. This package holds sparkrun's side of its
wire formats, pure and free of side effects beyond reading files:

- :mod:`.canonical`: the canonical JSON and ``sha256:`` digests both sides
  compute, the request text sent on stdin, and strict JSON decoding;
- :mod:`.timing` (with :mod:`.timing_objects` and :mod:`.timing_file`): the
  NDJSON timing stream, validated record by record while the controller
  writes it, and the receipt's ``timing`` object;
- :mod:`.receipt` (with :mod:`.receipt_format` and :mod:`.preparation`): the
  receipt, its hard checks against the request, the soft warnings about the
  stream, the prepare-only output and the startup measurements.

Running the controller builds on these modules and lives elsewhere.
"""
