"""Which Host headers `wren serve` answers, against DNS rebinding: a web page whose name
the attacker points at 127.0.0.1 reaches the server with its own name in Host, so only
names the server is known by are accepted.

- Bound to loopback: localhost (and *.localhost), 127.x.x.x and [::1], with any port.
- Bound to another address: that address too; bound to all addresses (0.0.0.0, ::), any
  IP literal too (rebinding needs a DNS name) and this machine's own host name.
- `--allow-host NAME` (repeatable) adds names; `--allow-host '*'` accepts any Host.

A request without a Host header (HTTP/1.0 tools) is accepted: browsers always send one.
"""

from __future__ import annotations

import ipaddress
import socket

from ..loopback import is_loopback

__all__ = ["HostPolicy", "host_name", "is_loopback"]


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def host_name(header: str) -> str:
    """The name in a Host header, without its port, lower-cased ("[::1]:8765" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal, maybe with a port after the bracket
        return header[1:header.find("]")] if "]" in header else header
    name, _, _port = header.rpartition(":") if header.count(":") == 1 else (header, "", "")
    return name.rstrip(".")


class HostPolicy:
    def __init__(self, bound: str, allowed: tuple[str, ...] = ()):
        self.any = "*" in allowed
        self.names = {name.lower().rstrip(".") for name in allowed if name != "*"}
        self.names.add("localhost")
        bound_ip = _ip(bound)
        self.wildcard = bound_ip is not None and bound_ip.is_unspecified
        if not is_loopback(bound):
            self.names.add(str(bound_ip) if bound_ip is not None else bound.lower())
        if self.wildcard:
            self.names.update(n.lower() for n in {socket.gethostname(), socket.getfqdn()} if n)

    def accepts(self, header: str | None) -> bool:
        if header is None or self.any:
            return True
        name = host_name(header)
        if name in self.names or name.endswith(".localhost"):
            return True
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.wildcard or str(ip) in self.names)
