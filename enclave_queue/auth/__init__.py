"""Credentials: the master key and what it protects (secrets.py), API tokens (tokens.py), and the
broker permissions of each queue's app user (users.py)."""
