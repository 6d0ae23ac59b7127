"""Encryption keys: re-encrypting stored credentials when PORTAL_ENCRYPTION_KEY rotates."""
