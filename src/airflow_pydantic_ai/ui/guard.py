"""Cross-site request protection for the view's state-changing requests.

Airflow's own API authenticates a browser by its ``_token`` cookie (``SameSite=Lax``, HTTP only) or
by an ``Authorization: Bearer`` header, and takes state changes as JSON bodies, which a cross-site
form cannot send. The view's buttons are plain HTML forms, so a cookie-authenticated POST must in
addition:

- come from this origin: an ``Origin`` header, when the browser sends one, names this server (the
  request's ``Host`` or ``[api] base_url``), and ``Sec-Fetch-Site``, when sent, is ``same-origin``;
- carry a form token that only a page of this view can hold: an HMAC (key: ``[api] secret_key``) of
  the user, the action, the task instance and the step, valid for an hour.

A request that authenticates with a bearer header (a script, the REST API's way) carries no ambient
credential, so it needs neither.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["FormTokens", "cross_site_problem"]

_LIFETIME = 3600


@dataclass(frozen=True)
class FormTokens:
    """Signs and checks the hidden token of a confirmation form."""

    secret: bytes

    def issue(self, user_id: str, action: str, target: tuple[str, ...], *, now: float | None = None) -> str:
        expires = int((now if now is not None else time.time()) + _LIFETIME)
        return f"{expires}.{self._mac(user_id, action, target, expires)}"

    def check(
        self, token: str, user_id: str, action: str, target: tuple[str, ...], *, now: float | None = None
    ) -> bool:
        expires_text, _, mac = token.partition(".")
        if not expires_text.isdigit() or not mac:
            return False
        expires = int(expires_text)
        if expires < (now if now is not None else time.time()):
            return False
        return hmac.compare_digest(mac, self._mac(user_id, action, target, expires))

    def _mac(self, user_id: str, action: str, target: tuple[str, ...], expires: int) -> str:
        # Length-prefixed fields: no two different tuples sign the same message.
        fields = ["pydantic-ai-cache-view/1", user_id, action, *target, str(expires)]
        message = "".join(f"{len(field)}:{field}" for field in fields).encode("utf-8", "surrogatepass")
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def cross_site_problem(headers: Mapping[str, str], request_origin: str, allowed_origins: set[str]) -> str | None:
    """Why a cookie-authenticated state change looks cross-site, or None when it comes from this site.

    :param headers: the request headers (case-insensitive mapping).
    :param request_origin: ``scheme://host[:port]`` of the request as this server received it.
    :param allowed_origins: further origins of this server (from ``[api] base_url``).
    """
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site != "same-origin":
        return f"the request came from another site (Sec-Fetch-Site: {fetch_site})"
    origin = headers.get("origin")
    if origin is not None and _normal(origin) not in {_normal(request_origin), *map(_normal, allowed_origins)}:
        return f"the request came from another origin ({origin})"
    return None


def _normal(origin: str) -> str:
    parts = urlsplit(origin.strip())
    if not parts.scheme or not parts.hostname:
        return origin.strip()  # "null" (a sandboxed frame, a data: page) matches nothing but itself
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = f":{parts.port}" if parts.port and parts.port != default else ""
    return f"{parts.scheme}://{parts.hostname.lower()}{port}"
