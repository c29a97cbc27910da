"""Where a judge client may connect, and where it may send a key: the egress policy.

A judge endpoint is written by a project admin, but its calls leave from the operator's machines,
which can reach services the admin cannot, and carry keys the operator holds. So:

- a base URL is http or https, with no userinfo, query or fragment;
- its host may not be (or resolve to) a loopback, link-local, private, reserved, multicast or
  unspecified address, IPv4 or IPv6 (an IPv4 address inside an IPv6 one counts as itself),
  unless the operator allows exactly that host:port (JUDGE_PRIVATE_HOSTS);
- when the operator lists public hosts (JUDGE_BASE_URL_HOSTS), only those, port-aware;
- a key variable must be allowed (JUDGE_API_KEY_ENV_ALLOWED, JUDGE_API_KEY_ENV_PREFIX) and is
  sent only to the hosts it is bound to (JUDGE_API_KEY_HOSTS; the common providers' variables
  are bound to their API hosts by default).

Pure Python, so the judge client enforces it itself: `check` before a client sends anything,
`check_addresses` on every address a host resolves to when a connection is made (so a name
that later resolves elsewhere cannot reach a private address). The workbench builds its
policy from settings (graders/judge_egress.py); a training job may pass one or none.

A list entry is `host:port`, `[v6 address]:port` or a bare `host`, which stands for the
default port of the URL's scheme (443 for https, 80 for http). JUDGE_PRIVATE_HOSTS entries
always name the port: they open exactly one service.
"""

import functools
import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

PUBLIC_HOSTS_SETTING = "JUDGE_BASE_URL_HOSTS"
PRIVATE_HOSTS_SETTING = "JUDGE_PRIVATE_HOSTS"
KEY_HOSTS_SETTING = "JUDGE_API_KEY_HOSTS"
KEY_NAMES_SETTING = "JUDGE_API_KEY_ENV_ALLOWED"
KEY_PREFIX_SETTING = "JUDGE_API_KEY_ENV_PREFIX"

# The providers' own variables, each bound to its provider's API host over https.
DEFAULT_KEY_HOSTS: Mapping[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("api.openai.com:443",),
    "ANTHROPIC_API_KEY": ("api.anthropic.com:443",),
    "FIREWORKS_API_KEY": ("api.fireworks.ai:443",),
    "TOGETHER_API_KEY": ("api.together.xyz:443", "api.together.ai:443"),
    "OPENROUTER_API_KEY": ("openrouter.ai:443",),
}
DEFAULT_PORTS = {"http": 80, "https": 443}

# (host, port); port None: the default port of the URL's scheme.
Entry = tuple[str, int | None]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EgressRefused(ValueError):
    """The policy refuses this base URL or key variable; `field` names which of the two
    ("base_url" or "api_key_env"), and the message says which setting would allow it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Target:
    """Where a base URL connects: its scheme, normalised host and port."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{_host_text(self.host)}:{self.port}"

    def matches(self, entries: frozenset[Entry]) -> bool:
        return (self.host, self.port) in entries or (
            (self.host, None) in entries and self.port == DEFAULT_PORTS[self.scheme]
        )


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _host_normalise(host: str) -> str:
    host = host.lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def address_kind(address: str) -> str | None:
    """What makes an address non-public ("loopback", "private", ...), or None when it is
    public. An IPv4 address carried in IPv6 (mapped, 6to4, NAT64) is judged as itself."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address)
    except ValueError:
        return "unparseable"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    for kind, flagged in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("non-public", not ip.is_global),
    ):
        if flagged:
            return kind
    return None


def entry_parse(entry: str, setting: str, *, port_required: bool = False) -> Entry:
    """`host:port`, `[v6]:port` or a bare `host` (unless `port_required`); ValueError naming
    the setting otherwise."""
    text = entry.strip()
    try:
        parts = urlsplit(f"//{text}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
        or (port_required and port is None)
    ):
        wanted = "host:port" if port_required else "host or host:port"
        raise ValueError(f"{setting}: {text!r} is not a {wanted}")
    return _host_normalise(parts.hostname), port


def _entries_text(entries: Iterable[Entry]) -> str:
    return ", ".join(
        sorted(
            _host_text(host) + (f":{port}" if port is not None else "") for host, port in entries
        )
    )


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's rules (see the module docstring). Build one with `parse`."""

    public_hosts: frozenset[Entry] = frozenset()
    private_hosts: frozenset[Entry] = frozenset()
    key_names: frozenset[str] = frozenset(DEFAULT_KEY_HOSTS)
    key_prefix: str = ""
    key_hosts: tuple[tuple[str, frozenset[Entry]], ...] = ()

    @classmethod
    def parse(
        cls,
        *,
        public_hosts: Iterable[str] = (),
        private_hosts: Iterable[str] = (),
        key_hosts: Iterable[str] = (),
        key_names: Iterable[str] = tuple(DEFAULT_KEY_HOSTS),
        key_prefix: str = "",
    ) -> "EgressPolicy":
        """The policy of these settings' values. `key_hosts` holds `VARIABLE=host[:port]`
        entries (a variable may appear several times); a variable it names is bound to those
        hosts only, the others keep their DEFAULT_KEY_HOSTS. Raises ValueError naming the
        setting of a malformed entry."""
        bindings: dict[str, set[Entry]] = {}
        for item in key_hosts:
            name, equals, host = item.partition("=")
            if not equals or not name.strip():
                raise ValueError(f"{KEY_HOSTS_SETTING}: {item!r} is not VARIABLE=host[:port]")
            bindings.setdefault(name.strip(), set()).add(entry_parse(host, KEY_HOSTS_SETTING))
        for name, hosts in DEFAULT_KEY_HOSTS.items():
            if name not in bindings:
                bindings[name] = {entry_parse(host, KEY_HOSTS_SETTING) for host in hosts}
        public = frozenset(entry_parse(host, PUBLIC_HOSTS_SETTING) for host in public_hosts)
        for host, _ in public:
            kind = address_kind(host) if _is_ip(host) else None
            if kind is not None:  # it opens nothing: say where it belongs
                raise ValueError(
                    f"{PUBLIC_HOSTS_SETTING}: {host} is a {kind} address; list it with its "
                    f"port in {PRIVATE_HOSTS_SETTING} instead"
                )
        return cls(
            public_hosts=public,
            private_hosts=frozenset(
                entry_parse(h, PRIVATE_HOSTS_SETTING, port_required=True) for h in private_hosts
            ),
            key_names=frozenset(key_names),
            key_prefix=key_prefix,
            key_hosts=tuple(sorted((name, frozenset(hosts)) for name, hosts in bindings.items())),
        )

    def target(self, url: str) -> Target:
        """The URL's scheme, host and port, refusing any other shape. Only plain printable
        ASCII is accepted (an IDN host in its xn-- form), so every URL parser on the way
        (this one, httpx's, aiohttp's) reads the same host out of it."""
        if not url.isascii() or not url.isprintable() or " " in url or "\\" in url:
            raise EgressRefused(
                "base_url",
                "a judge URL is plain ASCII with no spaces or backslashes (write an "
                "international host name in its xn-- form)",
            )
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise EgressRefused("base_url", f"{url!r} is not a valid URL: {exc}") from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise EgressRefused("base_url", "a judge URL starts with http:// or https://")
        problem = (
            "a user name or password (...@)" if "@" in parts.netloc
            else "a query (?...)" if "?" in url
            else "a fragment (#...)" if "#" in url
            else "a percent-encoded host" if "%" in parts.netloc
            else "no host" if not parts.hostname
            else ""
        )  # fmt: skip
        if problem:
            raise EgressRefused("base_url", f"a judge URL may not have {problem}")
        assert parts.hostname is not None
        return Target(
            scheme, _host_normalise(parts.hostname), DEFAULT_PORTS[scheme] if port is None else port
        )

    def check(self, url: str, api_key_env: str | None) -> Target:
        """Refuse (EgressRefused) a URL or key variable the policy does not allow, by the URL
        alone: an IP address in it is checked, a name's addresses are not looked up (see
        `check_resolved` and `check_addresses`). Remembered per policy, URL and variable: a
        reward request checks its endpoint twice (its settings, then its judge client)."""
        return _checked(self, url, api_key_env)

    def _check(self, url: str, api_key_env: str | None) -> Target:
        target = self.target(url)
        if api_key_env:
            self._key_check(api_key_env, target)
        if target.matches(self.private_hosts):
            return target
        kind = address_kind(target.host) if _is_ip(target.host) else None
        if kind is not None:
            raise self._private_refusal(target, f"is a {kind} address")
        if self.public_hosts and not target.matches(self.public_hosts):
            raise EgressRefused(
                "base_url",
                f"{target} is not an allowed judge host: use one of "
                f"{_entries_text(self.public_hosts | self.private_hosts)} "
                f"({PUBLIC_HOSTS_SETTING} and {PRIVATE_HOSTS_SETTING} set them)",
            )
        return target

    def check_addresses(self, host: str, port: int, addresses: Iterable[str]) -> None:
        """Refuse a connection to `host`:`port` when any address it resolved to is not public,
        unless the operator allows exactly that host:port."""
        host = _host_normalise(host)
        if (host, port) in self.private_hosts:
            return
        for address in addresses:
            kind = address_kind(address)
            if kind is not None:
                target = Target("https", host, port)
                raise self._private_refusal(target, f"resolves to a {kind} address")

    def check_resolved(self, url: str, api_key_env: str | None) -> Target:
        """`check`, and the host's addresses as this machine resolves them now (blocking): for
        saving an endpoint, where an error on the field beats a failed call later. A name that
        does not resolve passes; the check at connection time has the last word."""
        target = self.check(url, api_key_env)
        if not _is_ip(target.host) and not target.matches(self.private_hosts):
            try:
                infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                return target
            self.check_addresses(target.host, target.port, [str(info[4][0]) for info in infos])
        return target

    def _key_check(self, name: str, target: Target) -> None:
        if name not in self.key_names and not (
            self.key_prefix and name.startswith(self.key_prefix)
        ):
            prefix = f" or a name starting with {self.key_prefix}" if self.key_prefix else ""
            raise EgressRefused(
                "api_key_env",
                f"{name!r} is not an allowed key variable: use one of "
                f"{', '.join(sorted(self.key_names))}{prefix} ({KEY_NAMES_SETTING} and "
                f"{KEY_PREFIX_SETTING} set these)",
            )
        hosts = dict(self.key_hosts).get(name)
        if not hosts:
            raise EgressRefused(
                "api_key_env",
                f"the key in {name} is not bound to any host: the operator adds "
                f"{name}=host:port to {KEY_HOSTS_SETTING} for the host it belongs to",
            )
        if not target.matches(hosts):
            raise EgressRefused(
                "api_key_env",
                f"the key in {name} may only be sent to {_entries_text(hosts)}, not {target} "
                f"({KEY_HOSTS_SETTING} binds key variables to hosts)",
            )

    @staticmethod
    def _private_refusal(target: Target, what: str) -> EgressRefused:
        return EgressRefused(
            "base_url",
            f"{target} {what}; a judge may call one only if the operator allows exactly "
            f"{target} in {PRIVATE_HOSTS_SETTING}",
        )


@functools.lru_cache(maxsize=256)
def _checked(policy: EgressPolicy, url: str, api_key_env: str | None) -> Target:
    """EgressPolicy.check, remembered (a refusal raises again, uncached: nothing is stored)."""
    return policy._check(url, api_key_env)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
