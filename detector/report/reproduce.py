"""Writes a short scapy script that rebuilds a finding's frame (a probe) from its bytes, to test a fix in a lab.

A rule asks for it through its detector's REPRODUCES (detect.detector).

The script never sends unless --send is given: by default it prints what it
would send. The frame travels as hex, so no packet byte lands in Python
source text; the default addresses are re-parsed with ipaddress first.
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from ..detect.columns import ip_text
from ..detect.display import load_dissectors
from ..output import OutputDir

SCRIPT = '''#!/usr/bin/env python3
"""Rebuild {what} that triggered a {rule} finding (frame {frame} of {source}).

Prints the packet; sends it only with --send (needs root). Point --src/--dst at
a lab router to check that a filter now drops it and nothing echoes it back.
"""
import argparse

from scapy.all import IP, UDP, IPv6, conf, sendp

FRAME = bytes.fromhex("{hex}")
LINKTYPE = {linktype}


def build(src, dst):
    packet = conf.l2types[LINKTYPE](FRAME)
    for layer in (IP, IPv6):
        if layer in packet:
            packet[layer].src, packet[layer].dst = src, dst
            # lengths and checksums are recomputed for the new addresses
            for name in ("chksum", "len", "plen"):
                if name in packet[layer].fields:
                    del packet[layer].fields[name]
    if UDP in packet:
        del packet[UDP].chksum
        del packet[UDP].len
    return packet.__class__(bytes(packet))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default={src!r}, help="source address (default: the probe's)")
    parser.add_argument("--dst", default={dst!r}, help="target address (default: the probe's)")
    parser.add_argument("--iface", default=None, help="interface to send on")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--send", action="store_true", help="really send; without it nothing leaves")
    args = parser.parse_args()
    packet = build(args.src, args.dst)
    print(packet.summary())
    if args.send:
        sendp(packet, iface=args.iface, count=args.count, verbose=False)
        print(f"sent {{args.count}}")
    else:
        print("not sent (add --send)")


if __name__ == "__main__":
    main()
'''


def _addresses(frame: bytes, linktype: int) -> tuple[str, str]:
    """The probe's IP addresses, re-validated, or documentation addresses when scapy cannot find them."""
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6

    try:
        packet = load_dissectors().l2types[linktype](frame)
        layer = packet[IP] if IP in packet else packet[IPv6]
        return str(ipaddress.ip_address(layer.src)), str(ipaddress.ip_address(layer.dst))
    except Exception:   # scapy raises many kinds of errors on crafted bytes; fall back to placeholders
        return ip_text(0, 0xFFFFC0000201), ip_text(0, 0xFFFFC0000202)


def write_reproducer(out: OutputDir, name: str, frame_number: int, record, what: str, rule: str) -> str:
    """Write the script that replays `what` (our own words, "the probe") of a `rule` finding from one evidence
    record (ts_ns, wirelen, linktype, bytes, source) as output `name` (executable as far as the umask lets it
    be) and return `name`."""
    _ts, _wire, linktype, frame, source = record
    src, dst = _addresses(frame, linktype)
    # the file name goes into a docstring: only characters that cannot end or escape it
    shown = re.sub(r"[^A-Za-z0-9._-]", "_", Path(source).name)
    text = SCRIPT.format(what=what, rule=rule, frame=int(frame_number), source=shown,
                         hex=frame.hex(), linktype=int(linktype), src=src, dst=dst)
    return out.write(name, text, executable=True)
