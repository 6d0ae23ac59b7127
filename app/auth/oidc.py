"""The OpenID Connect client (Authlib): authorization code flow with PKCE, state and nonce."""

from __future__ import annotations

from authlib.integrations.starlette_client import OAuth

from app.kit.config import Settings

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
