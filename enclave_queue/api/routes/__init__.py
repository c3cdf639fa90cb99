"""One router per resource: health, queues (declarations), messages (by hand), secrets."""
