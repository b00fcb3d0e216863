"""Bearer tokens, tenants and tenant cache salts (router.auth), worked out by hand."""

import hashlib
import hmac

import pytest

from kvpin.router import auth

FILE = "# tokens of the support team\n\nalpha team-a\n  beta   team-b  \ngamma\n"


def test_the_tokens_file_names_each_tokens_tenant() -> None:
    tokens = auth.parse_tokens(FILE)
    assert tokens
    assert tokens.tenant_of("Bearer alpha") == "team-a"
    assert tokens.tenant_of("bearer beta") == "team-b"  # the scheme is case-insensitive
    assert tokens.tenant_of("Bearer  gamma ") == (
        "token-" + hashlib.sha256(b"gamma").hexdigest()[:12]
    )  # a token without a name is a tenant of its own
    for refused in ("Bearer alph", "Bearer alpha2", "Basic alpha", "alpha", "", "Bearer "):
        assert tokens.tenant_of(refused) is None, refused


def test_no_tokens_means_no_authentication() -> None:
    assert not auth.Tokens()
    assert not auth.parse_tokens("# nothing here\n\n")
    assert auth.Tokens().tenant_of("Bearer x") is None


def test_a_malformed_line_is_refused_with_its_number() -> None:
    with pytest.raises(auth.TokensError) as refused:
        auth.parse_tokens("ok\nthree words here\n")
    assert str(refused.value) == "line 2: expected `TOKEN [TENANT]`"


def test_the_salt_secret_depends_on_every_token_and_tenant_but_not_their_order() -> None:
    secret = auth.parse_tokens(FILE).secret
    expected = hashlib.sha256(b"kvpin cache salt\0")
    for token, tenant in sorted(
        [
            (b"alpha", "team-a"),
            (b"beta", "team-b"),
            (b"gamma", "token-" + hashlib.sha256(b"gamma").hexdigest()[:12]),
        ]
    ):
        expected.update(token + b"\0" + tenant.encode() + b"\0")  # fmt: skip
    assert secret == expected.digest()
    reordered = "gamma\nbeta team-b\nalpha team-a\n"
    assert auth.parse_tokens(reordered).secret == secret
    assert auth.parse_tokens(FILE + "delta\n").secret != secret
    assert auth.parse_tokens(FILE.replace("team-b", "team-c")).secret != secret


def test_tenant_cache_salts_are_hmacs_of_the_tenant_and_the_clients_salt() -> None:
    secret = b"k" * 32
    salt = auth.cache_salt(secret, "team-a", "")
    assert salt == hmac.new(secret, b"team-a\0", hashlib.sha256).hexdigest()
    assert (
        auth.cache_salt(secret, "team-a", "mine")
        == hmac.new(secret, b"team-a\0mine", hashlib.sha256).hexdigest()
    )
    assert auth.cache_salt(secret, "team-b", "") != salt
    assert auth.cache_salt(b"other", "team-a", "") != salt
