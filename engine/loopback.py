"""Whether a host is this machine's loopback: the one rule for every guard that relaxes on
loopback (`wren serve` without --allow-remote, a remote provider over plain http).

Loopback, judged from the text alone:
- an IPv4 address in 127.0.0.0/8;
- the IPv6 loopback ::1 (any spelling, a zone such as ::1%lo, brackets as in a URL);
- an IPv4-mapped IPv6 address of 127.0.0.0/8 (::ffff:127.0.0.1): a dual-stack socket sends
  it to 127.0.0.1, and Python before 3.13 does not call it loopback;
- the name "localhost", in any case.

Nothing else, on purpose: no name is looked up (a DNS answer can change between this check
and the connection, which is what rebinding is), and neither "foo.localhost",
"localhost.localdomain" nor "localhost." counts: outside systemd-resolved those go to the
resolver's files and DNS like any name, a search domain may be appended, and what answers
can be another machine. 0.0.0.0 and :: mean every interface, not loopback.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """True when `host` (a name or an IP literal, maybe in [brackets]) is loopback by the
    rule above; False for anything else, an empty or missing host included."""
    if not host:
        return False
    text = host
    if text.lower() == "localhost":
        return True
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback
