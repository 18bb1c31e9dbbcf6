"""Community ID v1 against the specification's published test vectors.

Vectors: corelight/community-id-spec, baseline/README.md (tables: ICMP given as
type/code) and baseline/baseline_deflt.json / baseline_seed1.json (computed by
pycommunityid from pcaps/combined.pcap.gz; ICMP given as port equivalents).
"""
from __future__ import annotations

import numpy as np
import pytest

from detector.flows import community_id
from detector.flows.community_id import community_ids

V6A = "fe80:0001:0203:0405:0607:0809:0A0B:0C0D"
V6B = "fe80:1011:1213:1415:1617:1819:1A1B:1C1D"

# (proto, src, dst, sport, dport, default, seed=1, hex digest without base64)
TABLE = [
    (6, "1.2.3.4", "5.6.7.8", 1122, 3344, "wCb3OG7yAFWelaUydu0D+125CLM=", "HhA1B+6CoLbiKPEs5nhNYN4XWfk=",
     "c026f7386ef200559e95a53276ed03fb5db908b3"),
    (6, "5.6.7.8", "1.2.3.4", 3344, 1122, "wCb3OG7yAFWelaUydu0D+125CLM=", "HhA1B+6CoLbiKPEs5nhNYN4XWfk=",
     "c026f7386ef200559e95a53276ed03fb5db908b3"),
    (17, "1.2.3.4", "5.6.7.8", 1122, 3344, "0Mu9InQx6z4ZiCZM/7HXi2WMhOg=", "OShq+iKDAMVouh/4bMxB9Sz4amw=",
     "d0cbbd227431eb3e1988264cffb1d78b658c84e8"),
    (17, "5.6.7.8", "1.2.3.4", 3344, 1122, "0Mu9InQx6z4ZiCZM/7HXi2WMhOg=", "OShq+iKDAMVouh/4bMxB9Sz4amw=",
     "d0cbbd227431eb3e1988264cffb1d78b658c84e8"),
    (132, "1.2.3.4", "5.6.7.8", 1122, 3344, "EKt4MsxuyaE6mL+hmrEkQ9csDD8=", "uitchpn5MMGAQKBJh7bIr/bAr7s=",
     "10ab7832cc6ec9a13a98bfa19ab12443d72c0c3f"),
    (132, "5.6.7.8", "1.2.3.4", 3344, 1122, "EKt4MsxuyaE6mL+hmrEkQ9csDD8=", "uitchpn5MMGAQKBJh7bIr/bAr7s=",
     "10ab7832cc6ec9a13a98bfa19ab12443d72c0c3f"),
    (1, "1.2.3.4", "5.6.7.8", 8, 0, "crodRHL2FEsHjbv3UkRrfbs4bZ0=", "9pr4ZGTICiuZoIh90RRYE2RyXpU=",
     "72ba1d4472f6144b078dbbf752446b7dbb386d9d"),
    (1, "5.6.7.8", "1.2.3.4", 0, 0, "crodRHL2FEsHjbv3UkRrfbs4bZ0=", "9pr4ZGTICiuZoIh90RRYE2RyXpU=",
     "72ba1d4472f6144b078dbbf752446b7dbb386d9d"),
    (1, "1.2.3.4", "5.6.7.8", 11, 0, "f/YiSyWqczrTgfUCZlBUnvHRcPk=", "1DD7cWGC/Yg91YGsQeni8du3pIA=",
     "7ff6224b25aa733ad381f5026650549ef1d170f9"),
    (58, V6A, V6B, 128, 0, "0bf7hyMJUwt3fMED7z8LIfRpBeo=", "IO27GQzPuCtNnwFvjWALMHu5tJE=",
     "d1b7fb872309530b777cc103ef3f0b21f46905ea"),
    (58, V6B, V6A, 129, 0, "0bf7hyMJUwt3fMED7z8LIfRpBeo=", "IO27GQzPuCtNnwFvjWALMHu5tJE=",
     "d1b7fb872309530b777cc103ef3f0b21f46905ea"),
    (58, V6A, V6B, 146, 0, "fYC8+pz24E+EhANP1EZhpX0Dw10=", "Cv4IKJe56BNkF0MBW2YxQ3Nwc3s=",
     "7d80bcfa9cf6e04f8484034fd44661a57d03c35d"),
    (46, "1.2.3.4", "5.6.7.8", None, None, "ikv3kmf89luf73WPz1jOs49S768=", "/buhqeOmaRCopOZFy9HnoJd5XW8=",
     "8a4bf79267fcf65b9fef758fcf58ceb38f52efaf"),
    (46, "5.6.7.8", "1.2.3.4", None, None, "ikv3kmf89luf73WPz1jOs49S768=", "/buhqeOmaRCopOZFy9HnoJd5XW8=",
     "8a4bf79267fcf65b9fef758fcf58ceb38f52efaf"),
    (46, V6A, V6B, None, None, "wQ/2mwrnXP4lmJcHdGL5ePjR+e0=", "j6EyyfBzL4vWKHFXgUqb5Az3OxM=",
     "c10ff69b0ae75cfe259897077462f978f8d1f9ed"),
    (46, V6B, V6A, None, None, "wQ/2mwrnXP4lmJcHdGL5ePjR+e0=", "j6EyyfBzL4vWKHFXgUqb5Az3OxM=",
     "c10ff69b0ae75cfe259897077462f978f8d1f9ed"),
]

# baseline_deflt.json and baseline_seed1.json: (proto, saddr, daddr, sport, dport, seed 0, seed 1)
PCAP_VECTORS = [
    (58, "fe80::200:86ff:fe05:80da", "fe80::260:97ff:fe07:69ea", 135, 136,
     "dGHyGvjMfljg6Bppwm3bg0LO8TY=", "kHa1FhMYIT6Ym2Vm2AOtoOARDzY="),
    (58, "fe80::260:97ff:fe07:69ea", "fe80::200:86ff:fe05:80da", 136, 135,
     "dGHyGvjMfljg6Bppwm3bg0LO8TY=", "kHa1FhMYIT6Ym2Vm2AOtoOARDzY="),
    (58, "fe80::260:97ff:fe07:69ea", "fe80::200:86ff:fe05:80da", 135, 136,
     "zavyT/cezQr1fmImYCwYnMXbgck=", "2hSqmsDZ2kdcY9kbiUzOEBic0iM="),
    (58, "fe80::200:86ff:fe05:80da", "fe80::260:97ff:fe07:69ea", 136, 135,
     "zavyT/cezQr1fmImYCwYnMXbgck=", "2hSqmsDZ2kdcY9kbiUzOEBic0iM="),
    (58, "3ffe:501:1800:2345::2", "3ffe:507:0:1:200:86ff:fe05:80da", 3, 0,
     "2ObVBgIn28oZvibYZhZMBgh7WdQ=", "lVEtCZpYu84Xqaa++3lXFyuu2n4="),
    (58, "3ffe:501:410:0:2c0:dfff:fe47:33e", "3ffe:507:0:1:200:86ff:fe05:80da", 1, 4,
     "hLZd0XGWojozrvxqE0dWB1iM6R0=", "W8MHwXpWzpoSTD+cGcaJr4u0ys8="),
    (58, "3ffe:507:0:1:200:86ff:fe05:80da", "3ffe:501:0:1001::2", 128, 129,
     "+TW+HtLHvV1xnGhV1lv7XoJrqQg=", "GfZxjAkDk2MkegpBYHV6tadtFXQ="),
    (58, "3ffe:501:0:1001::2", "3ffe:507:0:1:200:86ff:fe05:80da", 129, 128,
     "+TW+HtLHvV1xnGhV1lv7XoJrqQg=", "GfZxjAkDk2MkegpBYHV6tadtFXQ="),
    (58, "fe80::200:86ff:fe05:80da", "ff02::2", 133, 134,
     "hO+sN4H+MG5MY/8hIrXPqc4ZQz0=", "L7Ka0ZMYu+J3bL4ulW2PrqyXNo8="),
    (58, "fe80::260:97ff:fe07:69ea", "ff02::1", 134, 133,
     "pkvHqCL88/tg1k4cPigmZXUtL00=", "K/ee5UCqAMAQXDorP5nSa2CGLjc="),
    (1, "192.168.0.89", "192.168.0.1", 8, 0, "X0snYXpgwiv9TZtqg64sgzUn6Dk=", "03g6IloqVBdcZlPyX8r0hgoE7kA="),
    (1, "192.168.0.1", "192.168.0.89", 0, 8, "X0snYXpgwiv9TZtqg64sgzUn6Dk=", "03g6IloqVBdcZlPyX8r0hgoE7kA="),
    (1, "10.0.0.1", "10.0.0.2", 11, 0, "YHxtAirCG//0OzkcVAukqKQN9xM=", "XjUibYHaafLQ3pxQeiMI8g25q20="),
    (6, "2001:470:e5bf:dead:4957:2174:e82c:4887", "2607:f8b0:400c:c03::1a", 63943, 25,
     "/qFaeAR+gFe1KYjMzVDsMv+wgU4=", "eJYTW6AOzFLlSUoESovMjnu7rMw="),
    (6, "2607:f8b0:400c:c03::1a", "2001:470:e5bf:dead:4957:2174:e82c:4887", 25, 63943,
     "/qFaeAR+gFe1KYjMzVDsMv+wgU4=", "eJYTW6AOzFLlSUoESovMjnu7rMw="),
    (132, "192.168.170.8", "192.168.170.56", 7, 7, "MP2EtRCAUIZvTw6MxJHLV7N7JDs=", "5w3ZRjeKBzqT3zsaEECDGjUbYeg="),
    (132, "192.168.170.56", "192.168.170.8", 7, 7, "MP2EtRCAUIZvTw6MxJHLV7N7JDs=", "5w3ZRjeKBzqT3zsaEECDGjUbYeg="),
    (6, "128.232.110.120", "66.35.250.204", 34855, 80, "LQU9qZlK+B5F3KDmev6m5PMibrg=", "3V71V58M3Ksw/yuFALMcW0LAHvc="),
    (6, "66.35.250.204", "128.232.110.120", 80, 34855, "LQU9qZlK+B5F3KDmev6m5PMibrg=", "3V71V58M3Ksw/yuFALMcW0LAHvc="),
    (17, "192.168.1.52", "8.8.8.8", 54585, 53, "d/FP5EW3wiY1vCndhwleRRKHowQ=", "Q9We8WO3piVF8yEQBNJF4uiSVrI="),
    (17, "8.8.8.8", "192.168.1.52", 53, 54585, "d/FP5EW3wiY1vCndhwleRRKHowQ=", "Q9We8WO3piVF8yEQBNJF4uiSVrI="),
    (46, "10.1.12.1", "10.1.12.2", None, None, "KHlLkgoJW7ifUTyTSgyVfkFHzKw=", "rYir8gphR31noO9iDRQmF/BteEI="),
    (46, "10.1.12.2", "10.1.12.1", None, None, "KHlLkgoJW7ifUTyTSgyVfkFHzKw=", "rYir8gphR31noO9iDRQmF/BteEI="),
]


@pytest.mark.parametrize("proto,src,dst,sport,dport,deflt,seed1,hexdigest", TABLE)
def test_spec_tables(proto, src, dst, sport, dport, deflt, seed1, hexdigest):
    assert community_id(src, dst, proto, sport, dport) == "1:" + deflt
    assert community_id(src, dst, proto, sport, dport, seed=1) == "1:" + seed1
    assert community_id(src, dst, proto, sport, dport, base64=False) == "1:" + hexdigest


@pytest.mark.parametrize("proto,src,dst,sport,dport,deflt,seed1", PCAP_VECTORS)
def test_spec_pcap_baselines(proto, src, dst, sport, dport, deflt, seed1):
    # ICMP rows carry port equivalents (type, counterpart type or code): passing
    # them as (type, code) must give the same hash, since a two-way type's code
    # is replaced by its counterpart and a one-way type keeps its code.
    assert community_id(src, dst, proto, sport, dport) == "1:" + deflt
    assert community_id(src, dst, proto, sport, dport, seed=1) == "1:" + seed1


def test_packed_addresses_equal_strings():
    import ipaddress
    a, b = ipaddress.ip_address("1.2.3.4").packed, ipaddress.ip_address("5.6.7.8").packed
    assert community_id(a, b, 6, 1122, 3344) == "1:wCb3OG7yAFWelaUydu0D+125CLM="


def test_mixed_families_rejected():
    with pytest.raises(ValueError):
        community_id("1.2.3.4", "::1", 6, 1, 2)


def _columns(rows):
    """(src_hi, src_lo, dst_hi, dst_lo, proto, sport, dport) columns of (src, dst, proto, sport, dport) rows."""
    from detector.decode.addr import str_to_ip
    src = np.array([str_to_ip(r[0]) for r in rows], dtype=np.uint64).reshape(-1, 2)
    dst = np.array([str_to_ip(r[1]) for r in rows], dtype=np.uint64).reshape(-1, 2)
    return (src[:, 0], src[:, 1], dst[:, 0], dst[:, 1], np.array([r[2] for r in rows], np.uint8),
            np.array([r[3] or 0 for r in rows], np.uint16), np.array([r[4] or 0 for r in rows], np.uint16))


def test_columns_match_spec_vectors():
    rows = [(src, dst, proto, sport, dport) for proto, src, dst, sport, dport, *_ in TABLE + PCAP_VECTORS]
    for seed, column in ((0, 5), (1, 6)):
        expected = ["1:" + row[column] for row in TABLE + PCAP_VECTORS]
        assert community_ids(*_columns(rows), seed=seed).tolist() == expected


def test_columns_match_hashlib_on_random_flows():
    rng = np.random.default_rng(7)
    n = 600
    v4 = rng.random(n) < 0.5
    protos = np.array([1, 6, 17, 58, 132, 0, 46, 47, 255], np.uint8)

    def addresses():
        hi = rng.integers(0, 1 << 63, n, dtype=np.uint64) << np.uint64(1)
        lo = rng.integers(0, 1 << 63, n, dtype=np.uint64) << np.uint64(1)
        mapped = (np.uint64(0xFFFF) << np.uint64(32)) | rng.integers(0, 1 << 32, n, dtype=np.uint64)
        return np.where(v4, np.uint64(0), hi), np.where(v4, mapped, lo)

    (shi, slo), (dhi, dlo) = addresses(), addresses()
    same = rng.random(n) < 0.1                 # equal addresses: the ports decide the order
    dhi[same], dlo[same] = shi[same], slo[same]
    proto = protos[rng.integers(0, len(protos), n)]
    small = rng.random(n) < 0.6                # ICMP types and codes, incl. two-way and one-way ones
    sport = np.where(small, rng.integers(0, 256, n), rng.integers(0, 65536, n)).astype(np.uint16)
    dport = np.where(small, rng.integers(0, 256, n), rng.integers(0, 65536, n)).astype(np.uint16)
    for seed in (0, 1, 0x1234):
        got = community_ids(shi, slo, dhi, dlo, proto, sport, dport, seed=seed)

        def packed(hi, lo, four):
            raw = int(hi).to_bytes(8, "big") + int(lo).to_bytes(8, "big")
            return raw[12:] if four else raw

        expected = [community_id(packed(shi[i], slo[i], v4[i]), packed(dhi[i], dlo[i], v4[i]), int(proto[i]),
                                 int(sport[i]), int(dport[i]), seed=seed) for i in range(n)]
        assert got.tolist() == expected
    assert {int(p) for p in proto} == {int(p) for p in protos}
