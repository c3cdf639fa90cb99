"""The package's public names: all importable, and every error class is among them."""

import enclave_queue
from enclave_queue import errors


def test_every_public_name_exists():
    for name in enclave_queue.__all__:
        assert getattr(enclave_queue, name) is not None, name
    assert sorted(enclave_queue.__all__) == enclave_queue.__all__


def test_every_error_class_is_public():
    classes = {name for name, value in vars(errors).items()
               if isinstance(value, type) and issubclass(value, errors.EnclaveError)}
    assert classes <= set(enclave_queue.__all__)
