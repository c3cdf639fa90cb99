"""The broker: rendering nats-server's configuration (config.py) and running it (supervisor.py)."""
