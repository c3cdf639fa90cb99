"""What a queue holds, asked for by hand (the API, the console, the desk): no background tasks.

lookup.py (a queue by name: live, ready), streams.py (its stream and consumers as the broker
reports them), counters.py (outcome arithmetic), samples.py (its depth history), expiry.py
(messages past their start deadline), messages.py (send, receive, delete, nack, peek by hand),
letters.py (messages read by sequence as letters, moved back), contents.py (export and clear),
deadletters.py (list, retry, discard, redrive) and redrive.py (a redrive's task). Beneath them:
state/ (the records) and broker/ (the connection, direct gets, depth); the control loops that
act on queues by themselves are controller/'s, which this package never imports.
"""
