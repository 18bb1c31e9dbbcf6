"""What unicast-flood's update() costs beside the flow table's, per packet, on the bench capture (decode excluded).

    .venv/bin/python bench/unicast_flood_cost.py [CAPTURE]      # default: the cached 2-million-packet capture

The rule reads every Ethernet frame (a MAC-table lookup for the destination
and one for the source); the flow table is the other per-packet consumer of
every analysis. Both fold the same decoded batches, already in memory; the
best of three passes of each is printed.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_capture

from detector.decode import decode
from detector.detectors.unicast_flood import UnicastFlood
from detector.flows import FlowTable
from detector.ingest import read_captures
from detector.rules import load_rules

PASSES = 3


def best_of(make, batches) -> float:
    best = float("inf")
    for _ in range(PASSES):
        consumer = make()
        start = time.perf_counter()
        for batch in batches:
            consumer.update(batch)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else make_capture.cached_path(make_capture.DEFAULT_PACKETS)
    batches = [decode(raw) for _, raw in read_captures([str(path)])]
    packets = sum(len(batch) for batch in batches)
    rule = load_rules()["unicast-flood"]
    best_of(lambda: UnicastFlood(rule), batches[:1])           # compile or load the kernels first
    flood = best_of(lambda: UnicastFlood(rule), batches)
    flows = best_of(FlowTable, batches)
    print(f"{packets:,} packets in {len(batches)} batches: unicast-flood update {flood * 1e3:,.0f} ms "
          f"({flood / packets * 1e9:.1f} ns/packet), flow table update {flows * 1e3:,.0f} ms "
          f"({flows / packets * 1e9:.1f} ns/packet): {flood / flows:.0%} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
