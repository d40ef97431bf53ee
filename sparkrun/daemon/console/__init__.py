"""The daemon's web console under ``/ui/``: jobs, live progress, prompts, traces and deployments.

Server-rendered pages that work with JavaScript off, made live by the
project's own small script (EventSource and fetch on the existing ``/v1/``
API). Signing in exchanges the daemon's token for a session cookie; every
form carries a CSRF token; the pages allow no inline script.
"""

from sparkrun.daemon.console.pages import ROUTES
from sparkrun.daemon.console.sessions import Sessions

__all__ = ["ROUTES", "Sessions"]
