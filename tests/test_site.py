"""The site file (--site): every bindings format from bytes written here, each mistake as one line naming file,
line and key, the lookups against ipaddress, the template, and what it changes for rip-trigger on crafted frames
through analyze, the notebook API and a watch's window."""
from __future__ import annotations

import copy
import ipaddress
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scapy.all import IP, UDP, Ether, wrpcap
from scapy.layers.rip import RIP, RIPEntry

import detector
import detector.site as site_module
from detector.cli import main
from detector.commands import analyze
from detector.decode import decode
from detector.detect.columns import ip_halves
from detector.detectors import REGISTRY, DetectorSet, active_detectors
from detector.errors import RuleError
from detector.ingest import open_capture
from detector.live.window import SlidingWindow
from detector.rules import explain_text, load_rules
from detector.site import EMPTY, SITE_TEMPLATE, Binding, Site, load_site, parse_mac
from tests._rules import rows

T0 = 1_767_225_600


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def pairs(site: Site) -> list[tuple[str, str, int | None, str]]:
    """(MAC, IP, VLAN, source without its folder) of each binding."""
    return [(f"{b.mac:012x}", b.ip, b.vlan, Path(b.source).name) for b in site.bindings]


# ---- the formats -----------------------------------------------------------------

def test_inline_entries_keep_what_was_written(tmp_path):
    path = write(tmp_path, "site.yaml", (
        "# a site\n"
        "bindings:\n"
        "  - {mac: 10:20:30:40:50:59, ip: 10.0.0.5}\n"          # YAML 1.1 would read the MAC as a base-60 number
        "  - mac: 0200.0000.00AB\n"
        "    ip: ::ffff:10.0.0.6\n"                             # IPv4-mapped: the IPv4 address it maps
        "    vlan: 20\n"
        "  - {mac: 02-00-00-00-00-ac, ip: 2001:DB8:0:0::1}\n"))
    site = load_site(path)
    assert pairs(site) == [("102030405059", "10.0.0.5", None, "site.yaml:3"),
                           ("0200000000ab", "10.0.0.6", 20, "site.yaml:4"),
                           ("0200000000ac", "2001:db8::1", None, "site.yaml:7")]
    assert site.given("bindings") and not site.given("routers") and site.path == str(path)


def test_ethers_file_with_comments(tmp_path):
    write(tmp_path, "conf/hosts.ethers", (
        b"# /etc/ethers of the lab\r\n"
        b"\r\n"
        b"02:00:00:00:00:01\t10.0.0.1   # gateway\r\n"
        b"  2:0:0:0:0:A2 10.0.0.2\r\n"
        b"02:00:00:00:00:03 2001:db8::3\r\n"
        b"#02:00:00:00:00:04 10.0.0.4\r\n"))
    write(tmp_path, "conf/ethers", "02:00:00:00:00:05 10.0.0.5\n")
    path = write(tmp_path, "conf/site.yaml", "bindings:\n  - hosts.ethers\n  - {file: ethers, vlan: 7}\n")
    site = load_site(path)
    assert pairs(site) == [("020000000001", "10.0.0.1", None, "hosts.ethers:3"),
                           ("0200000000a2", "10.0.0.2", None, "hosts.ethers:4"),
                           ("020000000003", "2001:db8::3", None, "hosts.ethers:5"),
                           ("020000000005", "10.0.0.5", 7, "ethers:1")]
    # relative paths are read from the site file's folder, and the source names the file as it was read
    assert site.bindings[0].source == f"{tmp_path / 'conf' / 'hosts.ethers'}:3"


DHCPD_CONF = """\
# dhcpd.conf of the campus { not a block; host in a comment
option domain-name "example.org";
option host-name "host";
shared-network campus {
  subnet 10.0.0.0 netmask 255.255.255.0 {
    range 10.0.0.100 10.0.0.200;
    group {
      host alpha { hardware ethernet 02:00:00:00:00:0a; fixed-address 10.0.0.10; }
      host "beta.example.org" {
        # a comment with } and ; and {
        hardware ethernet 2:0:0:0:0:B;
        fixed-address 10.0.0.11, 10.0.0.12;
        option routers 10.0.0.1;
      }
    }
  }
}
host gamma {
  hardware ethernet 02:00:00:00:00:0c;
  fixed-address6 2001:db8::c;
}
host delta {
  hardware ethernet 02:00:00:00:00:0d;
  if option vendor-class-identifier = "pxe" { fixed-address 10.0.0.99; }
  fixed-address 10.0.0.13;
}
host known-dynamic { hardware ethernet 02:00:00:00:00:0e; }
host by-client-id { option dhcp-client-identifier "x"; fixed-address 10.0.0.14; }
host ring { hardware token-ring 02:00:00:00:00:0f; fixed-address 10.0.0.15; }
"""


def test_dhcpd_host_blocks_at_any_depth(tmp_path):
    write(tmp_path, "dhcpd.conf", DHCPD_CONF)
    site = load_site(write(tmp_path, "site.yaml", "bindings: [{file: dhcpd.conf}]\n"))
    # hosts without both a MAC and a fixed address bind nothing; a nested block's statements are not the host's
    assert pairs(site) == [("02000000000a", "10.0.0.10", None, "dhcpd.conf:8"),
                           ("02000000000b", "10.0.0.11", None, "dhcpd.conf:9"),
                           ("02000000000b", "10.0.0.12", None, "dhcpd.conf:9"),
                           ("02000000000c", "2001:db8::c", None, "dhcpd.conf:18"),
                           ("02000000000d", "10.0.0.13", None, "dhcpd.conf:22")]


def test_csv_with_and_without_vlan(tmp_path):
    write(tmp_path, "with.csv", (
        "mac,ip,vlan\n"
        "02:00:00:00:00:21,10.0.1.1,10\n"
        '"02:00:00:00:00:22", 10.0.1.2 ,\n'
        "# a comment row\n"
        "\n"
        "02-00-00-00-00-23,2001:db8::23,4094\n"))
    write(tmp_path, "registry.txt", "\ufeff0200.0000.0024,10.0.1.4\r\n02:00:00:00:00:25,10.0.1.5\r\n")
    site = load_site(write(tmp_path, "site.yaml", (
        "bindings:\n"
        "  - {file: with.csv, vlan: 7}\n"
        "  - {file: registry.txt, format: csv}\n")))
    assert pairs(site) == [("020000000021", "10.0.1.1", 10, "with.csv:2"),
                           ("020000000022", "10.0.1.2", 7, "with.csv:3"),
                           ("020000000023", "2001:db8::23", 4094, "with.csv:6"),
                           ("020000000024", "10.0.1.4", None, "registry.txt:1"),
                           ("020000000025", "10.0.1.5", None, "registry.txt:2")]


def test_every_key(tmp_path):
    site = load_site(write(tmp_path, "site.yaml", (
        "local_networks: [10.0.0.0/8, 192.168.1.77/24, '2001:db8::/32', 10.0.0.0/8]\n"
        "routers: [10.0.0.1, 'FE80::1', 00-00-5E-00-01-0A]\n"
        "dhcp_servers: [10.0.0.2, '52:54:00:12:34:56', '00:01:00:01:2A:3B:4C:5D:52:54:00:12:34:56', 0003000152540012]\n"
        "dynamic_pools: [10.160.0.1-10.160.0.100, ' 10.170.0.5 - 10.170.0.5 ']\n"
        "bindings: []\n")))
    assert site.local_networks == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.168.1.0/24"),
                                   ipaddress.ip_network("2001:db8::/32"))
    assert site.routers == {"10.0.0.1", "fe80::1", "00:00:5e:00:01:0a"}
    assert site.dhcp_servers == {"10.0.0.2", "52:54:00:12:34:56", "000100012a3b4c5d525400123456", "0003000152540012"}
    assert site.dynamic_pools == ((ipaddress.IPv4Address("10.160.0.1"), ipaddress.IPv4Address("10.160.0.100")),
                                  (ipaddress.IPv4Address("10.170.0.5"), ipaddress.IPv4Address("10.170.0.5")))
    # an empty list is given: it says "none"
    assert all(site.given(key) for key in site_module.KEYS) and site.bindings == ()
    with pytest.raises(ValueError, match="unknown site key 'router'"):
        site.given("router")
    empty = load_site(write(tmp_path, "empty.yaml", "# nothing set yet\n"))
    assert not any(empty.given(key) for key in site_module.KEYS) and empty.path == str(tmp_path / "empty.yaml")
    assert load_site(None) is EMPTY and not EMPTY.given("local_networks")


# ---- mistakes --------------------------------------------------------------------

BAD_SITES = [
    ("bad CIDR", "local_networks:\n  - 10.0.0.0/8\n  - 10.0.0.0/33\n", {}, 3, "local_networks",
     "not a network in CIDR notation"),
    ("zone index", "local_networks: ['fe80::/10%eth0']\n", {}, 1, "local_networks", "not a network in CIDR notation"),
    ("bad MAC of a router", "routers:\n  - 02:00:00:00:00\n", {}, 2, "routers",
     "neither an IP address nor a MAC address"),
    ("multicast MAC", "routers: ['01:00:5e:00:00:01']\n", {}, 1, "routers", "01:00:5e:00:00:01 is a multicast MAC"),
    ("multicast IP", "routers: [224.0.0.9]\n", {}, 1, "routers", "224.0.0.9 is a multicast address"),
    ("bad MAC of a binding", "bindings:\n  - mac: 02:00:00:00:00:zz\n    ip: 10.0.0.1\n", {}, 2, "bindings",
     "not a MAC address (aa:bb:cc:dd:ee:ff)"),
    ("binding without ip", "bindings:\n  - {mac: '02:00:00:00:00:01'}\n", {}, 2, "bindings", "an entry without ip"),
    ("bad VLAN", "bindings:\n  - {mac: '02:00:00:00:00:01', ip: 10.0.0.1, vlan: 4095}\n", {}, 2, "bindings",
     "not a VLAN id (1-4094)"),
    ("pool first above last", "dynamic_pools:\n  - 10.160.0.100-10.160.0.1\n", {}, 2, "dynamic_pools",
     "the first address 10.160.0.100 is above the last 10.160.0.1"),
    ("IPv6 pool", "dynamic_pools: ['2001:db8::1-2001:db8::9']\n", {}, 1, "dynamic_pools",
     "the first address is not an IPv4 address (pools are IPv4 ranges"),
    ("short DUID", "dhcp_servers: ['00:01']\n", {}, 1, "dhcp_servers", "a DUID of 2 bytes"),
    ("unknown key", "local_networks: []\nrouter: [10.0.0.1]\n", {}, 2, None,
     "unknown key (did you mean 'routers'?) (known: local_networks, routers, dhcp_servers, bindings, dynamic_pools)"),
    ("key twice", "routers: []\nrouters: [10.0.0.1]\n", {}, 2, "routers", "given twice (first on line 1)"),
    ("not a list", "routers: 10.0.0.1\n", {}, 1, "routers", "must be a list"),
    ("a list in a list", "routers:\n  - [10.0.0.1]\n", {}, 2, "routers", "expected one value here"),
    ("a file without a name", "bindings:\n  - {file: }\n", {}, 2, "bindings", "expected one value here"),
    ("null", "routers:\n", {}, 1, "routers", "must be a list"),
    ("too deep", "routers: [[[[[[[[[1]]]]]]]]]\n", {}, 1, None, "nested more than 8 levels deep"),
    ("not YAML", "routers: [10.0.0.1\n", {}, 2, None, "not valid YAML"),
    ("not a mapping", "- 10.0.0.0/8\n", {}, 1, None, "a site file holds one mapping"),
    ("missing bindings file", "bindings:\n  - {file: absent.ethers}\n", {}, 2, "bindings",
     "absent.ethers: no such file"),
    ("garbage in ethers", "bindings:\n  - {file: hosts.ethers}\n",
     {"hosts.ethers": "02:00:00:00:00:01 10.0.0.1\n# fine\nthis line is garbage\n"}, 2, "bindings",
     "hosts.ethers:3: expected 'MAC IP', found 4 fields"),
    ("host name in ethers", "bindings: [{file: ethers}]\n", {"ethers": "02:00:00:00:00:01 printer.lab\n"}, 1,
     "bindings", "ethers:1: not an IP address; detector resolves no host names"),
    ("host name in dhcpd", "bindings: [{file: dhcpd.conf}]\n",
     {"dhcpd.conf": "host p {\n  hardware ethernet 02:00:00:00:00:01;\n  fixed-address printer.lab;\n}\n"}, 1,
     "bindings", "dhcpd.conf:3: not an IP address"),
    ("unclosed dhcpd host", "bindings: [{file: dhcpd.conf}]\n",
     {"dhcpd.conf": "\nhost p { hardware ethernet 02:00:00:00:00:01;\n"}, 1, "bindings",
     "dhcpd.conf:2: a host whose '{' is never closed"),
    ("fixed-address of the other family", "bindings: [{file: dhcpd.conf}]\n",
     {"dhcpd.conf": "host p { hardware ethernet 02:00:00:00:00:01; fixed-address6 10.0.0.1; }\n"}, 1, "bindings",
     "dhcpd.conf:1: fixed-address6 10.0.0.1: an IPv4 address"),
    ("CSV header", "bindings: [{file: b.csv}]\n", {"b.csv": "mac,vlan,ip\n"}, 1, "bindings",
     "b.csv:1: a header row names the columns mac,ip[,vlan], in that order"),
    ("CSV fields", "bindings: [{file: b.csv}]\n", {"b.csv": "02:00:00:00:00:01,10.0.0.1\n02:00:00:00:00:02\n"}, 1,
     "bindings", "b.csv:2: expected mac,ip[,vlan], found 1 field"),
    ("unknown format", "bindings: [{file: hosts.txt}]\n", {"hosts.txt": ""}, 1, "bindings",
     "the name does not tell the format; add format: ethers, dhcpd, csv"),
    ("bad format", "bindings:\n  - file: hosts.txt\n    format: yaml\n", {"hosts.txt": ""}, 3, "bindings",
     "unknown format (known: ethers, dhcpd, csv)"),
    ("not UTF-8", "bindings: [{file: ethers}]\n", {"ethers": b"02:00:00:00:00:01 10.0.0.1 \xff\n"}, 1, "bindings",
     "ethers: not UTF-8 text"),
    ("entry key", "bindings:\n  - {mac: '02:00:00:00:00:01', ip: 10.0.0.1, vlna: 3}\n", {}, 2, "bindings",
     "unknown key in an entry (did you mean 'vlan'?)"),
]


@pytest.mark.parametrize("text, files, line, key, reason", [case[1:] for case in BAD_SITES],
                         ids=[case[0] for case in BAD_SITES])
def test_each_mistake_is_one_line_naming_file_line_and_key(tmp_path, text, files, line, key, reason):
    for name, content in files.items():
        write(tmp_path, name, content)
    path = write(tmp_path, "site.yaml", text)
    with pytest.raises(RuleError) as info:
        load_site(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: " + (f"key '{key}': " if key else "")), message
    assert reason in message, message


def test_file_mistakes_and_bounds(tmp_path, monkeypatch):
    with pytest.raises(RuleError, match=r"absent\.yaml: no such file$"):
        load_site(tmp_path / "absent.yaml")
    with pytest.raises(RuleError, match="is a folder, not a file"):
        load_site(tmp_path)
    with pytest.raises(RuleError, match=r"site\.yaml: not UTF-8 text \(byte 9\)"):
        load_site(write(tmp_path, "site.yaml", b"routers: \xff\n"))
    monkeypatch.setattr(site_module, "MAX_SITE_FILE_BYTES", 64)
    with pytest.raises(RuleError, match=r"larger than a site file can be \(64 bytes\)"):
        load_site(write(tmp_path, "site.yaml", "routers: [" + "10.0.0.1, " * 10 + "]\n"))
    monkeypatch.setattr(site_module, "MAX_ITEMS", 3)
    with pytest.raises(RuleError, match=r"site\.yaml:1: key 'routers': 4 items, more than the 3 allowed"):
        load_site(write(tmp_path, "site.yaml", "routers: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4]\n"))
    write(tmp_path, "ethers", "".join(f"02:00:00:00:00:0{i} 10.0.0.{i}\n" for i in range(1, 4)))
    path = write(tmp_path, "site.yaml", "bindings: [ethers, {file: ethers, vlan: 2}]\n")
    monkeypatch.setattr(site_module, "MAX_BINDINGS", 6)
    assert len(load_site(path).bindings) == 6
    monkeypatch.setattr(site_module, "MAX_BINDINGS", 5)
    with pytest.raises(RuleError, match=r"site\.yaml:1: key 'bindings': more than 5 bindings"):
        load_site(path)
    monkeypatch.setattr(site_module, "MAX_BINDINGS_FILE_BYTES", 20)
    with pytest.raises(RuleError, match=r"ethers: larger than a bindings file can be \(20 bytes\)"):
        load_site(write(tmp_path, "site.yaml", "bindings: [ethers]\n"))


def test_nesting_that_crashes_the_yaml_composer_is_refused_first(tmp_path):
    # libyaml's composer recurses once per level: 100,000 levels kill the process, not just the load
    path = write(tmp_path, "site.yaml", "routers: " + "[" * 100_000 + "]" * 100_000 + "\n")
    probe = f"from detector.site import load_site\ntry:\n    load_site({str(path)!r})\nexcept Exception as e:\n" \
            f"    print(e)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    assert done.stdout.strip() == f"{path}:1: nested more than 8 levels deep; a site file needs 3"


# ---- lookups -------------------------------------------------------------------------

NETWORKS = ["10.0.0.0/8", "10.1.0.0/16", "192.168.1.128/25", "203.0.113.7/32", "2001:db8::/32",
            "2001:db8:0:1::/64", "fe80::/10", "::1/128", "2001:db8:ffff:ffff:ffff:ffff:ffff:fff0/124"]


def _near_edges(networks) -> list[str]:
    rng = random.Random(11)
    out = []
    for net in map(ipaddress.ip_network, networks):
        for value in (int(net.network_address), int(net.broadcast_address)):
            for step in (-1, 0, 1):
                if 0 <= value + step < 2 ** net.max_prefixlen:
                    out.append(str(ipaddress.ip_address(value + step) if net.version == 6
                                   else ipaddress.IPv4Address(value + step)))
    out += [str(ipaddress.IPv4Address(rng.getrandbits(32))) for _ in range(200)]
    out += [str(ipaddress.IPv6Address((0x20010DB8 << 96) | rng.getrandbits(96 + 4 * rng.randrange(2))))
            for _ in range(200)]
    return out


def _columns(addresses):
    halves = [ip_halves(a) for a in addresses]
    return (np.array([h for h, _ in halves], dtype=np.uint64), np.array([lo for _, lo in halves], dtype=np.uint64))


def test_local_networks_and_pools_match_ipaddress_one_by_one_and_as_columns(tmp_path):
    site = load_site(write(tmp_path, "site.yaml", (
        f"local_networks: {json.dumps(NETWORKS)}\n"
        "dynamic_pools: [10.160.0.1-10.160.0.100, 10.160.0.50-10.160.1.0, 198.51.100.9-198.51.100.9]\n")))
    addresses = _near_edges(NETWORKS) + _near_edges(["10.160.0.1/32", "10.160.1.0/32", "198.51.100.9/32"])
    networks = [ipaddress.ip_network(n) for n in NETWORKS]
    expected = [any(ipaddress.ip_address(a) in n for n in networks if n.version == ipaddress.ip_address(a).version)
                for a in addresses]
    assert [site.is_local(a) for a in addresses] == expected
    assert site.local_mask(*_columns(addresses)).tolist() == expected
    assert site.is_local(ipaddress.ip_address("::ffff:10.9.9.9")) and not site.is_local("11.0.0.0")
    pooled = [ipaddress.ip_address(a).version == 4 and (
        ipaddress.IPv4Address("10.160.0.1") <= ipaddress.ip_address(a) <= ipaddress.IPv4Address("10.160.1.0")
        or a == "198.51.100.9") for a in addresses]
    assert [site.in_pool(a) for a in addresses] == pooled
    assert site.pool_mask(*_columns(addresses)).tolist() == pooled
    assert EMPTY.local_mask(*_columns(addresses)).tolist() == [False] * len(addresses)
    assert site.local_mask(np.zeros(0, np.uint64), np.zeros(0, np.uint64)).tolist() == []


def test_routers_servers_and_bindings(tmp_path):
    site = load_site(write(tmp_path, "site.yaml", (
        "routers: [10.0.0.1, 'fe80::1', '00:00:5e:00:01:0a']\n"
        "dhcp_servers: [10.0.0.2, '52:54:00:12:34:56', '000100012a3b4c5d525400123456']\n"
        "bindings:\n"
        "  - {mac: '02:00:00:00:00:01', ip: 10.0.0.10}\n"
        "  - {mac: '02:00:00:00:00:02', ip: 10.0.0.10, vlan: 20}\n"
        "  - {mac: '02:00:00:00:00:01', ip: 10.0.0.11, vlan: 30}\n")))
    assert site.is_router(ip="10.0.0.1") and site.is_router(ip="FE80:0::1") and site.is_router(mac=0x00005E00010A)
    assert site.is_router(mac="00-00-5e-00-01-0a") and site.is_router(ip="10.0.0.9", mac="00:00:5e:00:01:0a")
    assert not site.is_router(ip="10.0.0.2") and not site.is_router(mac="00:00:5e:00:01:0b") and not site.is_router()
    assert site.is_dhcp_server(ip="::ffff:10.0.0.2") and site.is_dhcp_server(mac=0x525400123456)
    assert site.is_dhcp_server(duid=bytes.fromhex("000100012a3b4c5d525400123456"))
    assert site.is_dhcp_server(duid="00:01:00:01:2A:3B:4C:5D:52:54:00:12:34:56")
    assert not site.is_dhcp_server(ip="10.0.0.1") and not site.is_dhcp_server(duid=b"\x00\x01")
    hi, lo = _columns(["10.0.0.1", "10.0.0.2", "fe80::1", "fe80::2"])
    assert site.router_ip_mask(hi, lo).tolist() == [True, False, True, False]
    assert site.dhcp_server_ip_mask(hi, lo).tolist() == [False, True, False, False]
    macs = np.array([0x00005E00010A, 0x525400123456, 1], dtype=np.uint64)
    assert site.router_mac_mask(macs).tolist() == [True, False, False]
    assert site.dhcp_server_mac_mask(macs).tolist() == [False, True, False]
    # a binding without a VLAN holds in every VLAN; one with a VLAN only there
    assert site.macs_for_ip("10.0.0.10") == {0x020000000001, 0x020000000002}
    assert site.macs_for_ip("10.0.0.10", vlan=20) == {0x020000000001, 0x020000000002}
    assert site.macs_for_ip("10.0.0.10", vlan=21) == {0x020000000001}
    assert site.macs_for_ip("10.0.0.99") == frozenset()
    assert site.ips_for_mac("02:00:00:00:00:01") == {"10.0.0.10", "10.0.0.11"}
    assert site.ips_for_mac(0x020000000001, vlan=20) == {"10.0.0.10"}
    with pytest.raises(ValueError, match="'02:00:00:00:01' is not a MAC address"):
        site.ips_for_mac("02:00:00:00:01")
    columns = site.binding_columns()
    assert columns["mac"].tolist() == [0x020000000001, 0x020000000002, 0x020000000001]
    assert (columns["ip_hi"].tolist(), columns["ip_lo"].tolist()) == tuple(map(list, _columns(
        ["10.0.0.10", "10.0.0.10", "10.0.0.11"])))
    assert columns["vlan"].tolist() == [site_module.NO_VLAN, 20, 30]
    assert parse_mac("aabb.ccdd.eeff") == 0xAABBCCDDEEFF and parse_mac("aa:bb:cc:dd:ee") is None
    assert parse_mac("0x:bb:cc:dd:ee:ff") is None and parse_mac("+a:bb:cc:dd:ee:ff") is None


def test_a_site_is_shared_not_copied_and_states_of_different_sites_never_merge(tmp_path):
    path = write(tmp_path, "site.yaml", "local_networks: [198.18.0.0/15]\n")
    site, again = load_site(path), load_site(path)
    assert copy.deepcopy(site) is site and site == again and site != EMPTY
    assert repr(site) == f"Site({str(path)!r}: local_networks 1)"
    rules = load_rules()
    cls = REGISTRY["rip-trigger"]
    cls(rules["rip-trigger"], site).merge(cls(rules["rip-trigger"], again))
    with pytest.raises(ValueError, match="different site files"):
        cls(rules["rip-trigger"], site).merge(cls(rules["rip-trigger"]))
    with pytest.raises(ValueError, match="different site files"):
        DetectorSet(active_detectors(rules, site), site).merge(DetectorSet(active_detectors(rules)))
    assert all(det.site is site for det in active_detectors(rules, site))
    assert all(det.site is EMPTY for det in active_detectors(rules))
    assert Site(routers=frozenset({"10.0.0.1"})).given("routers")
    assert Binding(1, "10.0.0.1", None, "x:1") == Binding(1, "10.0.0.1", None, "x:1")


# ---- the template and the command line ------------------------------------------------

def _template_examples(template: str) -> dict[str, str]:
    """The example bindings files the template shows under '# ---- NAME: ...' headings."""
    files: dict[str, list[str]] = {}
    current = None
    for line in template.splitlines():
        if line.startswith("# ---- "):
            current = line[len("# ---- "):].split(":")[0]
            files[current] = []
        elif current and line.startswith("#   "):
            files[current].append(line[len("#   "):])
    return {name: "\n".join(lines) + "\n" for name, lines in files.items()}


def test_site_template_loads_as_it_is_and_with_its_example_files(tmp_path, capsys):
    assert main(["site-template"]) == 0
    printed = capsys.readouterr().out
    assert printed == SITE_TEMPLATE
    site = load_site(write(tmp_path, "as-is/site.yaml", printed))
    assert all(site.given(key) for key in site_module.KEYS)
    assert site.is_local("10.1.2.3") and site.is_router(mac="00:00:5e:00:01:0a") and site.in_pool("10.160.0.7")
    assert len(site.bindings) == 3
    # the file references, uncommented, with the example files the template shows: every format parses
    examples = _template_examples(printed)
    assert set(examples) == {"ethers", "dhcpd.conf", "bindings.csv"}
    for name, text in examples.items():
        write(tmp_path, f"full/{name}", text)
    write(tmp_path, "full/hosts-by-mac", examples["ethers"].replace("10.0.0.1", "10.0.1.1"))
    full = printed.replace("  # - {file: /etc/hosts-by-mac", f"  - {{file: {tmp_path / 'full' / 'hosts-by-mac'}")
    full = full.replace("  # - {file:", "  - {file:")
    site = load_site(write(tmp_path, "full/site.yaml", full))
    assert {(b.ip, b.vlan) for b in site.bindings} >= {
        ("10.0.0.12", None), ("10.0.0.13", None), ("10.0.0.14", None), ("10.0.0.15", None), ("10.0.0.16", None),
        ("10.0.0.17", 30), ("10.0.0.18", 20), ("10.0.1.12", None)}
    assert len(site.bindings) == 3 + 2 + 3 + 2 + 2


def test_help_and_explain_say_what_the_site_file_is(capsys):
    for command in ("analyze", "watch"):
        with pytest.raises(SystemExit):
            main([command, "-h"])
        assert "--site FILE" in capsys.readouterr().out
    rules = load_rules()
    rip = explain_text(rules["rip-trigger"])
    site_section = rip.split("\nSite file (--site)\n", 1)[1].split("\n\n", 1)[0]
    assert "local_networks parameter is" in site_section and "not used" in site_section
    assert "Not read" in explain_text(rules["echo-loop"]).split("\nSite file (--site)\n", 1)[1]


def test_a_rule_files_site_text_is_checked_and_laid_over(tmp_path):
    write(tmp_path / "rules", "rip.yaml", "id: rip-trigger\nsite: Reads local_networks only.\n")
    assert load_rules(tmp_path / "rules")["rip-trigger"].site == "Reads local_networks only."
    write(tmp_path / "bad", "rip.yaml", "id: rip-trigger\nsite: [local_networks]\n")
    with pytest.raises(RuleError, match=r"rip\.yaml: key 'site': must be a non-empty string"):
        load_rules(tmp_path / "bad")


# ---- rip-trigger: the site's local networks before the rule's parameter -------------------

@pytest.fixture
def rip_requests(tmp_path):
    """Two well-formed unicast RIP requests: from 198.18.7.7 (outside the parameter's default networks) and
    from 10.0.0.5 (inside them)."""
    packets = []
    for i, src in enumerate(("198.18.7.7", "10.0.0.5")):
        packet = (Ether(src=f"02:00:00:00:00:0{i + 1}", dst="02:00:00:00:00:09") / IP(src=src, dst="192.0.2.1") /
                  UDP(sport=520, dport=520) / RIP(cmd=1, version=2) /
                  RIPEntry(AF=0, addr="0.0.0.0", mask="0.0.0.0", metric=16))
        packet.time = T0 + i
        packets.append(packet)
    path = tmp_path / "requests.pcap"
    wrpcap(str(path), packets)
    return path


def verdicts(findings) -> dict[str, tuple[str, bool]]:
    return {f.src_ip: (f.severity, f.evidence["source_local"]) for f in findings if f.rule == "rip-trigger"}


PARAMETER_DECIDES = {"198.18.7.7": ("medium", False), "10.0.0.5": ("info", True)}


def test_site_local_networks_take_precedence_over_the_parameter(rip_requests, tmp_path):
    assert verdicts(analyze([rip_requests], tmp_path / "none", report=False)[0]) == PARAMETER_DECIDES
    # the site's networks replace the parameter's: 198.18.7.7 becomes local, 10.0.0.5 outside
    site = write(tmp_path, "site.yaml", "local_networks: [198.18.0.0/15]\n")
    assert verdicts(analyze([rip_requests], tmp_path / "site", report=False, site_file=site)[0]) == {
        "198.18.7.7": ("info", True), "10.0.0.5": ("medium", False)}
    # a site file without local_networks leaves the parameter to decide
    routers_only = write(tmp_path, "routers.yaml", "routers: [10.0.0.1]\n")
    assert verdicts(analyze([rip_requests], tmp_path / "routers", report=False,
                            site_file=routers_only)[0]) == PARAMETER_DECIDES
    # a rule file's networks are the fallback only: the site's win over them too
    rules = tmp_path / "rules"
    write(rules, "rip.yaml", "id: rip-trigger\nparams:\n  local_networks: [198.18.0.0/15, 10.0.0.0/8]\n")
    assert verdicts(analyze([rip_requests], tmp_path / "rules-only", report=False, rules_dir=rules)[0]) == {
        "198.18.7.7": ("info", True), "10.0.0.5": ("info", True)}
    elsewhere = write(tmp_path, "elsewhere.yaml", "local_networks: ['192.0.2.0/24', '2001:db8::/32']\n")
    assert verdicts(analyze([rip_requests], tmp_path / "both", report=False, rules_dir=rules,
                            site_file=elsewhere)[0]) == {"198.18.7.7": ("medium", False), "10.0.0.5": ("medium", False)}


def test_cli_analyze_site_and_the_notebook_api_agree(rip_requests, tmp_path):
    site = write(tmp_path, "site.yaml", "local_networks: [198.18.0.0/15]\n")
    done = subprocess.run([sys.executable, "-m", "detector", "analyze", str(rip_requests), "-o", str(tmp_path / "out"),
                           "--no-report", "--site", str(site)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cli = [(f["rule"], f["severity"], f["src_ip"], f["msg"])
           for f in json.loads((tmp_path / "out" / "findings.json").read_text())["findings"]]
    assert {(src, severity) for _, severity, src, _ in cli} == {("198.18.7.7", "info"), ("10.0.0.5", "medium")}
    for given in (site, load_site(site)):
        frame = detector.open(rip_requests, site=given).findings
        assert list(zip(frame["rule"], frame["severity"], frame["src_ip"], frame["msg"])) == cli
    assert detector.open(rip_requests).site is EMPTY
    with pytest.raises(RuleError, match=r"site\.yaml:1: key 'local_networks'"):
        detector.open(rip_requests, site=write(tmp_path, "site.yaml", "local_networks: [nonsense]\n"))


def test_cli_bad_site_file_is_one_line_and_exit_2(rip_requests, tmp_path):
    site = write(tmp_path, "site.yaml", "routers: [10.0.0.1]\nbindings:\n  - {file: hosts.ethers}\n")
    write(tmp_path, "hosts.ethers", "02:00:00:00:00:01 10.0.0.1\n\n02:00:00:00:00:02 10.0.0.2 extra\n")
    done = subprocess.run([sys.executable, "-m", "detector", "analyze", str(rip_requests), "-o", str(tmp_path / "out"),
                           "--site", str(site)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"detector: error: {site}:3: key 'bindings': {tmp_path / 'hosts.ethers'}:3: "
                                        "expected 'MAC IP', found 3 fields"]
    assert not (tmp_path / "out").exists()


# a shadow(5) line, as a bindings or site file named by mistake: its hash must never reach stderr
SHADOW = "root:$6$Qy7rT2sa$Wq1bC0ffeeHashThatMustNotLeak9xZ:19700:0:99999:7:::\ndaemon:*:19700:0:99999:7:::\n"


@pytest.mark.parametrize("entry, line, reason", [
    ("{file: shadow, format: ethers}", 1, "expected 'MAC IP', found 1 field"),
    ("{file: shadow, format: csv}", 1, "expected mac,ip[,vlan], found 1 field"),
    ("{file: shadow.dhcpd, format: dhcpd}", 2, "not a MAC address (aa:bb:cc:dd:ee:ff)"),
    ("{file: shadow, format: $6$Qy7rT2sa}", None, "unknown format (known: ethers, dhcpd, csv)"),
])
def test_a_password_file_as_bindings_is_named_never_shown(rip_requests, tmp_path, entry, line, reason):
    write(tmp_path, "shadow", SHADOW)
    write(tmp_path, "shadow.dhcpd", "host root {\n  hardware ethernet $6$Qy7rT2sa$Wq1bC0ffeeHash;\n}\n")
    site = write(tmp_path, "site.yaml", f"bindings:\n  - {entry}\n")
    done = subprocess.run([sys.executable, "-m", "detector", "analyze", str(rip_requests), "-o", str(tmp_path / "out"),
                           "--site", str(site)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    where = f"{tmp_path / entry[7:].split(',')[0]}:{line}: " if line else ""
    assert done.stderr.splitlines() == [f"detector: error: {site}:2: key 'bindings': {where}{reason}"]
    assert "$6$" not in done.stderr and "Qy7rT2sa" not in done.stderr


def test_a_loop_of_symbolic_links_is_said_as_one(tmp_path):
    # Path.exists() is False for a loop as for a missing file: the error says which, as ls does
    (tmp_path / "a.ethers").symlink_to(tmp_path / "b.ethers")
    (tmp_path / "b.ethers").symlink_to(tmp_path / "a.ethers")
    with pytest.raises(RuleError) as info:
        load_site(write(tmp_path, "site.yaml", "bindings: [{file: a.ethers}]\n"))
    assert str(info.value) == f"{tmp_path / 'site.yaml'}:1: key 'bindings': {tmp_path / 'a.ethers'}: symbolic link loop"
    with pytest.raises(RuleError) as info:
        load_site(tmp_path / "a.ethers")
    assert str(info.value) == f"{tmp_path / 'a.ethers'}: symbolic link loop"


def test_a_password_file_as_the_site_file_is_named_never_shown(tmp_path):
    for text in (SHADOW, "password: $6$Qy7rT2sa\n", "routers: [$6$Qy7rT2sa]\n", "local_networks: [$6$Qy7rT2sa]\n",
                 "dynamic_pools: [$6$Qy7rT2sa-10.0.0.1]\n", "dhcp_servers: [$6$Qy7rT2sa]\n"):
        with pytest.raises(RuleError) as info:
            load_site(write(tmp_path, "site.yaml", text))
        assert str(info.value).startswith(f"{tmp_path / 'site.yaml'}:1: ")
        assert "$6$" not in str(info.value) and "Qy7rT2sa" not in str(info.value), str(info.value)


def test_a_watch_window_judges_with_the_site_across_its_slices(rip_requests, tmp_path):
    site = load_site(write(tmp_path, "site.yaml", "local_networks: [198.18.0.0/15]\n"))
    with open_capture(rip_requests) as reader:
        batches = [decode(raw) for raw in reader]
    for given, expected in ((site, {"198.18.7.7": ("info", True), "10.0.0.5": ("medium", False)}),
                            (None, PARAMETER_DECIDES)):
        window = SlidingWindow(load_rules(), now=0.0, slice_s=1.0, slices=6, site=given)
        # each request in a slice of its own: the window merges them (the same batch twice would be a duplicated
        # capture, whose findings the confidence model holds at low)
        for now, part in enumerate(rows(batch, k, k + 1) for batch in batches for k in range(len(batch))):
            window.update(part, float(now))
        result = window.analysis()
        assert result.context.site is (EMPTY if given is None else site)
        assert verdicts(result.findings) == expected
