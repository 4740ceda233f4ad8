"""Keyring backends for tests, chosen with PYTHON_KEYRING_BACKEND: keyring's own Secret
Service backend over a collection that is locked (the user dismissed the unlock prompt:
what keyring raises then) or that cannot be opened (a Secret Service that answers D-Bus
with an error). Everything else is the real backend class."""

from __future__ import annotations

from keyring.backends import SecretService
from keyring.errors import InitError, KeyringLocked


class Locked(SecretService.Keyring):
    priority = 5  # the real one asks D-Bus; none runs in a test

    def get_preferred_collection(self):
        raise KeyringLocked("Failed to unlock the collection!")


class Broken(SecretService.Keyring):
    priority = 5

    def get_preferred_collection(self):
        raise InitError("Failed to create the collection: org.freedesktop.DBus.Error.ServiceUnknown: "
                        "The name org.freedesktop.secrets was not provided by any .service files.")


# The module keyring's Secret Service backend lives in, which is how Wren recognises an OS
# keyring (engine/keystore.py, os_keyring).
Locked.__module__ = Broken.__module__ = SecretService.__name__
