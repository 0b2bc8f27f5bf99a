"""Docker image references: grammar, normalization and image-id helpers (pure, no I/O).

The grammar is docker's (``distribution/reference``)::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [domain "/"] component ["/" component]*
    domain     := host [":" port]        host: DNS-ish labels or "[" ipv6 "]"
    component  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [\\w][\\w.-]{0,127}
    digest     := algorithm ":" hex{32,}

Normalization follows ``ParseNormalizedNamed``: the first path element is a registry domain only
when it contains ``.`` or ``:`` or is ``localhost``; otherwise the reference lives on Docker Hub
(``docker.io``), and a one-element Hub path gets the ``library/`` prefix. ``index.docker.io`` is
the legacy spelling of ``docker.io``. So ``busybox``, ``docker.io/busybox``,
``index.docker.io/library/busybox`` all name ``docker.io/library/busybox``, whose familiar
(short) name is ``busybox``.

Image ids are not references: ``sha256:<64 hex>`` or bare 64 hex is always an id, never a
name (docker refuses to name a repository that way). A shorter hex string is ambiguous: it is
a valid name *and* an id prefix, and lookups try the reference first, then the id prefix.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from svc.errors import InvalidParameter

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"
NAME_TOTAL_LENGTH_MAX = 255

# Go's \w is ASCII-only, hence re.ASCII. The separator is written `-+` where docker has `[-]*`:
# the two accept the same strings, and the empty alternative makes Python's backtracking
# engine exponential on long invalid names.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = rf"{_COMPONENT}(?:/{_COMPONENT})*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

_REFERENCE_RE = re.compile(
    rf"(?P<domain>{_DOMAIN})/(?P<path>{_PATH})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
_TAG_RE = re.compile(_TAG, re.ASCII)
_HEX64_RE = re.compile(r"[a-f0-9]{64}")
_HEX_PREFIX_RE = re.compile(r"[a-f0-9]{1,64}")
_LOWER_HEX_RE = re.compile(r"[a-f0-9]+")

# Digest algorithms docker can verify, with their hex lengths (go-digest).
_DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}

ERR_FORMAT = "invalid reference format"
ERR_UPPERCASE = "invalid reference format: repository name must be lowercase"
ERR_TOO_LONG = f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters"
ERR_TAG_FORMAT = "invalid tag format"


@dataclass(frozen=True)
class Reference:
    """A parsed, normalized image reference.

    ``domain`` is the registry (``docker.io`` for Docker Hub), ``path`` the repository path on
    it (``library/busybox``); ``tag`` and ``digest`` (``sha256:<hex>``) are ``None`` when
    absent. Build one with :func:`parse`.
    """

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """The fully qualified repository name, e.g. ``docker.io/library/busybox``."""
        return f"{self.domain}/{self.path}"

    @property
    def familiar_name(self) -> str:
        """The name as docker shows it: ``busybox``, ``user/app``, ``127.0.0.1:5000/a/b``."""
        if self.domain != DEFAULT_DOMAIN:
            return self.name
        short = self.path.removeprefix(OFFICIAL_REPO_PREFIX)
        # docker.io/library/a/b stays library/a/b: only one-element official names shorten.
        return self.path if "/" in short else short

    @property
    def is_name_only(self) -> bool:
        """True when the reference has neither a tag nor a digest."""
        return self.tag is None and self.digest is None

    def with_default_tag(self) -> Reference:
        """This reference, tagged ``latest`` when it has neither a tag nor a digest."""
        return dataclasses.replace(self, tag=DEFAULT_TAG) if self.is_name_only else self

    def with_tag(self, tag: str) -> Reference:
        """This reference with ``tag`` (the digest, if any, is kept, as docker's ``WithTag``).

        Raises:
            InvalidParameter: ``tag`` is not a valid tag.
        """
        validate_tag(tag)
        return dataclasses.replace(self, tag=tag)

    def name_only(self) -> Reference:
        """The repository alone, without tag or digest."""
        return Reference(self.domain, self.path)

    def string(self) -> str:
        """The full form: ``docker.io/library/busybox:latest``."""
        return self.name + self._suffix()

    def familiar_string(self) -> str:
        """The short form docker prints: ``busybox:latest``, ``busybox@sha256:...``."""
        return self.familiar_name + self._suffix()

    def _suffix(self) -> str:
        tag = f":{self.tag}" if self.tag is not None else ""
        digest = f"@{self.digest}" if self.digest is not None else ""
        return tag + digest

    def __str__(self) -> str:
        return self.string()


def parse(s: str) -> Reference:
    """Parse and normalize a reference the way ``docker pull``/``docker tag`` read it.

    Args:
        s: a familiar or fully qualified reference: ``busybox``, ``busybox:1``,
            ``busybox@sha256:<hex>``, ``127.0.0.1:5000/a/b:1``, ``docker.io/library/busybox``.

    Returns:
        The normalized :class:`Reference` (no default tag added: see ``with_default_tag``).

    Raises:
        InvalidParameter: with docker's message: ``invalid reference format`` (and its
            ``repository name must be lowercase`` variant), a 64-hex repository name, a name
            over 255 characters, or a digest that is well formed but not verifiable.
    """
    if _HEX64_RE.fullmatch(s):
        raise InvalidParameter(_hex_name_message(s))
    domain, remainder = _split_domain(s)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        raise InvalidParameter(ERR_UPPERCASE)
    match = _REFERENCE_RE.fullmatch(f"{domain}/{remainder}")
    if match is None:
        raise InvalidParameter(ERR_FORMAT)
    ref = Reference(match["domain"], match["path"], match["tag"], match["digest"])
    if len(ref.name) > NAME_TOTAL_LENGTH_MAX:
        raise InvalidParameter(ERR_TOO_LONG)
    if _HEX64_RE.fullmatch(ref.familiar_name):
        # docker 1.11 refused a 64-hex repository name even with a tag (v1.ValidateID).
        raise InvalidParameter(_hex_name_message(ref.familiar_name))
    if ref.digest is not None:
        _validate_digest(ref.digest)
    return ref


_DOMAIN_RE = re.compile(rf"(?P<host>{_LABEL}(?:\.{_LABEL})*|\[[a-fA-F0-9:]+\])"
                        r"(?::(?P<port>[0-9]{1,5}))?", re.ASCII)
DOMAIN_MAX = 253 + 1 + 5  # a DNS name's longest, a colon, a port


def check_domain(domain: str) -> str | None:
    """Why ``domain`` (``host[:port]``, as a reference or a login names a registry) cannot
    name one, or None: hostname labels of letters, digits and ``-`` (at most 63 each), an
    IPv4 address or ``[IPv6]``, a port in 1..65535; no NUL, space, non-ASCII or ``..``."""
    if not domain:
        return "it is empty"
    if len(domain) > DOMAIN_MAX:
        return f"it is longer than {DOMAIN_MAX} characters"
    if not domain.isascii() or not domain.isprintable() or " " in domain:
        return "it may hold only printable ASCII characters, no spaces"
    match = _DOMAIN_RE.fullmatch(domain)
    if match is None:
        return "it is not a host name or address with an optional port"
    if any(len(label) > 63 for label in match["host"].split(".")):
        return "a part of its host name is longer than 63 characters"
    port = match["port"]
    if port is not None and not 0 < int(port) < 65536:
        return f"its port {port} is not in 1..65535"
    return None


def _split_domain(s: str) -> tuple[str, str]:
    """Split ``s`` into a registry domain and the rest (docker's ``splitDockerDomain``).

    The first element is a domain only if it has a ``.`` or ``:`` or is ``localhost``; an
    uppercase first element is *not* a domain here (docker 1.11 up to 2023), so ``Foo/bar``
    fails as uppercase instead of naming a registry ``Foo``.
    """
    first, sep, rest = s.partition("/")
    if sep and (first == "localhost" or "." in first or ":" in first):
        domain, remainder = first, rest
    else:
        domain, remainder = DEFAULT_DOMAIN, s
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return domain, remainder


def _hex_name_message(name: str) -> str:
    return f"invalid repository name ({name}), cannot specify 64-byte hexadecimal strings"


def _validate_digest(digest: str) -> None:
    """Check a digest the grammar accepted the way go-digest ``Validate`` does."""
    algorithm, _, encoded = digest.partition(":")
    length = _DIGEST_HEX_LENGTHS.get(algorithm)
    if length is None:
        raise InvalidParameter("unsupported digest algorithm")
    if len(encoded) != length:
        raise InvalidParameter("invalid checksum digest length")
    if not _LOWER_HEX_RE.fullmatch(encoded):
        raise InvalidParameter("invalid checksum digest format")


def validate_tag(tag: str) -> None:
    """Check ``tag`` against docker's tag grammar ``[\\w][\\w.-]{0,127}``.

    Raises:
        InvalidParameter: ``invalid tag format`` (docker's ``ErrTagInvalidFormat``).
    """
    if not _TAG_RE.fullmatch(tag):
        raise InvalidParameter(ERR_TAG_FORMAT)


def is_full_id(s: str) -> bool:
    """True for a complete image id: ``sha256:<64 hex>`` or bare ``<64 hex>`` (lowercase)."""
    return _HEX64_RE.fullmatch(s.removeprefix("sha256:")) is not None


def is_id_prefix(s: str) -> bool:
    """True for a (possibly complete) image id prefix: 1-64 lowercase hex, ``sha256:`` optional.

    Docker's id search (``digestset.Lookup``) sets no minimum length; uniqueness is the
    caller's job. A prefix shorter than 64 is also a valid name, so look it up as a
    reference first.
    """
    return _HEX_PREFIX_RE.fullmatch(s.removeprefix("sha256:")) is not None
