"""Flow tables written to CSV read back as the same table, whatever the text holds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from detector.flows.export import write_csv


def test_csv_round_trip_with_hostile_text_and_missing_values(tmp_path):
    view = {
        "src_ip": np.array(["10.0.0.1", "2001:db8::1", "x"], dtype=object),
        "note": np.array(['a,b', 'say "hi"', "line\nbreak"], dtype=object),
        "packets": np.array([1, 2, 3], dtype=np.uint64),
        "handshake_rtt_ms": np.array([1.5, np.nan, 0.000123456789]),
        "first_seen": np.array([0, 1_700_000_000_123_456_789, 5], dtype=np.int64),
    }
    path = tmp_path / "f.csv"
    write_csv(view, path)
    back = pd.read_csv(path, keep_default_na=True)
    assert back["src_ip"].tolist() == ["10.0.0.1", "2001:db8::1", "x"]
    assert back["note"].tolist() == ['a,b', 'say "hi"', "line\nbreak"]
    assert back["packets"].tolist() == [1, 2, 3]
    assert back["handshake_rtt_ms"].iloc[0] == 1.5 and np.isnan(back["handshake_rtt_ms"].iloc[1])
    assert back["handshake_rtt_ms"].iloc[2] == 0.000123
    assert back["first_seen"].tolist() == ["1970-01-01T00:00:00.000000000Z", "2023-11-14T22:13:20.123456789Z",
                                           "1970-01-01T00:00:00.000000005Z"]


def test_plain_text_is_not_quoted(tmp_path):
    path = tmp_path / "f.csv"
    write_csv({"proto": np.array(["tcp", "udp"], dtype=object), "n": np.array([7, 8])}, path)
    assert path.read_text() == "proto,n\ntcp,7\nudp,8\n"


def test_many_blocks_keep_row_order_and_values(tmp_path):
    """Rows are formatted in blocks on two threads: the file must still be every row, in order."""
    from detector.flows.export import ROWS_PER_BLOCK
    from detector.text import TextCodes
    n = 3 * ROWS_PER_BLOCK + 17
    rng = np.random.default_rng(7)
    view = {
        "seq": np.arange(n, dtype=np.int64) - 5,
        "big": rng.integers(0, 1 << 63, size=n, dtype=np.uint64) | np.uint64(1 << 63),
        "ratio": np.round(rng.random(n) * 1000, 6),
        "first_seen": rng.integers(-10**18, 9 * 10**18, size=n, dtype=np.int64),
        "word": TextCodes(rng.integers(0, 3, size=n), ["alpha", "b,c", 'say "x"']),
    }
    path = tmp_path / "f.csv"
    write_csv(view, path)
    back = pd.read_csv(path, dtype={"big": str})
    assert back["seq"].tolist() == view["seq"].tolist()
    assert back["big"].tolist() == [str(v) for v in view["big"].tolist()]
    assert np.allclose(back["ratio"], view["ratio"], rtol=0, atol=5e-7)
    assert back["first_seen"].tolist() == [str(t) + "Z" for t in
                                          np.datetime_as_string(view["first_seen"].astype("datetime64[ns]"))]
    assert back["word"].tolist() == list(view["word"].text())
