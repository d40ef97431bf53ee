"""Scheduled benchmarks: turning what benchmark frameworks write into feedback and results.

``parsers`` reads a framework's live progress lines during an attempt; ``results``
reads the result file it leaves behind. Both are pure and take the framework's
output as untrusted input.
"""
