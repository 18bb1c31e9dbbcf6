"""Rules: each detector's rule file and declarations, overrides that merge, and mistakes that name file and key."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import detector.rules as rules_module
from detector.detectors import REGISTRY, active_detectors
from detector.errors import RuleError
from detector.findings import SEVERITIES
from detector.rules import (
    ALERT_PARAMS,
    OPTIONAL_KEYS,
    OPTIONAL_TEXT_KEYS,
    REQUIRED_KEYS,
    RULES_DIR,
    Declarations,
    Range,
    declarations,
    explain_text,
    load_rules,
    source_declarations,
)

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
ECHO_CAPTURE = CAPTURES / "echo-loop-rip-ipv4.pcapng"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "detector", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def write_rule(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_every_detector_has_a_rule_file_holding_its_text_only():
    rules = load_rules()
    assert set(rules) == set(REGISTRY)
    for rule_id, rule in rules.items():
        assert Path(rule.path).name == f"{rule_id}.yaml"
        assert rule.severity in SEVERITIES
        assert rule.references and rule.false_positives
        # the tunables have one home, the detector: a default file that set one would be a second
        document = yaml.safe_load((RULES_DIR / f"{rule_id}.yaml").read_text(encoding="utf-8"))
        assert set(REQUIRED_KEYS) <= set(document) <= set(REQUIRED_KEYS + OPTIONAL_TEXT_KEYS + ("relations",)), rule_id
        assert rule.param_values == {} and rule.alert_values == {}


@pytest.mark.parametrize("rule_id", sorted(REGISTRY))
def test_declarations_read_from_the_source_are_the_detectors_own(rule_id):
    cls = REGISTRY[rule_id]
    assert source_declarations(rule_id) == Declarations(cls.PARAMS, ALERT_PARAMS | cls.ALERTS, cls.QUALITY_NEEDS,
                                                        cls.CONTEXT_ONLY) == declarations(rule_id)
    # every detector states its own alert intervals, and every tunable its meaning and trade-off
    assert set(cls.ALERTS) == set(ALERT_PARAMS)
    for name, param in {**cls.PARAMS, **cls.ALERTS}.items():
        assert param.doc.strip() and param.tradeoff.strip(), (rule_id, name)
    rule = load_rules()[rule_id]
    assert rule.params == {name: param.default for name, param in cls.PARAMS.items()}
    assert (rule.suppress_s, rule.resolve_s) == (cls.ALERTS["suppress_s"].default, cls.ALERTS["resolve_s"].default)


def test_a_declaration_that_is_not_data_is_refused_with_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "made_up.py").write_text(
        "import os\n\n\nclass MadeUp(Detector):\n    rule_id = 'made-up'\n    PARAMS = {\n"
        "        'size': Param(int, 2**10, 'bytes', Range(1, 10**6), 'more costs memory'),\n"
        "        'path': Param(str, os.getcwd(), 'where', Range(1, 99), 'anywhere'),\n    }\n")
    monkeypatch.setattr(rules_module, "DETECTORS_DIR", tmp_path)
    source_declarations.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"made_up.py, line 8: .* not `os.getcwd\(\)`"):
            source_declarations("made-up")
        with pytest.raises(LookupError, match="no detector with rule_id 'other-rule'"):
            (tmp_path / "other_rule.py").write_text("class Other:\n    rule_id = 'something-else'\n")
            source_declarations("other-rule")
    finally:
        source_declarations.cache_clear()


def test_rules_and_explain_load_no_detector():
    # the budget of `detector rules` (bench/startup.py): no detector module, hence no numba, numpy or pandas
    probe = ("import sys\nfrom detector.cli import main\nmain(['rules'])\nmain(['explain', 'rss-saturation'])\n"
             "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'numpy', 'pandas')\n"
             "                       or m.startswith('detector.detectors')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "LOADED []"


def test_a_users_copy_of_a_whole_rule_file_of_before_still_loads(tmp_path):
    # rule files used to state every parameter and alert interval; a user's edited copy keeps working
    default = load_rules()["echo-loop"]
    document = {key: getattr(default, key) for key in REQUIRED_KEYS}
    document["params"] = dict(default.params, min_copies=500)
    document["alerts"] = {"suppress_s": 60, "resolve_s": 5}
    write_rule(tmp_path, "echo-loop.yaml", yaml.safe_dump(document, sort_keys=False))
    echo = load_rules(tmp_path)["echo-loop"]
    assert echo.params == dict(default.params, min_copies=500)
    assert (echo.suppress_s, echo.resolve_s) == (60.0, 5.0)
    assert {key: getattr(echo, key) for key in REQUIRED_KEYS} == {key: getattr(default, key) for key in REQUIRED_KEYS}
    assert set(OPTIONAL_KEYS) == {"params", "alerts", "enabled", "relations"}
    assert echo.relations == default.relations


def test_findings_order_puts_rip_trigger_after_echo_loop():
    order = [d.rule_id for d in active_detectors(load_rules())]
    assert order.index("rip-trigger") > order.index("echo-loop")


def test_override_merges_params_and_keeps_other_keys(tmp_path):
    write_rule(tmp_path, "mine.yaml", "id: echo-loop\nseverity: high\nparams:\n  min_copies: 50\n")
    rules = load_rules(tmp_path)
    echo = rules["echo-loop"]
    assert echo.severity == "high"
    assert echo.params["min_copies"] == 50
    assert echo.params["min_rate_pps"] == REGISTRY["echo-loop"].PARAMS["min_rate_pps"].default
    assert echo.title == load_rules()["echo-loop"].title
    assert echo.path.endswith("mine.yaml")
    assert rules["routing-loop"] == load_rules()["routing-loop"]


def test_alert_settings_default_per_rule_and_override_one_key(tmp_path):
    defaults = load_rules()
    for rule_id, rule in defaults.items():
        assert rule.suppress_s == REGISTRY[rule_id].ALERTS["suppress_s"].default > 0
        assert rule.resolve_s == REGISTRY[rule_id].ALERTS["resolve_s"].default > 0
    write_rule(tmp_path, "quiet.yaml", "id: echo-loop\nalerts:\n  suppress_s: 3600\n")
    echo = load_rules(tmp_path)["echo-loop"]
    assert echo.suppress_s == 3600.0
    assert echo.resolve_s == defaults["echo-loop"].resolve_s
    assert "suppress_s = 3600.0 (default 60.0)" in explain_text(echo)


def test_disabled_rule_is_not_run(tmp_path):
    write_rule(tmp_path, "off.yaml", "id: routing-loop\nenabled: false\n")
    ids = [d.rule_id for d in active_detectors(load_rules(tmp_path))]
    assert "routing-loop" not in ids and "echo-loop" in ids


@pytest.mark.parametrize("text, key, reason", [
    ("id: echo-loop\ncolour: red\n", "colour", "unknown key"),
    ("id: echo-loop\nseverity: urgent\n", "severity", "not one of"),
    ("id: echo-loop\nparams:\n  min_copy: 5\n", "params.min_copy", "unknown parameter"),
    ("id: echo-loop\nparams:\n  min_copies: many\n", "params.min_copies", "expected int"),
    ("id: echo-loop\nparams:\n  min_copies: true\n", "params.min_copies", "expected int"),
    ("id: echo-loop\nparams:\n  min_rate_pps: -3\n", "params.min_rate_pps", "outside the allowed range 1.."),
    ("id: echo-loop\nparams:\n  high_share_ratio: 20\n", "params.high_share_ratio", "allowed range 0..1"),
    ("id: echo-loop\nparams: [1, 2]\n", "params", "mapping"),
    ("id: echo-loop\nreferences: just one\n", "references", "list of strings"),
    ("id: echo-loop\ntitle: ''\n", "title", "non-empty"),
    ("id: echo-loop\nenabled: maybe\n", "enabled", "true or false"),
    ("id: no-such-rule\n", "id", "no detector implements"),
    ("title: x\n", "id", "missing"),
    ("id: rip-trigger\nparams:\n  local_networks: [10.0.0.0/33]\n", "params.local_networks", None),
    ("id: echo-loop\nalerts: 60\n", "alerts", "mapping"),
    ("id: echo-loop\nalerts:\n  suppress: 60\n", "alerts.suppress", "unknown setting"),
    ("id: echo-loop\nalerts:\n  suppress_s: soon\n", "alerts.suppress_s", "expected float"),
    ("id: echo-loop\nalerts:\n  resolve_s: 0\n", "alerts.resolve_s", "outside the allowed range 0.001..604,800"),
    ("id: echo-loop\nalerts:\n  suppress_s: -5\n", "alerts.suppress_s", "outside the allowed range"),
    ("id: echo-loop\nrelations: [causes]\n", "relations", "mapping of causes, same_flow"),
    ("id: echo-loop\nrelations:\n  triggers: [rip-trigger]\n", "relations.triggers", "unknown relation"),
    ("id: echo-loop\nrelations:\n  causes: rss-saturation\n", "relations.causes", "list of rule ids"),
    ("id: echo-loop\nrelations:\n  causes: [rss-saturaton]\n", "relations.causes",
     "names no rule (did you mean 'rss-saturation'?)"),
    ("id: echo-loop\nrelations:\n  causes: [echo-loop]\n", "relations.causes", "is this rule"),
    ("id: echo-loop\nrelations:\n  same_flow: [scan, scan]\n", "relations.same_flow", "names a rule twice"),
    ("id: echo-loop\nrelations:\n  causes: all\n", "relations.causes", "list of rule ids"),
    ("id: capture-loss\nrelations:\n  weakens: everything\n", "relations.weakens", "or `all`"),
])
def test_bad_rule_file_names_file_and_key(tmp_path, text, key, reason):
    path = write_rule(tmp_path, "bad.yaml", text)
    with pytest.raises(RuleError) as info:
        active_detectors(load_rules(tmp_path))
    assert info.value.key == key
    assert str(path) in str(info.value)
    if reason:
        assert reason in info.value.reason


@pytest.mark.parametrize("text, key, reason", [
    ("id: $6$Qy7rT2sa$Wq1bC0ffee\n", "id", "no detector implements this id (known: "),
    ("id: echo-lop\n", "id", "no detector implements this id (did you mean 'echo-loop'?) (known: "),
    ("id: echo-loop\nseverity: $6$Qy7rT2sa$Wq1bC0ffee\n", "severity", "not one of info, low, medium, high, critical"),
    ("id: echo-loop\nparams:\n  min_copies: $6$Qy7rT2sa$Wq1bC0ffee\n", "params.min_copies", "expected int, got str"),
    ("id: echo-loop\nrelations:\n  causes: [$6$Qy7rT2sa$Wq1bC0ffee]\n", "relations.causes", "names no rule (known: "),
])
def test_a_bad_value_is_never_shown(tmp_path, text, key, reason):
    # a rules folder holding a file it should not (a password hash where a value belongs): the error names the
    # file and key and says what is wrong, and the hash never reaches stderr
    path = write_rule(tmp_path, "bad.yaml", text)
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert str(info.value).startswith(f"{path}: key '{key}': {reason}"), str(info.value)
    assert "Qy7rT2sa" not in str(info.value)


@pytest.mark.parametrize("text, reason", [
    ("id: [unclosed\n", "not valid YAML: line 2"),
    ("- a\n- list\n", "one mapping"),
    ("", "one mapping"),
])
def test_unreadable_rule_file(tmp_path, text, reason):
    path = write_rule(tmp_path, "broken.yaml", text)
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert reason in str(info.value) and str(path) in str(info.value)


def test_deeply_nested_rule_file_is_one_line_error_not_a_dead_process(tmp_path):
    # a site file needs a depth guard of its own (test_site.py); a rule file relies on libyaml's parser, which
    # refuses more than 1,000 levels before anything recurses: kept that way, in a process of its own
    write_rule(tmp_path, "rip-trigger.yaml", "id: rip-trigger\nparams:\n  x: " + "[" * 100_000 + "]" * 100_000 + "\n")
    done = subprocess.run([sys.executable, "-m", "detector", "explain", "rip-trigger", "--rules", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.strip() == (f"detector: error: {tmp_path / 'rip-trigger.yaml'}: not valid YAML: line 3: "
                                   "nested more than 1,000 levels deep")


def test_rule_file_limits(tmp_path):
    write_rule(tmp_path / "a", "x.yaml", "id: echo-loop\n" + "# padding\n" * 40000)
    with pytest.raises(RuleError, match="larger than a rule file"):
        load_rules(tmp_path / "a")
    write_rule(tmp_path / "b", "one.yaml", "id: echo-loop\n")
    write_rule(tmp_path / "b", "two.yaml", "id: echo-loop\n")
    with pytest.raises(RuleError, match=r"defined in one\.yaml too"):
        load_rules(tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "latin1.yaml").write_bytes(b"id: echo-loop\ntitle: caf\xe9\n")
    with pytest.raises(RuleError, match="not UTF-8"):
        load_rules(tmp_path / "c")
    with pytest.raises(RuleError, match="not a folder"):
        load_rules(tmp_path / "missing")


def test_default_rule_file_must_match_its_name_and_a_detector(tmp_path, monkeypatch):
    write_rule(tmp_path / "a", "echo-loop.yaml", (RULES_DIR / "routing-loop.yaml").read_text())
    monkeypatch.setattr(rules_module, "RULES_DIR", tmp_path / "a")
    with pytest.raises(RuleError, match="differs from the file name"):
        rules_module.load_rules()
    text = (RULES_DIR / "routing-loop.yaml").read_text().replace("id: routing-loop", "id: bgp-flap")
    write_rule(tmp_path / "b", "bgp-flap.yaml", text)
    monkeypatch.setattr(rules_module, "RULES_DIR", tmp_path / "b")
    with pytest.raises(RuleError, match=r"no detector implements 'bgp-flap' \(no module .*/bgp_flap.py"):
        rules_module.load_rules()


def test_explain_text_has_every_section_and_each_tunables_trade_off():
    for rule in load_rules().values():
        text = explain_text(rule)
        for section in ("What it detects", "Why it matters", "Parameters", "Site file (--site)",
                        "Live alerts (detector watch)", "False positives", "Remediation", "References"):
            assert f"\n{section}\n" in text, (rule.id, section)
        flowing = " ".join(text.split())
        declared = declarations(rule.id)
        for name, param in [*declared.params.items(), *declared.alerts.items()]:
            assert f"\n  {name} = " in text
            assert " ".join(param.tradeoff.split()) in flowing, (rule.id, name)
        assert max(len(line) for line in text.splitlines() if "://" not in line) <= 100


def test_relations_load_and_explain_prints_them_from_both_ends(tmp_path):
    rules = load_rules()
    assert rules["rip-trigger"].relations["causes"] == ("echo-loop",)
    assert rules["capture-loss"].relations == {"weakens": "all"}
    loop = explain_text(rules["echo-loop"], rules)
    section = loop[loop.index("\nRelations"):loop.index("\nLive alerts")]
    assert "  causes: rss-saturation, unicast-flood, ospf-instability\n" in section
    assert "  caused by: rip-trigger\n" in section
    assert "  weakened by: capture-loss\n" in section
    # a symmetric relation reads the same from the other file
    assert "  same flow: pmtud-blackhole\n" in explain_text(rules["mss-violation"], rules)
    # an override changes one kind and keeps the others
    write_rule(tmp_path, "rip.yaml", "id: rip-trigger\nrelations:\n  causes: []\n")
    changed = load_rules(tmp_path)["rip-trigger"].relations
    assert changed["causes"] == () and changed["same_host"] == rules["rip-trigger"].relations["same_host"]


def test_cli_rules_and_explain(tmp_path):
    proc = run_cli("rules")
    assert proc.returncode == 0, proc.stderr
    for rule_id in ("echo-loop", "routing-loop", "rip-trigger"):
        assert rule_id in proc.stdout
    proc = run_cli("explain", "rip-trigger")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rip-trigger: ")
    assert "many_targets_count = 5" in proc.stdout
    proc = run_cli("explain", "no-such-rule")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown rule 'no-such-rule'" in proc.stderr


def test_cli_analyze_with_rules_dir(tmp_path):
    # a threshold above the loop's 6,000 copies silences echo-loop; rip-trigger still sees the probe
    write_rule(tmp_path / "rules", "echo.yaml", "id: echo-loop\nparams:\n  min_copies: 10000\n")
    proc = run_cli("analyze", ECHO_CAPTURE, "-o", tmp_path / "out", "--rules", tmp_path / "rules")
    assert proc.returncode == 0, proc.stderr
    rules = {f["rule"] for f in json.loads((tmp_path / "out" / "findings.json").read_text())["findings"]}
    assert "echo-loop" not in rules and "rip-trigger" in rules
    assert "Probe to the RIP ports" in proc.stdout and "loop" not in proc.stdout.lower()
    bad = write_rule(tmp_path / "bad", "echo.yaml", "id: echo-loop\nparams:\n  min_copies: -1\n")
    proc = run_cli("analyze", ECHO_CAPTURE, "-o", tmp_path / "out2", "--rules", tmp_path / "bad")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "params.min_copies" in lines[0]
    assert not (tmp_path / "out2" / "findings.json").exists()


@pytest.mark.parametrize("rule_id, name", [(rule_id, name) for rule_id, cls in sorted(REGISTRY.items())
                                           for name in sorted(cls.PARAMS)])
def test_every_parameter_has_a_range_holding_its_default(rule_id, name):
    param = REGISTRY[rule_id].PARAMS[name]
    if param.kind is bool:
        assert param.range is None
        return
    assert isinstance(param.range, Range) and param.default in param.range, (rule_id, name)
    # the range shows where the parameters are documented
    text = " ".join(explain_text(load_rules()[rule_id]).split())
    assert f"{name} = {param.default!r} [{param.kind.__name__}, {param.allowed()}]" in text


# (rule file text, key, the range the message states); each through the command line
OUT_OF_RANGE = [
    ("id: echo-loop\nparams:\n  min_rate_pps: " + "9" * 400 + "\n", "params.min_rate_pps",
     "a 400-digit number is outside the allowed range 1..10,000,000,000"),
    ("id: echo-loop\nalerts:\n  suppress_s: " + "9" * 400 + ".5\n", "alerts.suppress_s",
     "inf is outside the allowed range 0.001..604,800"),
    ("id: echo-loop\nalerts:\n  resolve_s: " + "9" * 400 + "\n", "alerts.resolve_s",
     "a 400-digit number is outside the allowed range 0.001..604,800"),
    ("id: rss-saturation\nparams:\n  bin_ms: 1e-300\n", "params.bin_ms",
     "1e-300 is outside the allowed range 0.001..3,600,000"),
    ("id: rss-saturation\nparams:\n  queues: 1000000000000\n", "params.queues",
     "1000000000000 is outside the allowed range 1..1,024"),
    ("id: rss-saturation\nparams:\n  queues: 50000000\n", "params.queues",
     "50000000 is outside the allowed range 1..1,024"),
    ("id: rss-saturation\nparams:\n  min_share_ratio: .nan\n", "params.min_share_ratio",
     "nan is outside the allowed range 0..1"),
    ("id: echo-loop\nparams:\n  high_rate_pps: .inf\n", "params.high_rate_pps",
     "inf is outside the allowed range 1..10,000,000,000"),
    ("id: rss-saturation\nparams:\n  indirection_table_size: 96\n", "params.indirection_table_size",
     "96 is outside the allowed range a power of two in 1..4,096"),
    ("id: rss-saturation\nparams:\n  indirection_table_size: 8192\n", "params.indirection_table_size",
     "8192 is outside the allowed range a power of two in 1..4,096"),
    ("id: routing-loop\nparams:\n  max_ttl_step: 256\n", "params.max_ttl_step", "outside the allowed range 1..255"),
    # RFC 791: every IPv4 link carries 68-byte datagrams
    ("id: mss-violation\nparams:\n  link_mtu_bytes: 67\n", "params.link_mtu_bytes",
     "67 is outside the allowed range 68..65,536"),
]


@pytest.mark.parametrize("text, key, message", OUT_OF_RANGE,
                         ids=[f"{key}:{message[:20]}" for _, key, message in OUT_OF_RANGE])
def test_cli_refuses_a_value_outside_its_range_in_one_line(tmp_path, text, key, message):
    bad = write_rule(tmp_path / "rules", "bad.yaml", text)
    proc = run_cli("analyze", ECHO_CAPTURE, "-o", tmp_path / "out", "--rules", tmp_path / "rules")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert str(bad) in lines[0] and f"'{key}'" in lines[0] and message in lines[0], lines[0]
    assert not (tmp_path / "out" / "findings.json").exists()


@pytest.mark.parametrize("text, rule_id, expected", [
    ("id: rss-saturation\nparams:\n  queues: 1024\n  indirection_table_size: 4096\n  bin_ms: 1e-3\n", "rss-saturation",
     {"queues": 1024, "indirection_table_size": 4096, "bin_ms": 0.001}),
    ("id: echo-loop\nparams:\n  min_copies: 2\n  high_share_ratio: 1\nalerts:\n  resolve_s: 604800\n", "echo-loop",
     {"min_copies": 2, "high_share_ratio": 1.0, "resolve_s": 604800.0}),
])
def test_values_at_the_ends_of_their_ranges_are_accepted(tmp_path, text, rule_id, expected):
    # `1e-3` is a string to YAML 1.1 (PyYAML) and a float to YAML 1.2: read as the float meant
    write_rule(tmp_path, "edge.yaml", text)
    rule = load_rules(tmp_path)[rule_id]
    assert {name: rule.params.get(name, getattr(rule, name, None)) for name in expected} == expected
    assert all(isinstance(rule.params.get(name, 0.0), float) for name in ("bin_ms", "high_share_ratio"))
    assert active_detectors({rule_id: rule})
