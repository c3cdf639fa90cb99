"""State: the records the control plane keeps (records.py) and where it keeps them (kv.py:
JetStream KV buckets on the same broker, in the control plane's own account)."""
