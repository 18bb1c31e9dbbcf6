"""The site file: what the watched network is, for the rules that judge traffic by it (`--site FILE`).

One YAML file describes the site for every rule, as Zeek's `Site::local_nets`
or Suricata's `HOME_NET` do. Every key is optional:

    local_networks   the site's prefixes (CIDR, IPv4 or IPv6)
    routers          the allowed routing speakers and router-advertisement senders: IPs or MACs
    dhcp_servers     the allowed DHCP servers: IPs, MACs or DHCPv6 DUIDs in hex
    bindings         the IP-MAC registry: entries written in the site file and files of them, ethers(5)
                     `MAC IP` lines, ISC dhcpd `host` blocks or CSV `mac,ip[,vlan]` (a relative path is
                     read from the site file's folder)
    dynamic_pools    the IPv4 ranges handed to hosts without a binding, `FIRST-LAST`

`Site.given(key)` tells a detector whether the file set a key; a rule that
needs one says in `detector explain RULE` what it does without it.
`detector site-template` prints a commented example (SITE_TEMPLATE).

`load_site` checks the file as detector.rules checks rule files: anything
wrong is a RuleError of one line naming the file and line, the key, and for
a bindings file that file and its line, and what is wrong, never the text
that is: a file named by mistake (a password file as a registry) must not
reach a terminal or a CI log. Values are shown only once they parse as an
address. The YAML is read as a tree of
nodes and every value taken as the text written, never constructed: YAML
1.1 would read the MAC 10:20:30:40:50:59 as a base-60 number, and a tag
cannot make the loader build anything. Files, lists and the registry are
bounded (MAX_*), and so is the nesting, before the tree is built.

Addresses are matched as the packet schema holds them: IPv4 as IPv4-mapped
IPv6 (::ffff:a.b.c.d) in two uint64 halves, so one sorted table of ranges
serves IPv4 and IPv6 alike (`local_mask`, `pool_mask`, ...).
"""
from __future__ import annotations

import bisect
import csv
import io
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import yaml

from .errors import RuleError, open_reason
from .rules import SAFE_LOADER, did_you_mean

__all__ = ["Binding", "Site", "load_site", "EMPTY", "KEYS", "SITE_TEMPLATE", "parse_mac", "mac_text"]

KEYS = ("local_networks", "routers", "dhcp_servers", "bindings", "dynamic_pools")
BINDINGS_FORMATS = ("ethers", "dhcpd", "csv")

# A site file is a page or two of text plus the inline bindings of a small site; the registry of a large
# one belongs in a bindings file.
MAX_SITE_FILE_BYTES = 1 << 20
# A dhcpd host block is about 100 bytes: room for the largest registry below, with comments.
MAX_BINDINGS_FILE_BYTES = 32 << 20
# Items of one list: prefixes, routers, servers, pools (the rules match them per packet).
MAX_ITEMS = 4096
# IP-MAC bindings in all: a campus registry holds tens of thousands of hosts, a switch's IP-MAC binding
# table a few thousand; more is a mistake, and each costs memory in every detector that reads them.
MAX_BINDINGS = 262_144
# Levels of YAML nesting: a site file needs three (key, list, entry). libyaml's composer recurses per
# level and crashes the process on a few tens of thousands, so deeper files are refused before composing.
MAX_YAML_DEPTH = 8
_TOO_DEEP = f"nested more than {MAX_YAML_DEPTH} levels deep; a site file needs 3"
# RFC 8415 sec. 11.1: a DUID is a 2-octet type code and 1 to 128 octets of identifier.
DUID_MIN_BYTES, DUID_MAX_BYTES = 3, 130
# IEEE 802.1Q: VLAN ids 0 (priority tag only) and 4095 are reserved.
VLAN_IDS = range(1, 4095)
# binding_columns' vlan of a binding valid in every VLAN
NO_VLAN = -1

# How the schema stores IPv4: ::ffff:0:0/96 (RFC 4291 sec. 2.5.5.2)
IPV4_MAPPED = 0xFFFF << 32
LOW64 = (1 << 64) - 1
LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")   # RFC 919

_HEX_BYTE = re.compile(r"[0-9A-Fa-f]{1,2}")
_HEX_WORD = re.compile(r"[0-9A-Fa-f]{4}")
_HEX_PAIRS = re.compile(r"[0-9A-Fa-f]{2}([:-]?[0-9A-Fa-f]{2})*")
MAC_TEXT = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")     # mac_text's form
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]*[A-Za-z][A-Za-z0-9_.-]*")


# ---- addresses ---------------------------------------------------------------

def parse_mac(text: str) -> int | None:
    """A MAC address as a 48-bit int: aa:bb:cc:dd:ee:ff or aa-bb-cc-dd-ee-ff (groups of one digit too, as
    ether_aton(3) reads /etc/ethers), or Cisco's aabb.ccdd.eeff; None if `text` is none of these."""
    for separator in (":", "-"):
        parts = text.split(separator)
        if len(parts) == 6:
            if all(_HEX_BYTE.fullmatch(part) for part in parts):
                return int.from_bytes(bytes(int(part, 16) for part in parts), "big")
            return None
    parts = text.split(".")
    if len(parts) == 3 and all(_HEX_WORD.fullmatch(part) for part in parts):
        return int("".join(parts), 16)
    return None


def mac_text(mac: int) -> str:
    """The canonical text of a 48-bit MAC: aa:bb:cc:dd:ee:ff."""
    return ":".join(f"{byte:02x}" for byte in int(mac).to_bytes(6, "big"))


def _address(ip) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address from text or an ipaddress object; IPv4-mapped IPv6 as the IPv4 address it maps."""
    address = ip if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else ipaddress.ip_address(ip)
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _schema_int(address) -> int:
    """The 128-bit value the schema stores for an address (its hi << 64 | lo)."""
    return IPV4_MAPPED | int(address) if address.version == 4 else int(address)


def _mac_key(mac) -> str:
    """A MAC given as an int or as text, as the canonical text the site's sets hold."""
    if isinstance(mac, str):
        value = parse_mac(mac)
        if value is None:
            raise ValueError(f"{mac!r:.60} is not a MAC address")
        return mac_text(value)
    return mac_text(mac)


def _duid_key(duid) -> str:
    """A DUID given as bytes or as hex text (with or without ':' or '-'), as lower-case hex."""
    if isinstance(duid, (bytes, bytearray, memoryview)):
        return bytes(duid).hex()
    return str(duid).replace(":", "").replace("-", "").lower()


def _keys16(hi, lo) -> np.ndarray:
    """(hi, lo) halves as 16 big-endian bytes each: numpy orders these as the 128-bit numbers they are."""
    pairs = np.empty((len(hi), 2), dtype=">u8")
    pairs[:, 0] = hi
    pairs[:, 1] = lo
    return pairs.view("S16").ravel()


class _Ranges:
    """Closed ranges of the schema's 128-bit address space, merged and sorted: membership of one address
    (`in`) by bisection, of address columns (`mask`) by one searchsorted, whatever the number of ranges."""

    def __init__(self, ranges):
        merged: list[list[int]] = []
        for first, last in sorted(ranges):
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        self.firsts = [first for first, _ in merged]
        self.lasts = [last for _, last in merged]
        self._first_keys = self._keys(self.firsts)
        self._last_keys = self._keys(self.lasts)

    @staticmethod
    def _keys(values: list[int]) -> np.ndarray:
        return _keys16(np.array([v >> 64 for v in values], dtype=np.uint64),
                       np.array([v & LOW64 for v in values], dtype=np.uint64))

    def __contains__(self, value: int) -> bool:
        at = bisect.bisect_right(self.firsts, value) - 1
        return at >= 0 and value <= self.lasts[at]

    def mask(self, hi, lo) -> np.ndarray:
        hi, lo = np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64)
        if not self.firsts or len(hi) == 0:
            return np.zeros(len(hi), dtype=bool)
        keys = _keys16(hi, lo)
        at = np.searchsorted(self._first_keys, keys, side="right") - 1
        inside = at >= 0
        inside[inside] = keys[inside] <= self._last_keys[at[inside]]
        return inside


# ---- the site ----------------------------------------------------------------

@dataclass(frozen=True)
class Binding:
    """One entry of the IP-MAC registry."""
    mac: int            # 48-bit MAC as int (the schema's representation)
    ip: str             # canonical text (ipaddress compressed form; IPv4 dotted)
    vlan: int | None    # the VLAN it holds in; None: any
    source: str         # "file:line" where it was declared, for findings to cite


@dataclass(frozen=True, repr=False)
class Site:
    """What the site file says (see the module docstring); EMPTY when no file was given.

    Immutable, and shared as it is: copying a detector's state (a watch's
    window does, twice a second) never copies the registry.
    """
    path: str | None = None                    # the site file, None when no file was given
    local_networks: tuple = ()                 # ipaddress networks
    routers: frozenset = frozenset()           # canonical IP texts and MAC texts ("aa:bb:cc:dd:ee:ff")
    dhcp_servers: frozenset = frozenset()      # canonical IP texts, MAC texts, DUID hex (lower case, no separators)
    bindings: tuple = ()                       # Binding
    dynamic_pools: tuple = ()                  # (first, last) ipaddress.IPv4Address pairs
    keys_given: frozenset | None = None        # the keys the file set; None: those holding something

    def __post_init__(self):
        if self.keys_given is None:
            object.__setattr__(self, "keys_given", frozenset(key for key in KEYS if getattr(self, key)))

    def __repr__(self) -> str:
        counts = ", ".join(f"{key} {len(getattr(self, key))}" for key in KEYS if key in self.keys_given)
        return f"Site({self.path!r}: {counts or 'nothing given'})"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def given(self, key: str) -> bool:
        """Whether the site file set `key` (an empty list counts: it says "none")."""
        if key not in KEYS:
            raise ValueError(f"unknown site key '{key}' (known: {', '.join(KEYS)})")
        return key in self.keys_given

    # ---- one address at a time
    def is_local(self, ip) -> bool:
        """Whether `ip` (text or ipaddress object) is in one of the local networks."""
        return _schema_int(_address(ip)) in self._local

    def is_router(self, ip=None, mac=None) -> bool:
        """Whether the IP or the MAC (int or text) is one of the allowed routers."""
        return ((ip is not None and str(_address(ip)) in self.routers)
                or (mac is not None and _mac_key(mac) in self.routers))

    def is_dhcp_server(self, ip=None, mac=None, duid=None) -> bool:
        """Whether the IP, the MAC or the DUID (bytes or hex) is one of the allowed DHCP servers."""
        return ((ip is not None and str(_address(ip)) in self.dhcp_servers)
                or (mac is not None and _mac_key(mac) in self.dhcp_servers)
                or (duid is not None and _duid_key(duid) in self.dhcp_servers))

    def in_pool(self, ip) -> bool:
        """Whether `ip` is in one of the dynamic pools (IPv4 only: an IPv6 address never is)."""
        return _schema_int(_address(ip)) in self._pools

    def macs_for_ip(self, ip, vlan=None) -> frozenset[int]:
        """The MACs the registry binds to `ip`; with `vlan`, those bound in that VLAN or in any."""
        return frozenset(mac for mac, bound in self._by_ip.get(str(_address(ip)), ())
                         if vlan is None or bound is None or bound == vlan)

    def ips_for_mac(self, mac, vlan=None) -> frozenset[str]:
        """The IP texts the registry binds to `mac` (int or text); with `vlan`, as macs_for_ip."""
        key = parse_mac(_mac_key(mac)) if isinstance(mac, str) else int(mac)
        return frozenset(ip for ip, bound in self._by_mac.get(key, ())
                         if vlan is None or bound is None or bound == vlan)

    # ---- columns of the schema: 128-bit addresses as uint64 (hi, lo), MACs as uint64
    def local_mask(self, hi, lo) -> np.ndarray:
        """Which addresses of the columns are in a local network."""
        return self._local.mask(hi, lo)

    def pool_mask(self, hi, lo) -> np.ndarray:
        """Which addresses of the columns are in a dynamic pool."""
        return self._pools.mask(hi, lo)

    def router_ip_mask(self, hi, lo) -> np.ndarray:
        """Which addresses of the columns are a router's."""
        return self._router_ips.mask(hi, lo)

    def router_mac_mask(self, mac) -> np.ndarray:
        """Which MACs of the column are a router's."""
        return np.isin(np.asarray(mac, dtype=np.uint64), self._router_macs)

    def dhcp_server_ip_mask(self, hi, lo) -> np.ndarray:
        """Which addresses of the columns are an allowed DHCP server's."""
        return self._dhcp_ips.mask(hi, lo)

    def dhcp_server_mac_mask(self, mac) -> np.ndarray:
        """Which MACs of the column are an allowed DHCP server's."""
        return np.isin(np.asarray(mac, dtype=np.uint64), self._dhcp_macs)

    def binding_columns(self) -> dict[str, np.ndarray]:
        """The registry as columns in the schema's form: mac, ip_hi, ip_lo (uint64) and vlan (int32, NO_VLAN
        for a binding valid in every VLAN), one row per binding, in the file's order."""
        return self._binding_columns

    # ---- derived once, on first use
    @cached_property
    def _local(self) -> _Ranges:
        return _Ranges((_schema_int(net.network_address), _schema_int(net.broadcast_address))
                       for net in self.local_networks)

    @cached_property
    def _pools(self) -> _Ranges:
        return _Ranges((_schema_int(first), _schema_int(last)) for first, last in self.dynamic_pools)

    @cached_property
    def _router_ips(self) -> _Ranges:
        return self._points(self.routers)

    @cached_property
    def _router_macs(self) -> np.ndarray:
        return self._macs(self.routers)

    @cached_property
    def _dhcp_ips(self) -> _Ranges:
        return self._points(self.dhcp_servers)

    @cached_property
    def _dhcp_macs(self) -> np.ndarray:
        return self._macs(self.dhcp_servers)

    @staticmethod
    def _points(texts) -> _Ranges:
        values = []
        for text in texts:
            try:
                values.append(_schema_int(ipaddress.ip_address(text)))
            except ValueError:      # a MAC or a DUID
                continue
        return _Ranges((value, value) for value in values)

    @staticmethod
    def _macs(texts) -> np.ndarray:
        return np.array(sorted(parse_mac(text) for text in texts if MAC_TEXT.fullmatch(text)), dtype=np.uint64)

    @cached_property
    def _by_ip(self) -> dict[str, list[tuple[int, int | None]]]:
        out: dict[str, list[tuple[int, int | None]]] = {}
        for binding in self.bindings:
            out.setdefault(binding.ip, []).append((binding.mac, binding.vlan))
        return out

    @cached_property
    def _by_mac(self) -> dict[int, list[tuple[str, int | None]]]:
        out: dict[int, list[tuple[str, int | None]]] = {}
        for binding in self.bindings:
            out.setdefault(binding.mac, []).append((binding.ip, binding.vlan))
        return out

    @cached_property
    def _binding_columns(self) -> dict[str, np.ndarray]:
        values = [_schema_int(ipaddress.ip_address(binding.ip)) for binding in self.bindings]
        return {"mac": np.array([binding.mac for binding in self.bindings], dtype=np.uint64),
                "ip_hi": np.array([value >> 64 for value in values], dtype=np.uint64),
                "ip_lo": np.array([value & LOW64 for value in values], dtype=np.uint64),
                "vlan": np.array([NO_VLAN if binding.vlan is None else binding.vlan for binding in self.bindings],
                                 dtype=np.int32)}


EMPTY = Site()


# ---- reading the file ----------------------------------------------------------

class _Bad(Exception):
    """What is wrong with a value, and the line of its file (None: the line is the caller's to give)."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.line = line


def _read(path: Path, limit: int, what: str) -> str:
    """A regular file's text, at most `limit` bytes of UTF-8 (a byte-order mark is dropped)."""
    try:
        path.stat()         # a missing file or a loop of links says which (Path.exists says False to both)
        if path.is_dir():
            raise _Bad("is a folder, not a file")
        if not path.is_file():
            raise _Bad("not a regular file")
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise _Bad(open_reason(exc)) from None
    if len(data) > limit:
        raise _Bad(f"larger than {what} can be ({limit:,} bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 text (byte {exc.start})") from None


def _compose(name: str, text: str):
    """The YAML node tree of the site file (None for an empty one), its nesting checked first."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=SAFE_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise RuleError(f"{name}:{event.start_mark.line + 1}", None, _TOO_DEEP)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.compose(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:
            # libyaml (0.2.5 and later) refuses deep nesting itself, as it scans ahead of the first event
            raise RuleError(where, None, _TOO_DEEP) from None
        raise RuleError(where, None, f"not valid YAML: {problem}") from None


def _at(name: str, node) -> str:
    return f"{name}:{node.start_mark.line + 1}"


def _items(name: str, key: str, node) -> list:
    """The nodes of a list-valued key, at most MAX_ITEMS of them."""
    if not isinstance(node, yaml.SequenceNode):
        raise RuleError(_at(name, node), key, "must be a list, one item a line ('- ...'), or [] for none")
    if len(node.value) > MAX_ITEMS:
        raise RuleError(_at(name, node), key, f"{len(node.value):,} items, more than the {MAX_ITEMS:,} allowed")
    return node.value


def _scalar(name: str, key: str, node) -> str:
    """One value written as text: the text, stripped."""
    if not isinstance(node, yaml.ScalarNode) or not node.value.strip():
        raise RuleError(_at(name, node), key, "expected one value here (an address, a network, a range, a file "
                                              "name), written as text")
    return node.value.strip()


def _parse_ip(text: str):
    """An address from text (IPv4-mapped as IPv4), or None; a zone index is refused, not dropped."""
    if "%" in text:
        raise _Bad("an address with a zone index (the part after %): packets carry none; write the address alone")
    try:
        return _address(text)
    except ValueError:
        return None


def _host_ip(text: str):
    """The address of a host, router or server: not multicast, not unspecified, not the broadcast."""
    address = _parse_ip(text)
    if address is None:
        hint = "; detector resolves no host names: write the address" if _HOST_NAME.fullmatch(text) else ""
        raise _Bad(f"not an IP address{hint}")
    if address.is_multicast or address.is_unspecified or address == LIMITED_BROADCAST:
        raise _Bad(f"{address} is a {'multicast' if address.is_multicast else 'special'} address, no host's")
    return address


def _host_mac(text: str) -> int:
    """The MAC of a host's interface: unicast (IEEE 802 individual/group bit clear), not all zeros."""
    mac = parse_mac(text)
    if mac is None:
        raise _Bad("not a MAC address (aa:bb:cc:dd:ee:ff)")
    if mac >> 40 & 1:
        raise _Bad(f"{mac_text(mac)} is a multicast MAC, no host's")
    if mac == 0:
        raise _Bad("00:00:00:00:00:00 is no host's MAC")
    return mac


def _vlan(text: str) -> int:
    if not text.isdigit() or len(text) > 4 or int(text) not in VLAN_IDS:
        raise _Bad(f"not a VLAN id ({VLAN_IDS.start}-{VLAN_IDS.stop - 1})")
    return int(text)


def _entry(mac: str, ip: str, vlan: str | None) -> tuple[int, str, int | None]:
    """One binding's values checked: (MAC, canonical IP text, VLAN or None)."""
    return _host_mac(mac), str(_host_ip(ip)), None if vlan is None else _vlan(vlan)


def _checked(name: str, key: str, node, check, text: str):
    try:
        return check(text)
    except _Bad as bad:
        raise RuleError(_at(name, node), key, bad.reason) from None


def _local_networks(name: str, key: str, node) -> tuple:
    networks = {}
    for item in _items(name, key, node):
        text = _scalar(name, key, item)
        try:
            if "%" in text:
                raise ValueError(text)
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise RuleError(_at(name, item), key, "not a network in CIDR notation "
                                                  "(10.0.0.0/8, 2001:db8::/32)") from None
        networks[network] = None
    return tuple(networks)


def _router(text: str) -> str:
    address = _parse_ip(text)
    if address is not None:
        return str(_host_ip(text))
    if parse_mac(text) is not None:
        return mac_text(_host_mac(text))
    raise _Bad("neither an IP address nor a MAC address")


def _dhcp_server(text: str) -> str:
    if _parse_ip(text) is not None:
        return str(_host_ip(text))
    if parse_mac(text) is not None:
        return mac_text(_host_mac(text))
    if _HEX_PAIRS.fullmatch(text):
        duid = _duid_key(text)
        if DUID_MIN_BYTES <= len(duid) // 2 <= DUID_MAX_BYTES:
            return duid
        raise _Bad(f"a DUID of {len(duid) // 2} bytes; DUIDs have {DUID_MIN_BYTES} to {DUID_MAX_BYTES} "
                   "(RFC 8415 sec. 11.1)")
    raise _Bad("neither an IP address, a MAC address nor a DUID in hex")


def _addresses(name: str, key: str, node, check) -> frozenset:
    return frozenset(_checked(name, key, item, check, _scalar(name, key, item)) for item in _items(name, key, node))


def _pool(text: str) -> tuple:
    parts = text.split("-")
    if len(parts) != 2:
        raise _Bad("not a range FIRST-LAST (10.160.0.1-10.160.0.100)")
    ends = []
    for part in parts:
        try:
            ends.append(ipaddress.IPv4Address(part.strip()))
        except ValueError:
            raise _Bad(f"the {('first', 'last')[len(ends)]} address is not an IPv4 address (pools are IPv4 ranges, "
                       "FIRST-LAST)") from None
    first, last = ends
    if first > last:
        raise _Bad(f"the first address {first} is above the last {last}")
    return first, last


def _dynamic_pools(name: str, key: str, node) -> tuple:
    pools = {}
    for item in _items(name, key, node):
        pools[_checked(name, key, item, _pool, _scalar(name, key, item))] = None
    return tuple(pools)


# ---- bindings ------------------------------------------------------------------

ENTRY_KEYS = ("mac", "ip", "vlan")
FILE_KEYS = ("file", "format", "vlan")


def _fields(name: str, node, allowed) -> dict[str, tuple]:
    """A bindings item's mapping: key -> (node, text), each key known, once, with one value."""
    fields: dict[str, tuple] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if key not in allowed:
            raise RuleError(_at(name, key_node), "bindings", f"unknown key in an entry{did_you_mean(key, allowed)} "
                                                             f"(known: {', '.join(ENTRY_KEYS)}; for a file: "
                                                             f"{', '.join(FILE_KEYS)})")
        if key in fields:
            raise RuleError(_at(name, key_node), "bindings", f"'{key}' given twice in one entry")
        fields[key] = (value_node, _scalar(name, "bindings", value_node))
    return fields


def _file_format(path: Path) -> str | None:
    """The format a bindings file's name says: *.csv, ethers or *.ethers, a name with dhcpd in it."""
    lower = path.name.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower == "ethers" or lower.endswith(".ethers"):
        return "ethers"
    if "dhcpd" in lower:
        return "dhcpd"
    return None


def _at_line(line: int, check, *texts):
    try:
        return check(*texts)
    except _Bad as bad:
        raise _Bad(bad.reason, line) from None


def _fields_count(count: int) -> str:
    return f"{count} field" if count == 1 else f"{count} fields"


def _ethers(text: str) -> Iterator[tuple]:
    """ethers(5): one `MAC IP` a line, '#' to the end of a line a comment."""
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise _Bad(f"expected 'MAC IP', found {_fields_count(len(fields))}", number)
        yield number, *_at_line(number, _entry, fields[0], fields[1], None)


# ISC dhcpd.conf tokens: words, quoted strings, punctuation; '#' comments to the end of the line
DHCPD_TOKEN = re.compile(r'(?P<space>\s+)|(?P<comment>#[^\n]*)|(?P<string>"(?:[^"\\\n]|\\.)*")|(?P<punct>[{};,])'
                         r'|(?P<word>[^\s{};,#"]+)|(?P<bad>.)')


def _dhcpd_tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, text, line) of each token of a dhcpd.conf, blanks and comments left out."""
    line = 1
    for match in DHCPD_TOKEN.finditer(text):
        kind, value = match.lastgroup, match.group()
        if kind == "space":
            line += value.count("\n")
        elif kind == "bad":
            raise _Bad("a quoted string that is never closed", line)
        elif kind != "comment":
            yield kind, value, line


def _dhcpd(text: str) -> Iterator[tuple]:
    """ISC dhcpd.conf: the `host NAME { hardware ethernet MAC; fixed-address IP[, IP...]; }` blocks, at any
    depth (inside group, subnet, shared-network); hosts without both are no binding and are passed over."""
    tokens = _dhcpd_tokens(text)
    opened: list[int] = []
    statement_start = True
    for _, value, line in tokens:
        if value == "{":
            opened.append(line)
            statement_start = True
        elif value == "}":
            if not opened:
                raise _Bad("'}' without its '{'", line)
            opened.pop()
            statement_start = True
        elif value == ";":
            statement_start = True
        elif statement_start and value.lower() == "host":
            yield from _dhcpd_host(tokens, line)
        else:
            statement_start = False
    if opened:
        raise _Bad("'{' that is never closed", opened[-1])


def _dhcpd_host(tokens: Iterator[tuple[str, str, int]], line: int) -> Iterator[tuple]:
    """One host block, from its name to its closing brace; statements of nested blocks are not the host's."""
    name = next(tokens, None)
    if name is None or name[0] not in ("word", "string"):
        raise _Bad("'host' without a name", line)
    brace = next(tokens, None)
    if brace is None or brace[1] != "{":
        raise _Bad("a host: expected '{' after its name", line)
    depth, statement = 1, []
    mac, addresses = None, []
    for kind, value, at in tokens:
        if value in ("{", "}"):
            depth += 1 if value == "{" else -1
            statement = []
            if depth == 0:
                break
        elif value == ";":
            if depth == 1 and statement:
                words = [word for _, word, _ in statement]
                keyword = words[0].lower()
                if keyword == "hardware" and len(words) >= 2 and words[1].lower() == "ethernet":
                    if len(words) != 3:
                        raise _Bad("expected 'hardware ethernet MAC;'", statement[0][2])
                    if mac is not None:
                        raise _Bad("a host with a second 'hardware ethernet'", statement[0][2])
                    mac = _at_line(statement[0][2], _host_mac, words[2])
                elif keyword in ("fixed-address", "fixed-address6"):
                    addresses += _fixed_addresses(words, statement[0][2])
            statement = []
        else:
            statement.append((kind, value, at))
    else:
        raise _Bad("a host whose '{' is never closed", line)
    if mac is not None:
        for address in addresses:
            yield line, mac, address, None


def _fixed_addresses(words: list[str], line: int) -> list[str]:
    """The addresses of `fixed-address A[, B...]` (IPv4) or `fixed-address6 A` (IPv6)."""
    values = words[1::2]
    if not values or any(comma != "," for comma in words[2::2]) or len(words) % 2:
        raise _Bad(f"expected '{words[0]} ADDRESS[, ADDRESS...];'", line)
    version = 6 if words[0].lower() == "fixed-address6" else 4
    out = []
    for value in values:
        address = _at_line(line, _host_ip, value.strip('"'))
        if address.version != version:
            raise _Bad(f"{words[0]} {address}: an IPv{address.version} address", line)
        out.append(str(address))
    return out


def _csv(text: str) -> Iterator[tuple]:
    """CSV rows mac,ip[,vlan], with an optional header row naming those columns; rows starting with '#' and
    blank rows are passed over."""
    reader = csv.reader(io.StringIO(text, newline=""))
    first = True
    try:
        for row in reader:
            cells = [cell.strip() for cell in row]
            if not any(cells) or cells[0].startswith("#"):
                continue
            number = reader.line_num
            if first and cells[0].lower() == "mac":
                first = False
                if [cell.lower() for cell in cells] not in (["mac", "ip"], ["mac", "ip", "vlan"]):
                    raise _Bad("a header row names the columns mac,ip[,vlan], in that order", number)
                continue
            first = False
            if len(cells) not in (2, 3):
                raise _Bad(f"expected mac,ip[,vlan], found {_fields_count(len(cells))}", number)
            vlan = cells[2] if len(cells) == 3 and cells[2] else None
            yield number, *_at_line(number, _entry, cells[0], cells[1], vlan)
    except csv.Error as exc:
        raise _Bad(f"not CSV: {exc}", reader.line_num) from None


PARSERS = {"ethers": _ethers, "dhcpd": _dhcpd, "csv": _csv}


def _bindings(name: str, key: str, node) -> tuple:
    out: list[Binding] = []
    folder = Path(name).parent
    for item in _items(name, key, node):
        if isinstance(item, yaml.ScalarNode):
            fields = {"file": (item, _scalar(name, key, item))}
        elif isinstance(item, yaml.MappingNode):
            fields = _fields(name, item, FILE_KEYS if any(isinstance(k, yaml.ScalarNode) and k.value == "file"
                                                          for k, _ in item.value) else ENTRY_KEYS)
        else:
            raise RuleError(_at(name, item), key, "each item is an entry {mac: ..., ip: ...[, vlan: ...]} or a "
                                                  "file {file: ...[, format: ...][, vlan: ...]}")
        vlan = fields.get("vlan")
        if vlan is not None:
            vlan = _checked(name, key, vlan[0], _vlan, vlan[1])
        if "file" not in fields:
            missing = [field for field in ("mac", "ip") if field not in fields]
            if missing:
                raise RuleError(_at(name, item), key, f"an entry without {' and '.join(missing)}")
            mac = _checked(name, key, fields["mac"][0], _host_mac, fields["mac"][1])
            ip = _checked(name, key, fields["ip"][0], _host_ip, fields["ip"][1])
            out.append(Binding(mac, str(ip), vlan, _at(name, item)))
        else:
            out += _bindings_file(name, key, item, folder, fields, vlan, MAX_BINDINGS - len(out))
        if len(out) > MAX_BINDINGS:
            raise RuleError(_at(name, item), key, f"more than {MAX_BINDINGS:,} bindings, the most a registry holds")
    return tuple(out)


def _bindings_file(name: str, key: str, item, folder: Path, fields: dict, vlan: int | None, room: int) -> list:
    """The bindings of one file, at most `room` + 1 of them (one more tells the caller there are too many)."""
    written = fields["file"][1]
    path = Path(written) if Path(written).is_absolute() else folder / written
    if "format" in fields:
        form = fields["format"][1]
        if form not in BINDINGS_FORMATS:
            raise RuleError(_at(name, fields["format"][0]), key,
                            f"unknown format{did_you_mean(form, BINDINGS_FORMATS)} "
                            f"(known: {', '.join(BINDINGS_FORMATS)})")
    else:
        form = _file_format(path)
        if form is None:
            raise RuleError(_at(name, item), key, f"{path}: the name does not tell the format; add format: "
                                                  f"{', '.join(BINDINGS_FORMATS)}")
    out = []
    try:
        text = _read(path, MAX_BINDINGS_FILE_BYTES, "a bindings file")
        for number, mac, ip, own_vlan in PARSERS[form](text):
            out.append(Binding(mac, ip, own_vlan if own_vlan is not None else vlan, f"{path}:{number}"))
            if len(out) > room:
                break
    except _Bad as bad:
        where = f"{path}:{bad.line}" if bad.line is not None else str(path)
        raise RuleError(_at(name, item), key, f"{where}: {bad.reason}") from None
    return out


READERS = {"local_networks": _local_networks,
           "routers": lambda name, key, node: _addresses(name, key, node, _router),
           "dhcp_servers": lambda name, key, node: _addresses(name, key, node, _dhcp_server),
           "bindings": _bindings,
           "dynamic_pools": _dynamic_pools}


def load_site(path) -> Site:
    """The site file at `path`, checked (a RuleError of one line for anything wrong); EMPTY for None."""
    if path is None:
        return EMPTY
    name = str(path)
    try:
        text = _read(Path(path), MAX_SITE_FILE_BYTES, "a site file")
    except _Bad as bad:
        raise RuleError(name, None, bad.reason) from None
    root = _compose(name, text)
    if root is None:
        return Site(path=name, keys_given=frozenset())
    if not isinstance(root, yaml.MappingNode):
        raise RuleError(_at(name, root), None, "a site file holds one mapping (local_networks: ..., routers: ...); "
                                               "detector site-template prints an example")
    nodes: dict[str, tuple] = {}
    for key_node, value_node in root.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if key not in KEYS:
            raise RuleError(_at(name, key_node), None,
                            f"unknown key{did_you_mean(key, KEYS)} (known: {', '.join(KEYS)})")
        if key in nodes:
            raise RuleError(_at(name, key_node), key, f"given twice (first on line {nodes[key][0]})")
        nodes[key] = (key_node.start_mark.line + 1, value_node)
    values = {key: READERS[key](name, key, node) for key, (_, node) in nodes.items()}
    return Site(path=name, keys_given=frozenset(nodes), **values)


# What `detector site-template` prints: every key and every bindings format, loadable as it is (the file
# references are commented out: their example files are shown below them).
SITE_TEMPLATE = """\
# detector site file: what this network is, for the rules that judge traffic by it.
# Use it as `detector analyze CAPTURE -o DIR --site site.yaml`, with watch, or detector.open(..., site=...).
# Every key is optional; `detector explain RULE` says what a rule does with and without it.
# Values are read as written (never evaluated); a mistake is reported as FILE:LINE: key '...': what is wrong.

# The site's own networks (CIDR, IPv4 or IPv6). Traffic from elsewhere is "outside".
local_networks:
  - 10.0.0.0/8
  - 192.168.0.0/16
  - 2001:db8::/32
  - fe80::/10

# Allowed routing speakers (RIP, OSPF, VRRP) and IPv6 router-advertisement senders: IPs or MACs.
routers:
  - 10.0.0.1
  - fe80::1
  - "00:00:5e:00:01:0a"          # a VRRP virtual MAC (quote MACs: YAML reads some as numbers otherwise)

# DHCP servers allowed to answer (DHCPv4 and DHCPv6): IPs, MACs, or DHCPv6 server DUIDs in hex.
dhcp_servers:
  - 10.0.0.2
  - "52:54:00:12:34:56"
  - "00:01:00:01:2a:3b:4c:5d:52:54:00:12:34:56"    # a DUID-LLT (RFC 8415 sec. 11.2)

# Address ranges handed to hosts without a binding: IPv4, FIRST-LAST, as many as needed.
dynamic_pools:
  - 10.160.0.1-10.160.0.100

# The IP-MAC registry: entries written here, and files of them (a relative path is read from the
# folder of this file). vlan (1-4094) is optional: without it a binding holds in every VLAN; on a
# file it applies to the rows that give none.
bindings:
  - {mac: "02:00:00:00:00:01", ip: 10.0.0.10}
  - {mac: "02:00:00:00:00:02", ip: 10.0.0.11, vlan: 20}
  - {mac: "02:00:00:00:00:03", ip: "2001:db8::11"}
  # - {file: ethers}                           # format from the name: ethers or *.ethers,
  # - {file: dhcpd.conf}                       #   a name with dhcpd in it, *.csv;
  # - {file: bindings.csv, vlan: 20}           #   else say format: ethers, dhcpd or csv
  # - {file: /etc/hosts-by-mac, format: ethers}
#
# ---- ethers: ethers(5), one "MAC IP" a line (addresses only: detector resolves no host names)
#   02:00:00:00:00:04  10.0.0.12    # printer
#   2:0:0:0:0:5        10.0.0.13
#
# ---- dhcpd.conf: ISC dhcpd host blocks, also inside group, subnet and shared-network blocks
#   group {
#     host printer2 { hardware ethernet 02:00:00:00:00:06; fixed-address 10.0.0.14; }
#     host server { hardware ethernet 02:00:00:00:00:07; fixed-address 10.0.0.15, 10.0.0.16; }
#   }
#
# ---- bindings.csv: mac,ip[,vlan], the header row optional
#   mac,ip,vlan
#   02:00:00:00:00:08,10.0.0.17,30
#   02:00:00:00:00:09,10.0.0.18,
"""
