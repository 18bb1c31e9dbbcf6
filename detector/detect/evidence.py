"""Which frames a rule keeps as a finding's evidence: bounded, the first and the last of them."""
from __future__ import annotations

import numpy as np

# Frame numbers kept per finding for the evidence pcap: enough to show the
# pattern, bounded so a loop of millions of frames does not bloat findings.json.
EVIDENCE_FRAMES_MAX = 64


def evidence_frames(frames: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> list[int]:
    """Frame numbers for the evidence pcap: all of them, or the first and last halves of `limit`."""
    frames = np.asarray(frames, dtype=np.int64)
    if len(frames) <= limit:
        return frames.tolist()
    head = limit // 2
    return frames[:head].tolist() + frames[len(frames) - (limit - head):].tolist()


def keep_ends(kept: np.ndarray, new: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> np.ndarray:
    """Bounded evidence: the first `limit//2` and last `limit - limit//2` of kept+new frames (sorted)."""
    both = np.unique(np.concatenate([kept, new]).astype(np.int64))
    if len(both) <= limit:
        return both
    head = limit // 2
    return np.concatenate([both[:head], both[len(both) - (limit - head):]])


def append_ends(kept: np.ndarray, later: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> np.ndarray:
    """keep_ends of frames that all follow the kept ones, in order (a part's batches as they come): no sort."""
    both = np.concatenate([kept, later]).astype(np.int64)
    if len(both) <= limit:
        return both
    head = limit // 2
    return np.concatenate([both[:head], both[len(both) - (limit - head):]])



# A repeat split across two batches shows up once at the end of the first:
# rows this close to a batch's last time are tracked even when they do not
# repeat inside it. A loop repeats far faster than this; the window bounds
# the extra state to 10 ms of traffic.
CARRY_OVER_S = 0.010


def batch_tail(ts: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows within CARRY_OVER_S of the batch's last time."""
    return ts >= ts.max() - int(CARRY_OVER_S * 1e9)
