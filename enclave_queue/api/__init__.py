"""The HTTP API: ``create_app`` (app.py), the request guard in front of it (guard.py: the token,
then the body limit), the rules every path part follows (paths.py), errors as JSON problems
(problems.py), bearer-token and session auth (auth.py), and one router per resource (routes/)."""

from .app import create_app

__all__ = ["create_app"]
