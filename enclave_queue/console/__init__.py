"""The web console: pages at ``/`` for operators, signed in with an API token (see routes.py)."""

from .routes import install

__all__ = ["install"]
