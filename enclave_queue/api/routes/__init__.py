"""One router per resource: health, queues (declarations), messages (by hand), dead letters,
secrets, metrics (Prometheus and depth history)."""
