"""Capture quality: what is wrong with the capture itself, as facts every rule and report reads first.

A network does not send a frame twice with the same timestamp, run its clock
backwards, or deliver frames its FCS check would have dropped; a capture
(or what was done to the file afterwards) does. Read as traffic, such damage
looks like incidents: a trace appended to itself is hundreds of "SYN
retransmissions", a bit-flipped MAC is "another host" claiming an address. So
the capture's own faults are counted here, per time bin, for the confidence
model (detect.confidence) and shown before any finding (`detector info`,
findings.json's `capture_quality`, both reports):

- **time going backwards**: a record stamped earlier than the record before
  it in the same file (capinfos' "strict time order"); steps of more than
  `BACKWARDS_SLACK_NS` count as out of order (a multi-interface pcapng
  interleaves interfaces' clocks by microseconds, which misleads no rule);
- **exact duplicate frames**: a frame whose captured bytes and timestamp
  equal an earlier frame's (a trace appended or merged to itself, a capture
  point writing each frame twice). A loop's copies differ in time and are not
  duplicates. A duplicate that follows a step back to the first duplicated
  frame is a trace appended to itself at that frame;
- **corrupted-looking frames**: an IPv4 header checksum that fails (decode's
  L_BAD_CHECKSUM), a source MAC with the group bit set (no interface sends
  from a group address), a header malformed within bytes the capture holds
  (not cut by the snapshot length), an IP length past the frame's end on the
  wire. Real networks drop such frames at the FCS; in a capture they are
  damage or fuzzing;
- **snap-length truncation**: frames captured shorter than on the wire, and
  the snapshot length that cut them;
- **one direction** (`one_direction`, from the flow table once it is whole):
  TCP connections whose packets all went one way although they acknowledge a
  peer: a mirror of one direction, or asymmetric routing past the capture.

State is bounded whatever the capture's size and mergeable in capture order
(cluster partitions): the duplicate test keeps a hashed set of (bytes, time)
keys that is exact up to `EXACT_KEYS` distinct frames and then keeps a
hashed sample of them (each level halves it; counts are scaled back), the
time bins coarsen past `BINS_MAX`, and the damaged frames' numbers are kept
for the first `DAMAGED_FRAMES_MAX`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cpu import kernel
from ..schema import (
    IP,
    L_BAD_CHECKSUM,
    L_FRAG,
    L_IP4,
    L_SRC_MAC,
    L_TRUNCATED,
    LINKTYPE_IEEE802_11,
    LINKTYPE_IEEE802_11_RADIOTAP,
    PROTO_TCP,
    TH_ACK,
    PacketBatch,
)
from ..units import NS, plural
from .hashing import home_slot

# A step back in time of at most this much is the interleaving of a multi-interface capture's clocks (or of
# two CPUs' timestamps): counted, but no rule's rates or intervals suffer from it. Larger steps are out of
# order. Longer would hide a clock that jumps; shorter would call every pcapng of two interfaces disordered.
BACKWARDS_SLACK_NS = 1_000_000
# Distinct (bytes, time) keys the duplicate test holds exactly (a table of twice as many slots, 24 bytes each
# with the frame and time that first had the key: 3 MiB, which stays in the processor's cache; a table of a
# million keys cost every packet a cache miss, twice the time). Past it the test keeps a hashed half,
# quarter... of the keys and scales its counts: an estimate, said so, for captures of more frames than this.
EXACT_KEYS = 1 << 16
# A trace appended to itself starts over at its first step back in time: its first duplicate is the record
# there, or, once the duplicate test samples (1 in seen.scale), one within this many sampled strides of it.
APPENDED_STRIDES = 8
FIRST_TABLE_SLOTS = 1 << 12
# Time bins kept per capture: bins start at BIN_NS and double in width whenever more would be needed, so a
# capture of years costs what a capture of an hour does.
BIN_NS = NS
BINS_MAX = 4096
# Frame numbers of damaged frames (corrupted-looking or duplicates) kept for the confidence model to check a
# finding's evidence frames against: the first ones, which is where a fuzzed capture shows itself.
DAMAGED_FRAMES_MAX = 65_536
# Records of steps back in time kept (frame, step), the first ones.
STEPS_KEPT = 16
# A capture is called one-direction when at least this share of its TCP connections that acknowledge a peer
# (of ONE_WAY_PACKETS packets or more: an ACK ping is one packet that acknowledges nothing) show packets of one
# side only, over at least ONE_WAY_MIN connections: a mirror of one direction makes nearly all of them so;
# asymmetric routing past the capture point some. Fewer connections decide nothing.
ONE_WAY_RATIO = 0.5
ONE_WAY_MIN = 5
ONE_WAY_PACKETS = 3

# the counters kept per time bin, in this order
BIN_FACTS = ("packets", "duplicates", "backwards", "corrupted", "bad_checksum", "truncated")
P_PACKETS, P_DUPLICATES, P_BACKWARDS, P_CORRUPTED, P_BAD_CHECKSUM, P_TRUNCATED = range(len(BIN_FACTS))
# When at least this share of a capture's IPv4 frames fail their header checksum, the capture was edited
# (addresses rewritten or anonymised without fixing checksums: tcprewrite without --fixcsum), not damaged: a
# bit flipped on the way hits a few frames, an edit every one. Such checksums are then no sign of damage.
REWRITTEN_RATIO = 0.8
REWRITTEN_MIN_FRAMES = 4      # fewer IPv4 frames than this tell an edit from damage by nothing

# why a frame looks corrupted (bits), in words. A header is malformed when the decoder stopped at it within the
# bytes the capture holds, except a fragment (a first fragment too short for its transport header is an
# evasion, not damage) and 802.11 (control frames carry no payload the decoder reads)
C_CHECKSUM, C_GROUP_SOURCE, C_MALFORMED, C_PAST_FRAME = (1 << k for k in range(4))
CORRUPTION = {
    C_CHECKSUM: "IPv4 header checksum fails",
    C_GROUP_SOURCE: "source MAC is a group address",
    C_MALFORMED: "header malformed within the captured bytes",
    C_PAST_FRAME: "IP length runs past the frame",
}
GROUP_BIT = np.uint64(1 << 40)          # the I/G bit of the first octet of a 48-bit MAC held big-endian
WLAN_LINKTYPES = np.array([LINKTYPE_IEEE802_11, LINKTYPE_IEEE802_11_RADIOTAP], dtype=np.uint16)
# the kinds of a damaged frame (bits of damaged_kinds)
D_CORRUPTED, D_DUPLICATE, D_BAD_CHECKSUM = 1, 2, 4


@kernel("(u8[::1], i8[::1], i8[::1], u8[::1], i8[::1], i8[::1], i8)")
def _insert_seen(table, table_frames, table_ts, keys, frames, ts, sample_mask):
    """Insert each key whose low bits under `sample_mask` are 0 (the sampled ones) into `table` (0: a free slot;
    a key of 0 is stored as 1), with its frame and time in `table_frames` and `table_ts`; returns (whether each
    key was there already, or earlier among `keys`; keys added). The caller keeps the table at most half full."""
    mask = np.uint64(table.shape[0] - 1)
    keep = np.uint64(sample_mask)
    seen = np.zeros(keys.shape[0], dtype=np.bool_)
    added = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if k & keep:
            continue
        if k == 0:
            k = np.uint64(1)
        slot = home_slot(k, mask)
        while table[slot] != 0 and table[slot] != k:
            slot = (slot + np.uint64(1)) & mask
        if table[slot] == k:
            seen[i] = True
        else:
            table[slot] = k
            table_frames[slot] = frames[i]
            table_ts[slot] = ts[i]
            added += 1
    return seen, added


@dataclass
class SeenSet:
    """The (bytes, time) keys of the frames so far, each with the frame that first had it and its time: exact up
    to EXACT_KEYS, then a hashed sample of 1 in 2**level (the keys whose low `level` bits are 0), so a duplicate
    count is an estimate times 2**level."""

    table: np.ndarray
    frames: np.ndarray
    ts: np.ndarray
    fill: int = 0
    level: int = 0

    @classmethod
    def empty(cls) -> SeenSet:
        return cls(np.zeros(FIRST_TABLE_SLOTS, dtype=np.uint64), np.zeros(FIRST_TABLE_SLOTS, dtype=np.int64),
                   np.zeros(FIRST_TABLE_SLOTS, dtype=np.int64))

    @property
    def scale(self) -> int:
        return 1 << self.level

    def held(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The keys held, and the frame and time of each."""
        used = self.table != 0
        return self.table[used], self.frames[used], self.ts[used]

    def seen(self, keys: np.ndarray, frames: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Which of `keys` (of `frames` at times `ts`) were seen before (in this set or earlier in `keys`), among
        the sampled ones; adds them."""
        self._room(len(keys))
        seen, added = _insert_seen(self.table, self.frames, self.ts, np.ascontiguousarray(keys, dtype=np.uint64),
                                   np.ascontiguousarray(frames, dtype=np.int64),
                                   np.ascontiguousarray(ts, dtype=np.int64), (1 << self.level) - 1)
        self.fill += int(added)
        return seen

    def _room(self, coming: int) -> None:
        """Grow the table while it is exact and under EXACT_KEYS, else sample more sparsely, until `coming` more
        keys (those sampled of them) leave it at most half full."""
        while 2 * (self.fill + coming) > len(self.table) and len(self.table) < 2 * EXACT_KEYS:
            self._rebuild(len(self.table) * 2, self.level)
        while 2 * (self.fill + (coming >> self.level)) > len(self.table):
            self._rebuild(len(self.table), self.level + 1)

    def _rebuild(self, size: int, level: int) -> None:
        keys, frames, ts = self.held()
        kept = (keys & np.uint64((1 << level) - 1)) == 0
        self.table = np.zeros(size, dtype=np.uint64)
        self.frames, self.ts = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
        self.level = level
        self.fill = 0
        if kept.any():
            _, added = _insert_seen(self.table, self.frames, self.ts, keys[kept], frames[kept], ts[kept], 0)
            self.fill = int(added)

    def absorb(self, other: SeenSet) -> tuple[np.ndarray, np.ndarray]:
        """Take in `other`'s keys (the frames after this set's): the frames of `other` (and their times) that
        repeat one of this set's, at the coarser of the two samplings."""
        level = max(self.level, other.level)
        if level > self.level:
            self._rebuild(len(self.table), level)
        keys, frames, ts = other.held()
        kept = (keys & np.uint64((1 << level) - 1)) == 0
        keys, frames, ts = keys[kept], frames[kept], ts[kept]
        repeated = self.seen(keys, frames, ts)
        return frames[repeated], ts[repeated]


def frame_keys(batch: PacketBatch) -> np.ndarray:
    """A 64-bit key of each frame's captured bytes and timestamp (fingerprint mixed with the time)."""
    with np.errstate(over="ignore"):
        acc = batch["fingerprint"] ^ (batch["ts_ns"].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        acc ^= acc >> np.uint64(31)
        acc *= np.uint64(0xBF58476D1CE4E5B9)
        acc ^= acc >> np.uint64(29)
    return acc


def corruption(batch: PacketBatch) -> np.ndarray:
    """Why each frame looks corrupted (CORRUPTION bits, uint8; 0: it does not)."""
    layers = batch["layers"]
    caplen, wirelen = batch["caplen"], batch["wirelen"]
    cut = caplen < wirelen
    why = np.where(layers & np.uint32(L_BAD_CHECKSUM), C_CHECKSUM, 0).astype(np.uint8)
    why |= np.where((layers & np.uint32(L_SRC_MAC)).astype(bool) & ((batch["src_mac"] & GROUP_BIT) != 0),
                    C_GROUP_SOURCE, 0).astype(np.uint8)
    malformed = ((layers & np.uint32(L_TRUNCATED)) != 0) & ~cut & ((layers & np.uint32(L_FRAG)) == 0)
    malformed &= ~np.isin(batch["linktype"], WLAN_LINKTYPES)
    why |= np.where(malformed, C_MALFORMED, 0).astype(np.uint8)
    ip = (layers & np.uint32(IP)) != 0
    past = ip & (batch["l3_off"].astype(np.int64) + batch["ip_len"].astype(np.int64) > wirelen.astype(np.int64))
    why |= np.where(past, C_PAST_FRAME, 0).astype(np.uint8)
    return why


class CaptureQuality:
    """A consumer of decoded batches (engine.run) that counts what is wrong with the capture: see the module."""

    needs_fingerprint = True

    def __init__(self):
        self.packets = 0
        # per file: [first time, first frame, last time, last frame] of its records so far
        self.sources: dict[str, list[int]] = {}
        self.backwards = 0                  # records earlier than the one before them
        self.out_of_order = 0               # ... by more than BACKWARDS_SLACK_NS
        self.largest_step_ns = 0
        self.steps: list[tuple[int, int]] = []     # (frame, ns back) of the first STEPS_KEPT out-of-order steps
        self.seen = SeenSet.empty()
        self.duplicates = 0                 # each sampled one counted as seen.scale frames
        self.first_duplicate_frame: int | None = None
        self.corrupted: dict[int, int] = dict.fromkeys(CORRUPTION, 0)     # frames, per reason
        self.ipv4_frames = 0
        # frames with damage other than a failed IPv4 checksum, and frames whose only damage is that checksum
        # (no damage at all where the capture was edited: REWRITTEN_RATIO); the first frame of each
        self.other_damage = 0
        self.checksum_only = 0
        self.first_other_damage: int | None = None
        self.first_checksum_only: int | None = None
        self.truncated = 0
        self.snaplen = 0                    # the largest captured length of a cut frame: the snapshot length
        self.damaged = np.zeros(0, dtype=np.int64)    # frame numbers, the first DAMAGED_FRAMES_MAX
        self.damaged_kinds = np.zeros(0, dtype=np.uint8)  # 1 corrupted, 2 duplicate (bits)
        self.damaged_complete = True
        self.bin_ns = BIN_NS
        self.bins = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros((0, len(BIN_FACTS)), dtype=np.int64)

    # ---- folding ----------------------------------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        ts, frames = batch["ts_ns"], batch["frame"]
        self.packets += n
        source = self.sources.get(batch.source)
        before = np.empty(n, dtype=np.int64)
        before[0] = ts[0] if source is None else source[2]
        before[1:] = ts[:-1]
        step = before - ts
        back = step > 0
        far = step > BACKWARDS_SLACK_NS
        self._steps(int(np.count_nonzero(back)), frames[far], step[far])
        if source is None:
            self.sources[batch.source] = [int(ts[0]), int(frames[0]), int(ts[-1]), int(frames[-1])]
        else:
            source[2:] = [int(ts[-1]), int(frames[-1])]

        duplicate = self.seen.seen(frame_keys(batch), frames, ts)
        why = corruption(batch)
        other = (why & ~np.uint8(C_CHECKSUM)) != 0
        checksum_only = why == C_CHECKSUM
        cut = batch["caplen"] < batch["wirelen"]
        self._duplicates(int(np.count_nonzero(duplicate)) * self.seen.scale, frames[duplicate][:1])
        self.ipv4_frames += int(np.count_nonzero(batch["layers"] & np.uint32(L_IP4 | L_BAD_CHECKSUM)))
        if why.any():
            for bit in CORRUPTION:
                self.corrupted[bit] += int(np.count_nonzero(why & bit))
            self._corrupted(int(np.count_nonzero(other)), int(np.count_nonzero(checksum_only)),
                            frames[other][:1], frames[checksum_only][:1])
        if cut.any():
            self.truncated += int(np.count_nonzero(cut))
            self.snaplen = max(self.snaplen, int(batch["caplen"][cut].max()))
        kinds = (np.where(other, D_CORRUPTED, 0) | np.where(duplicate, D_DUPLICATE, 0)
                 | np.where(checksum_only, D_BAD_CHECKSUM, 0)).astype(np.uint8)
        damaged = kinds != 0
        if damaged.any():
            self._damaged(frames[damaged], kinds[damaged])
        self._bin(ts, (None, duplicate, far, other, checksum_only, cut))

    def _corrupted(self, other: int, checksum_only: int, first_other, first_checksum_only) -> None:
        self.other_damage += other
        self.checksum_only += checksum_only
        if self.first_other_damage is None and len(first_other):
            self.first_other_damage = int(first_other[0])
        if self.first_checksum_only is None and len(first_checksum_only):
            self.first_checksum_only = int(first_checksum_only[0])

    def _steps(self, back: int, frames: np.ndarray, steps: np.ndarray) -> None:
        self.backwards += back
        self.out_of_order += len(frames)
        if len(steps):
            self.largest_step_ns = max(self.largest_step_ns, int(steps.max()))
            room = STEPS_KEPT - len(self.steps)
            self.steps += list(zip(frames[:room].tolist(), steps[:room].tolist()))

    def _duplicates(self, count: int, first: np.ndarray) -> None:
        self.duplicates += count
        if len(first) and self.first_duplicate_frame is None:
            self.first_duplicate_frame = int(first[0])

    def _damaged(self, frames: np.ndarray, kinds: np.ndarray) -> None:
        room = DAMAGED_FRAMES_MAX - len(self.damaged)
        if len(frames) > room:
            self.damaged_complete = False
        self.damaged = np.concatenate([self.damaged, frames[:max(room, 0)].astype(np.int64)])
        self.damaged_kinds = np.concatenate([self.damaged_kinds, kinds[:max(room, 0)]])

    def _bin(self, ts: np.ndarray, masks) -> None:
        """Count into the time bins the records (and those of each mask: one per BIN_FACTS, None for all)."""
        idx = ts // self.bin_ns
        lo, hi = int(idx.min()), int(idx.max())
        if hi - lo < 1 << 16:
            rel = idx - lo
            sums = np.stack([np.bincount(rel if mask is None else rel[mask], minlength=hi - lo + 1)
                             for mask in masks], axis=1).astype(np.int64)
            present = np.flatnonzero(sums.any(axis=1))
            bins, sums = present + lo, sums[present]
        else:
            bins, inverse = np.unique(idx, return_inverse=True)
            sums = np.stack([np.bincount(inverse if mask is None else inverse[mask], minlength=len(bins))
                             for mask in masks], axis=1).astype(np.int64)
        self._add_bins(bins, sums, self.bin_ns)

    def _add_bins(self, bins: np.ndarray, sums: np.ndarray, bin_ns: int) -> None:
        """Fold per-bin sums of width `bin_ns` (a power-of-two multiple of BIN_NS) into this state's bins."""
        width = max(self.bin_ns, bin_ns)
        mine = self.bins * (self.bin_ns // BIN_NS) // (width // BIN_NS)
        theirs = bins * (bin_ns // BIN_NS) // (width // BIN_NS)
        every = np.concatenate([mine, theirs])
        values = np.concatenate([self.counts, sums])
        while True:
            unique, inverse = np.unique(every, return_inverse=True)
            if len(unique) <= BINS_MAX:
                break
            width *= 2
            every = every // 2
        merged = np.zeros((len(unique), len(BIN_FACTS)), dtype=np.int64)
        np.add.at(merged, inverse, values)
        self.bins, self.counts, self.bin_ns = unique, merged, width

    def merge(self, other: CaptureQuality) -> CaptureQuality:
        """Absorb `other`, the state of the records that follow this one's (a later partition). Returns self."""
        self.packets += other.packets
        for name, theirs in other.sources.items():
            mine = self.sources.get(name)
            if mine is None:
                self.sources[name] = list(theirs)
                continue
            step = mine[2] - theirs[0]
            if step > 0:       # the later part's first record against this part's last one
                far = step > BACKWARDS_SLACK_NS
                self._steps(1, np.array([theirs[1]] if far else [], dtype=np.int64),
                            np.array([step] if far else [], dtype=np.int64))
                if far:
                    only = np.zeros(1, dtype=bool)
                    self._bin(np.array([theirs[0]], dtype=np.int64), (only, only, ~only, only, only, only))
            mine[2:] = theirs[2:]
        self.backwards += other.backwards
        self.out_of_order += other.out_of_order
        self.largest_step_ns = max(self.largest_step_ns, other.largest_step_ns)
        self.steps = (self.steps + other.steps)[:STEPS_KEPT]
        # the later part's duplicates of its own frames, then those of this part's frames (first copies there)
        # the later part's duplicates of its own frames, and its first copies that repeat this part's frames
        frames, times = self.seen.absorb(other.seen)
        self.duplicates += other.duplicates + len(frames) * self.seen.scale
        if self.first_duplicate_frame is None:
            firsts = frames.tolist() + ([] if other.first_duplicate_frame is None else [other.first_duplicate_frame])
            self.first_duplicate_frame = min(firsts) if firsts else None
        for bit in CORRUPTION:
            self.corrupted[bit] += other.corrupted[bit]
        self.ipv4_frames += other.ipv4_frames
        self._corrupted(other.other_damage, other.checksum_only,
                        [] if other.first_other_damage is None else [other.first_other_damage],
                        [] if other.first_checksum_only is None else [other.first_checksum_only])
        self.truncated += other.truncated
        self.snaplen = max(self.snaplen, other.snaplen)
        # the later part's damaged frames, with its first copies of this part's frames now duplicates
        later = np.concatenate([other.damaged, frames])
        kinds = np.concatenate([other.damaged_kinds, np.full(len(frames), D_DUPLICATE, dtype=np.uint8)])
        later, at = np.unique(later, return_inverse=True)
        joined = np.zeros(len(later), dtype=np.uint8)
        np.bitwise_or.at(joined, at, kinds)
        self.damaged_complete &= other.damaged_complete
        self._damaged(later, joined)
        self._add_bins(other.bins, other.counts, other.bin_ns)
        if len(times):
            only = np.zeros(len(times), dtype=bool)
            self._bin(times, (only, ~only, only, only, only, only))
        return self

    # ---- reading --------------------------------------------------------------------------------------
    @property
    def checksums_rewritten(self) -> bool:
        """Whether the failed IPv4 checksums are an edit of the capture (REWRITTEN_RATIO), not damage."""
        return (self.checksum_only > 0 and self.ipv4_frames >= REWRITTEN_MIN_FRAMES
                and self.corrupted[C_CHECKSUM] >= REWRITTEN_RATIO * self.ipv4_frames)

    @property
    def corrupted_frames(self) -> int:
        """Frames that look damaged: failed IPv4 checksums count unless the capture was edited."""
        return self.other_damage + (0 if self.checksums_rewritten else self.checksum_only)

    @property
    def first_corrupted_frame(self) -> int | None:
        firsts = [self.first_other_damage] + ([] if self.checksums_rewritten else [self.first_checksum_only])
        firsts = [f for f in firsts if f is not None]
        return min(firsts) if firsts else None

    @property
    def duplicate_frames(self) -> int:
        """Exact duplicate frames (an estimate past EXACT_KEYS distinct frames: `duplicates_exact`)."""
        return self.duplicates

    @property
    def duplicates_exact(self) -> bool:
        return self.seen.level == 0

    def appended_at(self) -> int | None:
        """The frame where the trace starts over (appended to itself): the first duplicate is the record of the
        first step back in time."""
        if not self.steps or self.first_duplicate_frame is None:
            return None
        restart = self.steps[0][0]
        reach = 1 if self.duplicates_exact else APPENDED_STRIDES * self.seen.scale
        return restart if 0 <= self.first_duplicate_frame - restart < reach else None

    def over(self, first_ns: int, last_ns: int) -> dict[str, int]:
        """Over the time bins that overlap [first_ns, last_ns]: packets, duplicates, backwards (out-of-order
        steps), corrupted (failed IPv4 checksums included unless the capture was edited) and truncated frames."""
        lo, hi = first_ns // self.bin_ns, last_ns // self.bin_ns
        inside = (self.bins >= lo) & (self.bins <= hi)
        sums = self.counts[inside].sum(axis=0) if inside.any() else np.zeros(len(BIN_FACTS), dtype=np.int64)
        out = dict(zip(BIN_FACTS, (int(v) for v in sums)))
        if not self.checksums_rewritten:
            out["corrupted"] += out["bad_checksum"]
        del out["bad_checksum"]
        return out

    def damage_of(self, frames) -> tuple[int, int, int]:
        """Of `frames` (frame numbers): how many look corrupted, how many are exact duplicates, and how many could
        be checked (past DAMAGED_FRAMES_MAX damaged frames, those after the last one kept are not known)."""
        frames = np.unique(np.asarray(frames, dtype=np.int64))
        if not self.damaged_complete:
            frames = frames[frames <= self.damaged[-1]]
        kinds = self.damaged_kinds[np.isin(self.damaged, frames)]
        corrupt = D_CORRUPTED if self.checksums_rewritten else D_CORRUPTED | D_BAD_CHECKSUM
        return (int(np.count_nonzero(kinds & corrupt)), int(np.count_nonzero(kinds & D_DUPLICATE)), len(frames))

    def to_json(self, direction: dict | None = None) -> dict:
        """The facts for findings.json's and `info --json`'s `capture_quality`, with the sentences a reader sees
        first (`notes`); `direction`: one_direction()'s record, where the flow table was built."""
        out = {
            "packets": self.packets,
            "time_backwards": {"count": self.backwards, "out_of_order": self.out_of_order,
                               "largest_step_s": round(self.largest_step_ns / NS, 6),
                               "first_frame": self.steps[0][0] if self.steps else None},
            "duplicate_frames": {"count": self.duplicate_frames, "exact": self.duplicates_exact,
                                 "first_frame": self.first_duplicate_frame, "appended_at_frame": self.appended_at()},
            "corrupted_frames": {"count": self.corrupted_frames, "first_frame": self.first_corrupted_frame,
                                 "reasons": {text: self.corrupted[bit] for bit, text in CORRUPTION.items()
                                             if self.corrupted[bit] and not (bit == C_CHECKSUM and
                                                                             self.checksums_rewritten)}},
            "checksums_rewritten": {"ipv4_frames": self.ipv4_frames, "failed": self.corrupted[C_CHECKSUM]}
            if self.checksums_rewritten else None,
            "truncated_frames": {"count": self.truncated, "snaplen": self.snaplen or None},
        }
        if direction is not None:
            out["one_direction"] = direction
        out["notes"] = notes(out)
        return out


def one_direction(columns: dict | None) -> dict | None:
    """How many TCP connections that acknowledge a peer were seen one way only, from the flow table's coded
    columns (FlowTable.coded_columns()); `one_direction` says whether that makes a one-direction capture.
    None without a flow table."""
    if columns is None:
        return None
    tcp = columns["proto"] == PROTO_TCP
    forward, backward = columns["src2dst_packets"] > 0, columns["dst2src_packets"] > 0
    acking = ((columns["src2dst_tcp_flags"] | columns["dst2src_tcp_flags"]) & TH_ACK) != 0
    judged = tcp & acking & (columns["src2dst_packets"] + columns["dst2src_packets"] >= ONE_WAY_PACKETS)
    one_way = judged & (forward != backward)
    n, k = int(np.count_nonzero(judged)), int(np.count_nonzero(one_way))
    return {"tcp_connections": n, "one_way": k, "ratio": round(k / n, 4) if n else 0.0,
            "one_direction": bool(n >= ONE_WAY_MIN and k >= ONE_WAY_RATIO * n)}


def notes(facts: dict) -> list[str]:
    """What is wrong with the capture, one sentence a fact, in the order a reader should know it."""
    out = []
    packets = facts["packets"]
    dup = facts["duplicate_frames"]
    if dup["count"]:
        about = "" if dup["exact"] else "about "
        text = (f"{about}{dup['count']:,} of {packets:,} frames ({dup['count'] / packets:.0%}) repeat an earlier "
                f"frame's bytes and timestamp (first at frame {dup['first_frame']:,})")
        if dup["appended_at_frame"]:
            text += f": the trace is appended to itself from frame {dup['appended_at_frame']:,}"
        out.append(text + "; duplicates are not traffic, and counts that include them are inflated")
    back = facts["time_backwards"]
    if back["out_of_order"]:
        out.append(f"time runs backwards {plural(back['out_of_order'], 'time')} by more than "
                   f"{BACKWARDS_SLACK_NS / 1e6:g} ms (first at frame {back['first_frame']:,}, by up to "
                   f"{back['largest_step_s']:,.3f} s); rates and intervals across those steps are unreliable")
    elif back["count"]:
        out.append(f"{plural(back['count'], 'record')} are stamped up to {BACKWARDS_SLACK_NS / 1e6:g} ms earlier than "
                   "the one before (interleaved clocks; harmless)")
    bad = facts["corrupted_frames"]
    if bad["count"]:
        reasons = ", ".join(f"{text} {count:,}" for text, count in bad["reasons"].items())
        out.append(f"{bad['count']:,} of {packets:,} frames ({bad['count'] / packets:.1%}) look corrupted "
                   f"({reasons}; first at frame {bad['first_frame']:,}): a network drops such frames at the FCS, "
                   "so the capture is damaged or fuzzed, and what they show is no host's doing")
    edited = facts.get("checksums_rewritten")
    if edited:
        out.append(f"{edited['failed']:,} of {edited['ipv4_frames']:,} IPv4 headers fail their checksum: the "
                   "capture was edited (addresses rewritten or anonymised without fixing checksums), not damaged")
    cut = facts["truncated_frames"]
    if cut["count"]:
        out.append(f"{cut['count']:,} of {packets:,} frames were cut at a snapshot length of {cut['snaplen']:,} "
                   "bytes: fields past it were not captured")
    direction = facts.get("one_direction")
    if direction and direction["one_direction"]:
        out.append(f"{direction['one_way']:,} of {direction['tcp_connections']:,} TCP connections were seen one way "
                   "only (their packets acknowledge a peer the capture never shows): a one-direction capture, where "
                   "what looks unanswered may simply be unseen")
    return out
