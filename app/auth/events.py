"""What happens at sign-in that higher domains follow up on (app.kit.hooks)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from app.auth.models import User
from app.kit.hooks import Hook

# The IdP just vouched for the user and their groups; memberships mapped from groups follow.
signed_in: Hook[[Session, User, Sequence[str]]] = Hook("auth.signed_in", required=True)
