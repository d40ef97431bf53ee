"""The public surface for plugin authors.

Plugins import the feedback API from here; these are the very objects
defined in :mod:`sparkrun.feedback`. Plugins that must also run on hosts
older than feedback API version 1 can feature-detect ``get_feedback``.
"""

from sparkrun.feedback import FEEDBACK_API_VERSION, FeedbackEvent, FeedbackReporter, get_feedback
from sparkrun.foreign_spans import ForeignSpan, SpanImporter

__all__ = ["FEEDBACK_API_VERSION", "FeedbackEvent", "FeedbackReporter", "ForeignSpan", "SpanImporter", "get_feedback"]
