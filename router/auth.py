"""Bearer tokens, the tenant each one belongs to, and the cache salt of a tenant.

Pure. The tokens file has one token per line, optionally followed by whitespace and the name
of its tenant (`s3cr3t team-a`); a token without a name is a tenant of its own. Lines that are
empty or start with `#` are skipped. Tokens are compared in constant time, every one of them
(`hmac.compare_digest`), so response timing says nothing about how much of a token was right.

Tenant cache salts: with `routing.cacheSalt: tenant` the router sets the request's `cache_salt`
(vLLM folds it into the hash of the first KV block, so requests with different salts share no
cached block) to an HMAC of the tenant name, and of the client's own salt if it sent one, keyed
with a secret derived from the whole tokens file. Tenants sharing an endpoint then cannot learn
from cache timing whether another tenant sent a prompt. Every replica given the same tokens file
derives the same salts; changing the file changes every salt, which costs each tenant its cache
once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac


class TokensError(ValueError):
    """The tokens file cannot be used."""


@dataclasses.dataclass(frozen=True)
class Tokens:
    """Accepted bearer tokens and their tenants; empty: no authentication."""

    tenants: tuple[tuple[bytes, str], ...] = ()  # (token, tenant)
    secret: bytes = b""  # the key of tenant cache salts, derived from every token and tenant

    def __bool__(self) -> bool:
        return bool(self.tenants)

    def tenant_of(self, authorization: str) -> str | None:
        """The tenant of an `Authorization` header's bearer token; None if not accepted."""
        scheme, _, token = authorization.partition(" ")
        given = token.strip().encode("utf-8", "surrogateescape")
        found = None
        for known, tenant in self.tenants:  # every token, whatever matches: no early exit
            if hmac.compare_digest(given, known) and scheme.lower() == "bearer":
                found = tenant
        return found


def parse_tokens(text: str) -> Tokens:
    """The tokens file's text -> Tokens."""
    tenants = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise TokensError(f"line {number}: expected `TOKEN [TENANT]`")
        token = fields[0]
        tenant = (
            fields[1]
            if len(fields) == 2
            else "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]
        )
        tenants.append((token.encode(), tenant))
    secret = hashlib.sha256(b"kvpin cache salt\0")
    for token, tenant in sorted(tenants):
        secret.update(token + b"\0" + tenant.encode() + b"\0")
    return Tokens(tuple(tenants), secret.digest())


def cache_salt(secret: bytes, tenant: str, client_salt: str) -> str:
    """The `cache_salt` sent for `tenant` (and the client's own salt, if any)."""
    message = tenant.encode() + b"\0" + client_salt.encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
