"""The OpenTofu provider of Enclave Queues (installed as ``terraform-provider-enclave``), written
with the PyPI framework ``tf`` (tfplugin6 over gRPC).

- plugin.py: the go-plugin side: magic cookie, mutual TLS, the handshake line, shutdown;
- tfcompat.py: tf 1.2.0's servicer with the fixes this provider needs (refined unknowns,
  planning with the configuration, destroy plans, exceptions as diagnostics, StopProvider);
- provider.py: the provider's configuration, its resources and data sources;
- session.py: what they share: the configured API client, the default project, the stop signal;
- queue_model.py: the pure layer of ``enclave_queue``: validation, defaults, plan, state ↔ API;
- queue_resource.py: the ``enclave_queue`` resource (glue between tf and the HTTP API);
- data_sources.py: the ``enclave_queue`` and ``enclave_secret`` data sources;
- diagnostics.py: API errors as diagnostics.

The provider talks to the HTTP API only, through ``enclave_queue.admin.AdminClient``.
"""
