"""The HTTP API: ``create_app`` (app.py), errors as JSON problems (problems.py), bearer-token
auth (auth.py), and one router per resource (routes/)."""

from .app import create_app

__all__ = ["create_app"]
