"""The HTTP API: ``create_app`` (app.py), the request guard in front of it (guard.py: the token,
then the body limit), errors as JSON problems (problems.py), bearer-token and session auth
(auth.py), the typed dependencies routes take (deps.py), and one router per resource (routes/).
What the API shares with the console (path rules, sessions, cookies, the control plane it serves)
is web/'s; server/app.py puts both in one app."""

from .app import create_app

__all__ = ["create_app"]
