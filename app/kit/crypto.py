"""Secrets at rest (cluster admin credentials) encrypted with PORTAL_ENCRYPTION_KEY (Fernet).

During a key rotation PORTAL_ENCRYPTION_OLD_KEYS still opens what older keys sealed; new
secrets are always sealed with the current key.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from app.kit.config import Settings


class UnreadableSecret(ValueError):
    """Stored ciphertext that neither the current key nor an old key opens."""


class SecretBox:
    def __init__(self, key: str, old_keys: Sequence[str] = ()) -> None:
        self._current = Fernet(key.encode())
        self._all = MultiFernet([self._current, *(Fernet(k.encode()) for k in old_keys)])

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        return cls(settings.encryption_key, settings.encryption_old_keys)

    def seal(self, plaintext: str) -> str:
        return self._current.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._all.decrypt(sealed.encode()).decode()
        except InvalidToken as error:
            raise UnreadableSecret(
                "stored secret cannot be decrypted: was PORTAL_ENCRYPTION_KEY changed? "
                "List the key it was sealed with in PORTAL_ENCRYPTION_OLD_KEYS"
            ) from error

    def sealed_with_current_key(self, sealed: str) -> bool:
        try:
            self._current.decrypt(sealed.encode())
        except InvalidToken:
            return False
        return True

    def reseal(self, sealed: str) -> str:
        """The same secret sealed with the current key (raises UnreadableSecret)."""
        return self.seal(self.open(sealed))
