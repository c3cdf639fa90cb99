"""``python -m enclave_provider``: the same as ``terraform-provider-enclave``."""

from .plugin import main

main()
