"""Relaying container images stored as OCI image layouts to hosts over SSH, sending only missing blobs."""
