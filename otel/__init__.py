"""OpenTelemetry adapter for sparkrun (built in a later step)."""
