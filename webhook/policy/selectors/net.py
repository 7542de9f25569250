"""IP addresses, CIDRs and URLs of the Kubernetes CEL environment.

k8s.io/apiserver/pkg/cel/library ip.go, cidr.go and urls.go, on Python's ``ipaddress`` and
``urllib.parse`` instead of Go's ``net/netip`` and ``net/url`` (docs/cel.md says where the two
may differ). Values are tagged maps (``cel_values``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from webhook.policy.selectors.values import (
    CIDR,
    IP,
    URL,
    CelFunctionError,
    no_overload,
    tag_of,
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise no_overload()
    return value


def _not_ipv4_mapped(addr: Address, raw: str) -> Address:
    # Both parsers refuse an IPv4-mapped IPv6 address (ip.go parseIPAddr, cidr.go parseCIDR).
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise CelFunctionError(f"IPv4-mapped IPv6 address {raw!r} is not allowed")
    return addr


def _parse_ip(raw: str) -> Address:
    # ip.go parseIPAddr: netip.ParseAddr, then no zone and no IPv4-mapped IPv6.
    if "%" in raw:
        raise CelFunctionError(f"IP address {raw!r} with zone value is not allowed")
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError as err:
        raise CelFunctionError(
            f"IP Address {raw!r} parse error during conversion from string: {err}"
        ) from None
    return _not_ipv4_mapped(addr, raw)


def _parse_cidr(raw: str) -> tuple[Address, Network]:
    # cidr.go parseCIDR: netip.ParsePrefix keeps the address as written (cidr.ip()).
    address, sep, length = raw.partition("/")
    try:
        if not sep or not length.isdigit() or (len(length) > 1 and length[0] == "0"):
            raise ValueError("no prefix length")
        ip = ipaddress.ip_address(address)
        network = ipaddress.ip_network(raw, strict=False)
    except ValueError as err:
        raise CelFunctionError(
            f"network address parse error during conversion from string: {err}"
        ) from None
    return _not_ipv4_mapped(ip, raw), network


def _ip(value: Any) -> Address:
    if tag_of(value) != IP:
        raise no_overload()
    return ipaddress.ip_address(value[IP])


def _cidr(value: Any) -> tuple[Address, Network]:
    if tag_of(value) != CIDR:
        raise no_overload()
    return _parse_cidr(value[CIDR])


def ip(value: Any) -> dict[str, str]:
    """``ip(<string>)``, and ``<cidr>.ip()``: the address a CIDR was written with."""
    if tag_of(value) == CIDR:
        return {IP: str(_cidr(value)[0])}
    return {IP: str(_parse_ip(_text(value)))}


def _parses(parse: Callable[[str], object], value: Any) -> bool:
    """Whether ``value`` is a string ``parse`` takes (anything else: False, as upstream)."""
    try:
        parse(_text(value))
    except CelFunctionError:
        return False
    return True


def is_ip(value: Any) -> bool:
    """``isIP(<string>)``."""
    return _parses(_parse_ip, value)


def is_canonical(value: Any) -> bool:
    """``ip.isCanonical(<string>)``: the text is the address's canonical form."""
    text = _text(value)
    return str(_parse_ip(text)) == text


def _is_global_unicast(addr: Address) -> bool:
    # Go's netip.Addr.IsGlobalUnicast: private ranges count, broadcast does not.
    if isinstance(addr, ipaddress.IPv4Address) and addr == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (addr.is_unspecified or addr.is_loopback or addr.is_multicast or addr.is_link_local)


def _link_local_multicast(addr: Address) -> bool:
    if isinstance(addr, ipaddress.IPv4Address):
        return addr in ipaddress.ip_network("224.0.0.0/24")
    return addr.is_multicast and (addr.packed[1] & 0x0F) == 0x02


def cidr(value: Any) -> dict[str, str]:
    """``cidr(<string>)``."""
    text = _text(value)
    _parse_cidr(text)
    return {CIDR: text}


def is_cidr(value: Any) -> bool:
    """``isCIDR(<string>)``."""
    return _parses(_parse_cidr, value)


def contains_ip(network: Any, address: Any) -> bool:
    """``<cidr>.containsIP(<ip or string>)``."""
    addr = _parse_ip(address) if isinstance(address, str) else _ip(address)
    return addr in _cidr(network)[1]


def contains_cidr(network: Any, other: Any) -> bool:
    """``<cidr>.containsCIDR(<cidr or string>)``."""
    inner = _parse_cidr(other)[1] if isinstance(other, str) else _cidr(other)[1]
    outer = _cidr(network)[1]
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def masked(value: Any) -> dict[str, str]:
    """``<cidr>.masked()``: the network address with the prefix length."""
    return {CIDR: str(_cidr(value)[1])}


def url(value: Any) -> dict[str, str]:
    """``url(<string>)``: an absolute URI or an absolute path (Go's url.ParseRequestURI)."""
    text = _text(value)
    parts = urlsplit(text)
    if not (parts.scheme or text.startswith("/")) or " " in text:
        raise CelFunctionError(
            f'URL parse error during conversion from string: parse "{text}": invalid URI for '
            "request"
        )
    return {URL: text}


def is_url(value: Any) -> bool:
    """``isURL(<string>)``."""
    try:
        url(value)
    except CelFunctionError:
        return False
    return True


def _url_part(get: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if tag_of(value) != URL:
            raise no_overload()
        return get(urlsplit(value[URL]))

    return read


def _query(parts: Any) -> Mapping[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pair in parts.query.split("&") if parts.query else ():
        key, _, val = pair.partition("=")
        out.setdefault(key, []).append(val)
    return out


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "ip": ip,
    "isIP": is_ip,
    "ip.isCanonical": is_canonical,
    "family": lambda v: _ip(v).version,
    "isUnspecified": lambda v: _ip(v).is_unspecified,
    "isLoopback": lambda v: _ip(v).is_loopback,
    "isLinkLocalMulticast": lambda v: _link_local_multicast(_ip(v)),
    "isLinkLocalUnicast": lambda v: _ip(v).is_link_local and not _ip(v).is_multicast,
    "isGlobalUnicast": lambda v: _is_global_unicast(_ip(v)),
    "cidr": cidr,
    "isCIDR": is_cidr,
    "containsIP": contains_ip,
    "containsCIDR": contains_cidr,
    "prefixLength": lambda v: _cidr(v)[1].prefixlen,
    "masked": masked,
    "url": url,
    "isURL": is_url,
    "getScheme": _url_part(lambda p: p.scheme),
    "getHost": _url_part(lambda p: p.netloc.rpartition("@")[2]),
    "getHostname": _url_part(lambda p: p.hostname or ""),
    "getPort": _url_part(lambda p: "" if p.port is None else str(p.port)),
    "getEscapedPath": _url_part(lambda p: p.path),
    "getQuery": _url_part(_query),
}
