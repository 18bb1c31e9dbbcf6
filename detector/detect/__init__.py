"""The detection framework's room: what the rules (detector/detectors/, rule modules only) stand on.

- `quality.CaptureQuality` folds decoded batches into facts about the capture itself (time going backwards,
  exact duplicate frames, corrupted-looking frames, snap-length truncation; one-direction capture from the
  flow table); `confidence.assess` turns them, each rule's stated evidence and the other findings into a
  confidence for every finding.
- The shared models several rules read: `conntrack` (a stateful box's connection table), `attempts`
  (connection attempts and their outcome from the flow table), `neighbors` (IP-MAC observations of ARP, ND,
  DHCP and IP traffic), `sketch` (HyperLogLog and space-saving counters).
- What a rule is and how it runs: `detector` (the Detector interface, REGISTRY, the analysis context),
  `runner` (the enabled rules in findings order as one consumer; a failing rule recorded, not fatal),
  `figure` (ReportFigure and the report's time axis TimeBins), `evidence` (bounded evidence frames),
  `display` (what a finding shows of a frame or a flow).
- The pieces of state: `grouping` (a batch's rows grouped by key, hashed repeats and membership), `hashing`
  (open-addressing tables, mix64), `state` (columnar state tables), `columns` (flow-table times, address
  texts), `links` (interface and VLAN of a frame).

This package's __init__ imports nothing: detector.rules reads `confidence` while it loads, before anything a
rule module needs exists. A rule imports what it uses from each module.

Nothing here imports a rule, and no rule imports another (tests/test_import_graph.py).
"""
