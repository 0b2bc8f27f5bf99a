"""Login and search: the registry verbs that touch no local image.

``docker login`` asks the daemon to check credentials (``POST /auth``): the registry's ``/v2/``
is asked with them (Basic, or a token from its token server), and nothing is kept, neither in
memory nor on disk nor in a log line; the client stores them. ``docker search`` asks the index
of the registry named in the term (Docker Hub's when the term names none) for ``/v1/search``,
else that registry's ``/v2/_catalog`` filtered by the term.

Every call is bounded (``CALL_TIMEOUT`` over the adapter's own connect/read timeouts), so a
registry that does not answer is a clear error, never a hang. Cancellation leaves nothing
behind: no state is kept between calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from svc.errors import InvalidParameter
from svc.models.images import SearchResult
from svc.registry import search as registry_search
from svc.registry.client import RegistryClient, login
from svc.registry.errors import Unreachable
from svc.registry.transport import RegistryConfig
from svc.wire.authconfig import AuthConfig, registry_key
from svc.wire.reference import DEFAULT_DOMAIN, check_domain

CALL_TIMEOUT = 30.0
SEARCH_LIMIT_DEFAULT = 25
SEARCH_LIMIT_MAX = 100


@dataclass(frozen=True)
class SearchTerm:
    """A search term split as docker splits it: the registry it names and what to look for
    there (``localhost:5000/busy`` -> ``localhost:5000``, ``busy``)."""

    domain: str
    term: str


def split_search_term(raw: str) -> SearchTerm:
    """The registry part of a term is its first component when that looks like a host (has
    a ``.`` or a ``:``, or is ``localhost``), as docker's ``splitReposSearchTerm``."""
    first, sep, rest = raw.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return SearchTerm(registry_key(first), rest)
    return SearchTerm(DEFAULT_DOMAIN, raw)


class Registries:
    """The daemon's registry settings and the verbs that use only them."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    @staticmethod
    def server_of(credentials: AuthConfig) -> str:
        """The registry a login names (``serveraddress``; Docker Hub when empty)."""
        address = credentials.serveraddress.strip()
        if not address:
            return DEFAULT_DOMAIN
        domain = registry_key(address)
        reason = check_domain(domain)
        if reason is not None:
            shown = address if len(address) <= 80 else address[:80] + "..."
            raise InvalidParameter(f"invalid serveraddress {shown!r}: {reason}")
        return domain

    async def login(self, credentials: AuthConfig) -> str:
        """Check ``credentials`` against their registry; returns the identity token the
        registry's token server gave (``""`` for none).

        Raises:
            Unauthorized: refused (the registry's reason).
            Unreachable: no answer within the timeouts.
        """
        domain = self.server_of(credentials)
        with trio.move_on_after(CALL_TIMEOUT) as scope:
            result = await login(domain, credentials, self.config)
            return result.identity_token
        assert scope.cancelled_caught
        raise Unreachable(f"login to {domain}: no answer within {CALL_TIMEOUT:.0f} seconds")

    async def search(self, raw_term: str, limit: int | None,
                     credentials: AuthConfig) -> list[SearchResult]:
        """Search the registry the term names for it; at most ``limit`` results.

        Raises:
            InvalidParameter: an empty term, or a limit outside 1..100.
            Unreachable / Unauthorized / RegistryError: as the registry answers.
        """
        if limit is None:
            limit = SEARCH_LIMIT_DEFAULT
        if not 1 <= limit <= SEARCH_LIMIT_MAX:
            raise InvalidParameter(f"Limit {limit} is outside the range of "
                                   f"[1, {SEARCH_LIMIT_MAX}]")
        term = split_search_term(raw_term.strip())
        if not term.term:
            raise InvalidParameter("a search term is required")
        reason = check_domain(term.domain)
        if reason is not None:
            raise InvalidParameter(f"invalid registry {term.domain[:80]!r} in the search "
                                   f"term: {reason}")
        with trio.move_on_after(CALL_TIMEOUT) as scope:
            async with RegistryClient(term.domain, config=self.config,
                                      credentials=credentials) as client:
                found = await registry_search.search(client, term.term, limit)
            return found
        assert scope.cancelled_caught
        raise Unreachable(f"search on {term.domain}: no answer within "
                          f"{CALL_TIMEOUT:.0f} seconds")
