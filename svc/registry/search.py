"""Repository search: the v1 search API where a registry serves it, else the v2 catalog.

Docker Hub answers ``GET /v1/search?q=<term>&n=<limit>`` (on its index host) with
``{"results": [{name, description, star_count, is_official, is_automated}]}``. Distribution
registries have no search, only ``GET /v2/_catalog`` (paged with ``Link: <...>; rel="next"``):
there the repository names that contain the term are the results, with no description and no
stars. The catalog walk is bounded (pages and names) so a huge registry cannot hold a search
for ever. Cancellation leaves nothing behind.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from svc.models.images import SearchResult
from svc.registry.auth import CATALOG_SCOPE
from svc.registry.client import RegistryClient
from svc.registry.errors import RegistryError, Unreachable
from svc.registry.transport import HUB_DOMAIN, HUB_INDEX

CATALOG_PAGE = 100
CATALOG_MAX_PAGES = 100
_NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


async def search(client: RegistryClient, term: str, limit: int = 25) -> list[SearchResult]:
    """Search the registry for ``term``; at most ``limit`` results.

    Raises:
        Unreachable: the registry does not answer.
        RegistryError: neither search nor catalog is available (e.g. the catalog needs
            rights the credentials lack).
    """
    found = await _v1_search(client, term, limit)
    if found is not None:
        return found[:limit]
    return await _catalog_search(client, term, limit)


async def _v1_search(client: RegistryClient, term: str, limit: int
                     ) -> list[SearchResult] | None:
    """The v1 answer, or None when the registry has no v1 search."""
    await client.ping()
    base = HUB_INDEX if client.domain == HUB_DOMAIN else ""
    try:
        answer = await client.request("GET", base + "/v1/search", auth=False, scopes=(),
                                      params={"q": term, "n": str(limit)}, what="search")
    except Unreachable:
        raise
    except RegistryError:
        return None
    try:
        doc: Any = json.loads(answer.body)
        results = doc["results"] if isinstance(doc, dict) else None
        if not isinstance(results, list):
            return None
        return [SearchResult.model_validate(item) for item in results]
    except (ValueError, KeyError, ValidationError):
        return None


async def _catalog_search(client: RegistryClient, term: str, limit: int
                          ) -> list[SearchResult]:
    found: list[SearchResult] = []
    path = "/v2/_catalog"
    params: dict[str, str] | None = {"n": str(CATALOG_PAGE)}
    for _ in range(CATALOG_MAX_PAGES):
        answer = await client.request("GET", path, params=params, scopes=(CATALOG_SCOPE,),
                                      what="catalog")
        try:
            names = json.loads(answer.body).get("repositories") or []
        except (ValueError, AttributeError):
            raise RegistryError("the registry's catalog is not JSON") from None
        for name in names:
            if isinstance(name, str) and term in name:
                found.append(SearchResult(name=name))
                if len(found) >= limit:
                    return found
        link = _NEXT_RE.search(answer.headers.get("link", ""))
        if link is None or not names:
            break
        path, params = str(answer.url.join(link[1])), None
    return found
