"""Which addresses the platform connects to for a tenant: the guard on every backend URL.

A backend URL is tenant input, and the platform sends prompts (the gateway), probes (health checks) and
weights commands (publication) to it from inside the operator's network. So:

- The URL must be http(s), name a host, and carry no userinfo, query or fragment (a path prefix is fine).
- Every address its host resolves to must be allowed by `settings.AREAL_BACKEND_ALLOWED_HOSTS`, a list of
  entries `HOST:PORT` where HOST is a name, an address or a network (`10.0.0.0/8`, `[fd00::/8]`) and PORT a
  number or `*`; the entry `public` allows any globally routable address on any port. A name listed by the
  operator allows whatever it resolves to. Loopback, private, link-local, carrier-grade NAT and reserved
  addresses are therefore refused unless listed, whatever name points at them.
- The check runs before any connection: at registration (a clear validation error) and at every use, on the
  address actually connected to (`BackendTransport` for httpx, the gateway's own client, apps/gateway/backend_http.py,
  for the forward), so a row stored before the rule, an entry removed since, or a name that re-resolves elsewhere
  (DNS rebinding) is refused too. Callers never follow redirects.

Tenants see which host:port was refused, never what a name resolved to (details go to the server log).
"""

import functools
import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from apps.core.errors import DomainError, ValidationFailed
from areal_web.env import ConfigurationError

logger = logging.getLogger(__name__)
SETTING = "AREAL_BACKEND_ALLOWED_HOSTS"
PUBLIC = "public"
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class BackendAddressRefused(DomainError):
    """A backend URL or address that the platform may not connect to."""

    status = 502
    code = "backend_address_refused"


@dataclass(frozen=True)
class _Entry:
    """One allow-list entry or grant pattern."""

    name: str | None  # a host name, lowercased
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    port: int | None  # None: any port
    public: bool = False

    def allows(self, *, name: str, address: _Address, port: int) -> bool:
        if self.public:
            return is_public(address)
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == name
        return self.network is not None and address in self.network


@dataclass(frozen=True)
class Target:
    """A checked backend URL: where to connect, and whether an operator's entry (not `public`) allowed it."""

    host: str
    port: int
    addresses: tuple[str, ...]
    operator_listed: bool


def is_public(address: _Address) -> bool:
    """Globally routable unicast; IPv6 forms that embed an IPv4 address are judged by that address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in ipaddress.ip_network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not address.is_multicast


def _parse_entry(text: str) -> _Entry:
    text = text.strip()
    if text.lower() == PUBLIC:
        return _Entry(name=None, network=None, port=None, public=True)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
    else:
        host, separator, port_text = text.rpartition(":")
        if not separator:
            host, port_text = text, None
    if not host or port_text is None:
        raise ConfigurationError(
            f"{SETTING}: entry {text!r} needs a port: HOST:PORT or HOST:* ('public' allows "
            "any globally routable address)"
        )
    if port_text == "*":
        port = None
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ConfigurationError(f"{SETTING}: entry {text!r} has an invalid port {port_text!r}")
    try:
        network = ipaddress.ip_network(host, strict=False)
    except ValueError:
        return _Entry(name=host.lower().rstrip("."), network=None, port=port)
    return _Entry(name=None, network=network, port=port)


def address_pattern_parse(text: str) -> _Entry:
    """One entry (HOST:PORT, a network, PORT a number or `*`, or `public`); ConfigurationError when malformed.
    Grants (apps/inference/grants.py) use the same syntax."""
    return _parse_entry(text)


def pattern_allows(entry: _Entry, *, host: str, addresses, port: int) -> bool:
    """Whether `entry` allows `host`:`port` at every one of its resolved `addresses`."""
    name = host.lower().rstrip(".")
    return bool(addresses) and all(
        entry.allows(name=name, address=_address(address), port=port) for address in addresses
    )


def host_resolve(host: str, port: int) -> tuple[str, ...]:
    """The addresses `host` resolves to (itself when it is an address), normalized; BackendAddressRefused when
    it does not resolve. Blocking."""
    return tuple(str(_address(address)) for address in _resolve(host, port))


@functools.lru_cache(maxsize=8)
def _parse_entries(entries: tuple[str, ...]) -> tuple[_Entry, ...]:
    return tuple(_parse_entry(entry) for entry in entries if entry.strip())


def allowed_entries() -> tuple[_Entry, ...]:
    return _parse_entries(tuple(getattr(settings, SETTING, ())))


def _address(text: str) -> _Address:
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_rule(*, name: str, address: str, port: int) -> _Entry | None:
    """The first entry that allows connecting to `address`:`port` for host `name`, or None."""
    checked = _address(address)
    name = name.lower().rstrip(".")
    return next(
        (entry for entry in allowed_entries() if entry.allows(name=name, address=checked, port=port)), None
    )


def _refused(host: str, port: int, detail: str) -> BackendAddressRefused:
    logger.warning("backend address %s:%s refused: %s", host, port, detail)
    return BackendAddressRefused(
        f"the backend address {host}:{port} is not allowed on this installation, or does not resolve (an operator "
        f"lists allowed backend addresses in {SETTING})"
    )


def url_parts(url: str) -> tuple[str, int]:
    """(host, port) of a well-formed backend URL; BackendAddressRefused for anything else."""
    if not isinstance(url, str) or any(
        ord(char) <= 0x20 or ord(char) == 0x7F or char == "\\" for char in url
    ):
        raise BackendAddressRefused(
            "the backend URL must not contain spaces, control characters or backslashes"
        )
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        raise BackendAddressRefused("the backend URL must start with http:// or https://")
    if "@" in parts.netloc:
        raise BackendAddressRefused("the backend URL must not carry a user name or password")
    if "?" in url or "#" in url:
        raise BackendAddressRefused("the backend URL must not carry a query or a fragment")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise BackendAddressRefused("the backend URL has an invalid port") from None
    if not host:
        raise BackendAddressRefused("the backend URL names no host")
    return host, port or (443 if parts.scheme == "https" else 80)


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        return (str(_address(host)),)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise _refused(host, port, f"does not resolve: {error}") from None
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


def check_addresses(*, host: str, port: int, addresses) -> bool:
    """Raises BackendAddressRefused unless every address is allowed; True when operator entries (not `public`)
    allowed them all."""
    if not addresses:
        raise _refused(host, port, "resolves to no address")
    listed = True
    for address in addresses:
        rule = address_rule(name=host, address=address, port=port)
        if rule is None:
            raise _refused(host, port, f"resolves to {address}, which no entry of {SETTING} allows")
        listed = listed and not rule.public
    return listed


def backend_url_check(url: str) -> Target:
    """Use-time check of a stored backend URL (resolves its host; blocking): the Target, or
    BackendAddressRefused. No connection is made."""
    host, port = url_parts(url)
    addresses = _resolve(host, port)
    listed = check_addresses(host=host, port=port, addresses=addresses)
    return Target(host=host, port=port, addresses=addresses, operator_listed=listed)


def backend_url_check_literal(url: str) -> None:
    """The non-blocking part of the check, for the event loop: the URL's form, and its address when the host is
    an address. A host name is checked by `CheckedResolver` when it is resolved to connect. An allowed URL is
    remembered (per allow-list), so the gateway's hot path pays a dictionary lookup."""
    _literal_allowed(url, tuple(getattr(settings, SETTING, ())))


@functools.lru_cache(maxsize=4096)
def _literal_allowed(url: str, entries: tuple[str, ...]) -> bool:
    host, port = url_parts(url)
    try:
        address = str(_address(host))
    except ValueError:
        return True
    check_addresses(host=host, port=port, addresses=(address,))
    return True


def backend_url_validate(url: str) -> str:
    """Registration-time check: the URL without a trailing slash, or ValidationFailed on `base_url`."""
    try:
        backend_url_check(url)
    except BackendAddressRefused as error:
        raise ValidationFailed(error.message, fields={"base_url": ["not_allowed"]}) from None
    return url.rstrip("/")


class BackendTransport(httpx.HTTPTransport):
    """httpx transport for backend calls: checks each request's URL and connects to the very address it
    checked (the Host header and TLS server name stay the URL's), so resolution cannot change in between."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # The address is what is checked: a query on the request is the caller's own (vLLM's
        # `/pause?mode=wait`), whereas one in a registered base URL is refused by backend_url_check.
        url = str(request.url.copy_with(query=None, fragment=None))
        target = backend_url_check(url)
        address = target.addresses[0]
        if address != target.host:
            request.url = request.url.copy_with(host=address)
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": target.host}
        return super().handle_request(request)


def backend_http_client(*, timeout: float, headers: dict | None = None) -> httpx.Client:
    """An httpx client for calling backends: checked addresses, no redirects, no proxies from the environment."""
    return httpx.Client(
        transport=BackendTransport(trust_env=False),
        timeout=timeout,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
    )
