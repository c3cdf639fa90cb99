"""State: the records the control plane keeps (records.py), where it keeps them (kv.py:
JetStream KV buckets on the same broker, in the control plane's own account), and the questions
several layers ask of them (queries.py)."""
