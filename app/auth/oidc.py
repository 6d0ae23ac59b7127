"""The OpenID Connect client (Authlib): authorization code flow with PKCE, state and nonce."""

from __future__ import annotations

import warnings

from authlib.deprecate import AuthlibDeprecationWarning

from app.kit.config import Settings

# Authlib's client prefers the httpx2 fork and warns when it falls back to httpx, the HTTP client
# this project's stack pins (Starlette's TestClient and portalctl use it too); moving to httpx2
# is a stack decision, not a side effect of an import, so only that one warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="The httpx module is deprecated",
                            category=AuthlibDeprecationWarning)
    from authlib.integrations.starlette_client import OAuth

CLIENT_NAME = "idp"


def make_oauth(settings: Settings) -> OAuth | None:
    if not settings.oidc_issuer:
        return None
    oauth = OAuth()
    oauth.register(
        name=CLIENT_NAME,
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret,
        server_metadata_url=settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs={"scope": settings.oidc_scopes, "code_challenge_method": "S256"},
    )
    return oauth
