"""Remote providers: OpenAI-compatible servers Wren can answer through (config, keys, the
`wren providers` commands and the Engine's facade half)."""

from .config import ProviderInfo, RemoteModelInfo
from .keys import KEY_STORES, KeyStoreError

__all__ = ["KEY_STORES", "KeyStoreError", "ProviderInfo", "RemoteModelInfo"]
