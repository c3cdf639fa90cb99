"""Enclave Queues: managed queues over NATS JetStream."""
