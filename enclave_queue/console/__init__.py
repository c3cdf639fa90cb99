"""The web console: pages at ``/`` for operators, signed in with an API token (routes.py), beside
the API in one app (server/app.py); failed sign-ins are limited per address (throttle.py)."""

from .routes import error_page, install

__all__ = ["error_page", "install"]
