"""Times conntrack-pressure's table model on a million synthetic flows, against sorting a million int64s.

    .venv/bin/python bench/conntrack_model.py                 # 1 M flows, best of 5
    .venv/bin/python bench/conntrack_model.py --flows 3000000 --rounds 3

The flows are built as the rule gets them (a pandas frame like FlowTable.to_frame():
addresses as text, UTC datetimes, Zeek conn_state strings): a busy NAT's mix of
completed TCP connections, open ones, resets, unanswered SYNs from a sweeping source
and UDP with and without replies, with a few repeated 5-tuples. The issue's bound is
one second per million flows; this host's speed drifts with its other load, so the
ratio to a plain np.sort of as many int64s, timed in the same run, says more than
the seconds alone.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLOWS = 1_000_000
ROUNDS = 5
START_NS = 1_767_225_600 * 10**9


def synthetic_flows(n: int, seed: int = 12):
    """A flow-table frame of `n` flows over ten minutes (see the module's docstring)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    clients = np.array([f"100.64.{i // 250}.{i % 250 + 1}" for i in range(20000)], dtype=object)
    servers = np.array([f"198.51.{i // 250}.{i % 250 + 1}" for i in range(50000)], dtype=object)
    first = np.sort(START_NS + rng.integers(0, 600 * 10**9, n))
    duration = rng.exponential(2e9, n).astype(np.int64)
    states = np.array(["SF", "S1", "S0", "REJ", "RSTO", "SF", "S0", "OTH"], dtype=object)
    state = states[rng.integers(0, len(states), n)]
    proto = np.where(rng.random(n) < 0.3, "udp", "tcp").astype(object)
    src = clients[rng.integers(0, len(clients), n)]
    sweep = rng.random(n) < 0.05          # one infected subscriber's unanswered SYNs
    src[sweep] = "100.64.7.7"
    state[sweep], proto[sweep] = "S0", "tcp"
    dst2src = np.where((state == "S0") | (rng.random(n) < 0.1), 0, rng.integers(1, 50, n))
    sport = rng.integers(1024, 65536, n)
    dest = servers[rng.integers(0, len(servers), n)]
    dport = rng.choice([53, 80, 443, 8080], n)
    # port reuse: 1 % of the flows repeat the 5-tuple of a flow some thousand flows earlier
    repeat = np.flatnonzero(rng.random(n) < 0.01)
    repeat = repeat[repeat >= 1000]
    for column in (src, dest, sport, dport, proto):
        column[repeat] = column[repeat - 1000]
    return pd.DataFrame({
        "src_ip": src, "dest_ip": dest, "src_port": sport.astype(np.uint16),
        "dest_port": dport.astype(np.uint16), "proto": proto,
        "first_seen": pd.to_datetime(first, unit="ns", utc=True),
        "last_seen": pd.to_datetime(first + duration, unit="ns", utc=True),
        "state": state, "src2dst_packets": rng.integers(1, 50, n), "dst2src_packets": dst2src,
        "first_frame": np.arange(1, n + 1, dtype=np.int64),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=FLOWS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--profile", default="linux")
    args = parser.parse_args()

    from detector.detectors.conntrack_pressure import occupancy

    frame = synthetic_flows(args.flows)
    values = np.random.default_rng(1).integers(0, 1 << 62, args.flows)
    occupancy(frame.iloc[:1000], args.profile)          # imports and first-use costs out of the timing
    model, sort = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        occ = occupancy(frame, args.profile)
        model.append(time.perf_counter() - t)
        t = time.perf_counter()
        np.sort(values)
        sort.append(time.perf_counter() - t)
    best, base = min(model), min(sort)
    print(f"conntrack model: {args.flows:,} flows -> {occ.entries:,} entries, peak {occ.peak:,} "
          f"({occ.profile}); best of {args.rounds}: {best:.3f} s; np.sort of {args.flows:,} int64: {base:.3f} s; "
          f"ratio {best / base:.1f}x")


if __name__ == "__main__":
    main()
