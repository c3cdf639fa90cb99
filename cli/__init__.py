"""The ``enclave`` command line (installed as the package ``enclave_cli``)."""
