"""Wireshark's view of the frames a finding cites: tshark's packet details and Expert Info of each, for the report
(under each finding) and the notebook API (`Capture.dissect(frame)`).

detector's columnar decoder is the analysis; Wireshark is the second opinion a reader trusts, so the report
shows, for the first frames of each finding's evidence pcap (the root cause of each incident first, at most
FRAMES_MAX in all), what tshark makes of them: the protocol tree as `tshark -V` prints it and the Expert
Info it raises (a retransmission, a malformed field, a DNS query retransmission, ...).

How, for the report: one sharkd process (Wireshark's own dissection daemon, shipped beside tshark in Debian's
wireshark-common) loads each evidence pcap in turn and answers for its frames, so Wireshark's start-up (most of
a tshark run's cost, ~0.3 s of CPU) is paid once, not once per finding, and each frame is dissected in its own
evidence pcap exactly as Wireshark shows that file (both passes: a conversation's state comes from the whole
file). Name resolution is off as with `tshark -n`, so no lookup leaves the machine. Without sharkd, or where it
fails, one tshark run per evidence pcap (`-n -2 -T pdml`) gives the same view.

For a frame in the notebook (`Capture.dissect`) and that fallback: tshark `-n -T pdml`, with a timeout;
pyshark's own PDML parser makes each frame a pyshark Packet (its layers give the protocols and the Expert
Info), and the protocol tree is read from the same PDML element (pyshark flattens a layer's fields and drops
the layer's title). Not pyshark's FileCapture: it drives tshark through asyncio's run_until_complete on the
thread's loop, which fails inside a notebook's running loop (KimiNewt/pyshark#542), and it has no bound on a
tshark that hangs.

Everything here is packet text: the report escapes it (render.markdown_text, html.escape), and a fenced code
block in report.md is fenced longer than any backtick run inside it. tshark missing, failing or timing out
leaves a note, never a failed analysis.
"""
from __future__ import annotations

import html
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import DetectorError
from .escape import CONTROL, control_text, markdown_text

log = logging.getLogger(__name__)

# Frames dissected per finding: its first ones (the trigger of a loop, the first ICMP and the segment it
# quotes); more make the report longer, not clearer.
FRAMES_PER_FINDING = 3
# Frames dissected in one report: the issue's budget (tshark's start, ~0.3 s a run, is most of the cost).
FRAMES_MAX = 20
# Lines of one frame's tree (a TCP segment takes ~80, a DNS answer a few hundred): the rest is cut, with a count.
LINES_PER_FRAME_MAX = 200
# Characters of one tree line (a payload's hex runs to three per byte): cut with "...".
LINE_CHARS_MAX = 200
# Expert Info entries listed per frame.
EXPERT_MAX = 20
# Seconds one tshark run may take (a cold start on a loaded machine is under one): then it is killed.
TSHARK_TIMEOUT_S = 20.0
# Seconds all the report's tshark runs may take together: past it the rest are left out, with a note.
REPORT_DEADLINE_S = 30.0
# PDML bytes read from one tshark run: an ordinary frame is tens of KB, a pathological one (thousands of tiny
# records) tens of MB; past this it is refused rather than held.
PDML_BYTES_MAX = 64 << 20
# tshark runs at once (each is one process, mostly its start-up).
WORKERS = 4

INSTALL_HINT = "tshark is not installed (Debian/Ubuntu: apt-get install tshark; `make venv` installs it as root)"
# Wireshark's Expert Info severities, lowest to highest (epan/proto.h PI_CHAT .. PI_ERROR)
SEVERITIES = ("Comment", "Chat", "Note", "Warning", "Error")


class DissectError(DetectorError):
    """tshark could not dissect a file: missing, failed, timed out, or gave output that is not PDML."""


@dataclass
class ExpertInfo:
    severity: str       # Wireshark's word: Comment, Chat, Note, Warning, Error
    group: str          # Sequence, Protocol, Malformed, Checksum, ...
    message: str
    protocol: str       # the layer that raised it (pyshark's layer name: "tcp", "dns", "_ws.malformed")


@dataclass
class Dissection:
    """One frame as tshark dissects it."""

    number: int                         # frame number in the file tshark read
    protocols: str                      # frame.protocols: "eth:ethertype:ip:udp:rip"
    tree: list[tuple[int, str]]         # (depth, line) of the packet details, as `tshark -V` prints them
    expert: list[ExpertInfo]
    lines_cut: int = 0                  # tree lines left out (LINES_PER_FRAME_MAX)
    packet: object = None               # the pyshark Packet
    capture_frame: int | None = None    # the frame's number in the analysed capture (report only)
    creator: str = "tshark"             # who dissected it, as the PDML says: "wireshark/4.0.17"


def tshark_path() -> str | None:
    return shutil.which("tshark")


def sharkd_path(tshark: str | None = None) -> str | None:
    """The sharkd installed beside `tshark` (tshark_path()), the same Wireshark: None without one."""
    tshark = tshark or tshark_path()
    if tshark is None:
        return None
    beside = os.path.join(os.path.dirname(os.path.realpath(tshark)), "sharkd")
    return beside if os.access(beside, os.X_OK) else None


# ---- tshark and its PDML -------------------------------------------------------------------------------------
def _run(path: str, capture, count: int, display_filter: str | None, timeout: float,
         two_pass: bool = False) -> bytes:
    """tshark's PDML of the first `count` frames of `capture` (those `display_filter` keeps), read as it comes
    and refused past PDML_BYTES_MAX (a frame of tiny records, say 4,000 DNS answers, dissects to megabytes).
    `two_pass`: the whole file is read first (as Wireshark and sharkd do), then frames 1..count shown."""
    args = [path, "-n", "-r", str(capture), "-T", "pdml"]
    if two_pass:
        display_filter = f"frame.number <= {int(count)}" + (f" && ({display_filter})" if display_filter else "")
        args.append("-2")
    else:
        args += ["-c", str(count)]
    if display_filter:
        args += ["-Y", display_filter]
    try:
        # a session of its own: on a timeout tshark and anything it started (which would hold the pipe) end
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        raise DissectError(f"tshark could not be started: {exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size, err = 0, b""
    with proc, selectors.DefaultSelector() as waiting:
        try:
            for pipe in (proc.stdout, proc.stderr):
                waiting.register(pipe, selectors.EVENT_READ)
            while waiting.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DissectError(f"tshark took longer than {timeout:.0f} s on {capture}: stopped")
                for key, _events in waiting.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        waiting.unregister(key.fileobj)
                    elif key.fileobj is proc.stderr:
                        err = (err + data)[-4096:]
                    elif size + len(data) > PDML_BYTES_MAX:
                        raise DissectError(f"tshark's dissection of {capture} is over {PDML_BYTES_MAX >> 20} MiB: "
                                           "left out")
                    else:
                        chunks.append(data)
                        size += len(data)
            proc.wait(max(deadline - time.monotonic(), 1.0))
        except BaseException:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if proc.returncode != 0:
        lines = [line for line in err.decode("utf-8", "replace").splitlines() if "Running as user" not in line]
        raise DissectError(f"tshark failed on {capture} (exit {proc.returncode}): "
                           f"{(lines[-1] if lines else 'no message')[:300]}")
    return b"".join(chunks)


def _packets(pdml: bytes) -> tuple[str, list]:
    """(the PDML's creator, "wireshark/4.0.17"; its <packet> elements, lxml.objectify as pyshark's parser takes
    them)."""
    from lxml import etree, objectify
    from pyshark.tshark.output_parser.tshark_xml import DEL_BAD_XML_CHARS

    # what pyshark does to each packet: control characters XML 1.0 forbids are dropped; no entity, no network
    text = pdml.decode("utf-8", "replace").translate(DEL_BAD_XML_CHARS)
    parser = objectify.makeparser(huge_tree=True, recover=True, resolve_entities=False, no_network=True)
    try:
        root = objectify.fromstring(text.encode("utf-8"), parser)
    except etree.XMLSyntaxError as exc:
        raise DissectError(f"tshark's output is not PDML: {exc}") from None
    if root is None:
        raise DissectError("tshark gave no PDML")
    return str(root.get("creator") or "tshark")[:40], root.findall("packet")


def _label(element) -> str | None:
    """A tree line as Wireshark shows it: the field's showname, else its bare text (a text item)."""
    return element.get("showname") or element.get("show") or None


def _tree(packet_element) -> list[tuple[int, str]]:
    """(depth, line) of the packet details in Wireshark's order: protocols at depth 0, hidden fields left out,
    geninfo (pyshark's header, not a tree item) skipped. A walk with a stack, not recursion: PDML nests as deep
    as the packet makes it."""
    lines: list[tuple[int, str]] = []
    stack = [(child, 0) for child in reversed(packet_element.getchildren())]
    while stack:
        element, depth = stack.pop()
        if element.tag not in ("proto", "field") or element.get("hide") == "yes":
            continue
        if element.tag == "proto" and element.get("name") == "geninfo":
            continue
        label = _label(element)
        if label is not None:
            lines.append((depth, label))
        inner = depth + 1 if label is not None else depth
        stack.extend((child, inner) for child in reversed(element.getchildren()))
    return lines


def _expert(packet) -> list[ExpertInfo]:
    """The Expert Info of a pyshark Packet: each `_ws.expert` item carries its message, severity and group, in
    that order (epan/expert.c), which pyshark keeps as alternates of one field per layer."""
    out = []
    for layer in [packet.frame_info, *packet.layers]:
        fields = {}
        for name in ("message", "severity", "group"):
            container = layer.get_field(f"_ws.expert.{name}")
            fields[name] = container.all_fields if container is not None else []
        for message, severity, group in zip(fields["message"], fields["severity"], fields["group"]):
            out.append(ExpertInfo(severity=_value(severity), group=_value(group), message=message.show or "",
                                  protocol=layer.layer_name))
    return out


def _value(layer_field) -> str:
    """"Warning" of "Severity level: Warning"."""
    return layer_field.showname_value or layer_field.show or ""


def _bounded(line: str) -> str:
    return line if len(line) <= LINE_CHARS_MAX else line[:LINE_CHARS_MAX - 3] + "..."


def dissect_file(path: str, capture, count: int, display_filter: str | None = None,
                 timeout: float = TSHARK_TIMEOUT_S, two_pass: bool = False) -> list[Dissection]:
    """The first `count` frames of `capture` (those `display_filter` keeps) as tshark dissects them, each with
    its pyshark Packet; trees bounded by LINES_PER_FRAME_MAX and LINE_CHARS_MAX. Raises DissectError."""
    from pyshark.tshark.output_parser.tshark_xml import packet_from_xml_packet

    out = []
    creator, elements = _packets(_run(path, capture, count, display_filter, timeout, two_pass))
    for element in elements:
        packet = packet_from_xml_packet(element)
        tree = _tree(element)
        out.append(Dissection(number=int(packet.number), protocols=str(packet.frame_info.get("protocols") or ""),
                              tree=[(depth, _bounded(line)) for depth, line in tree[:LINES_PER_FRAME_MAX]],
                              expert=_expert(packet), lines_cut=max(0, len(tree) - LINES_PER_FRAME_MAX),
                              packet=packet, creator=creator))
    return out


def tree_text(dissection: Dissection) -> str:
    """The packet details as `tshark -V` indents them (four spaces a level); not escaped."""
    return "\n".join("    " * depth + line for depth, line in dissection.tree)


# ---- sharkd: every evidence pcap in one Wireshark process -----------------------------------------------------
# What `tshark -n` turns off (epan/addr_resolv.c disable_name_resolution), as sharkd preferences.
SHARKD_NO_NAMES = ("nameres.mac_name", "nameres.transport_name", "nameres.network_name",
                   "nameres.dns_pkt_addr_resolution", "nameres.use_external_name_resolver", "nameres.vlan_name",
                   "nameres.ss7_pc_name")
_EXPERT_LABEL = re.compile(r"Expert Info \((\w+)/([^)]*)\): (.*)", re.S)


def _sharkd_requests(files: dict[int, object], counts: dict[int, int]) -> tuple[bytes, list[tuple]]:
    """sharkd's JSON-RPC requests (one per line) and what each answers: ("conf",), ("info",), ("load", index),
    ("frame", index, number)."""
    import json

    lines, meaning = [], []

    def ask(method: str, params: dict | None, what: tuple) -> None:
        request = {"jsonrpc": "2.0", "id": len(meaning) + 1, "method": method}
        if params is not None:
            request["params"] = params
        lines.append(json.dumps(request))
        meaning.append(what)

    for name in SHARKD_NO_NAMES:
        ask("setconf", {"name": name, "value": "FALSE"}, ("conf",))
    ask("info", None, ("info",))
    for index in sorted(files):
        ask("load", {"file": os.fspath(files[index])}, ("load", index))
        for number in range(1, counts[index] + 1):
            ask("frame", {"frame": number, "proto": True}, ("frame", index, number))
    return ("\n".join(lines) + "\n").encode(), meaning


_ANSWER_ID = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(\d{1,9})\s*[,}]')


def _sharkd_answers(path: str, request: bytes, expected: int, timeout: float, take) -> tuple[set[int], bytes]:
    """Run sharkd on `request` (stdin), reading its answers (one JSON line each) until those to the `expected`
    requests (ids 1..expected) came, it ended, or `timeout` passed: each goes to `take(id, line)` as it comes
    (None for a line past PDML_BYTES_MAX), so one answer at a time is held; returns (the ids answered, the tail of
    its stderr). A line that is not an answer to one of them is ignored: an answer is known by its id, never by
    its place."""
    try:
        proc = subprocess.Popen([path, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        raise DissectError(f"sharkd could not be started: {exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout
    answers: set[int] = set()
    line, head, over, err, sent = bytearray(), b"", False, b"", 0
    with proc, selectors.DefaultSelector() as waiting:
        try:
            os.set_blocking(proc.stdin.fileno(), False)
            waiting.register(proc.stdin, selectors.EVENT_WRITE)
            for pipe in (proc.stdout, proc.stderr):
                waiting.register(pipe, selectors.EVENT_READ)
            while len(answers) < expected and any(k.fileobj is not proc.stdin for k in waiting.get_map().values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _events in waiting.select(left):
                    if key.fileobj is proc.stdin:
                        try:
                            sent += os.write(key.fd, request[sent:sent + (1 << 16)])
                        except BrokenPipeError:
                            sent = len(request)
                        if sent >= len(request):
                            waiting.unregister(proc.stdin)   # stdin stays open: sharkd ends when it closes
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        waiting.unregister(key.fileobj)
                    elif key.fileobj is proc.stderr:
                        err = (err + data)[-4096:]
                    else:
                        while data:
                            end = data.find(b"\n")
                            part, data = (data, b"") if end < 0 else (data[:end], data[end + 1:])
                            if len(head) < 64:
                                head += part[:64 - len(head)]
                            if not over:
                                line += part
                                if len(line) > PDML_BYTES_MAX:
                                    over, line = True, bytearray()
                            if end >= 0:
                                found = _ANSWER_ID.match(head)
                                if found and 0 < int(found.group(1)) <= expected:
                                    answers.add(int(found.group(1)))
                                    take(int(found.group(1)), None if over else bytes(line))
                                line, head, over = bytearray(), b"", False
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return answers, err


def _from_tree(nodes: list, number: int, creator: str) -> Dissection:
    """A Dissection of sharkd's frame tree: each node's label ("l") at its depth, a generated one ("g") in
    [brackets] as `tshark -V` prints it; the Expert Info items (filter _ws.expert) with their severity, group and
    message; frame.protocols from its own item. A walk with a stack, not recursion: it nests as deep as the
    packet makes it."""
    tree: list[tuple[int, str]] = []
    expert: list[ExpertInfo] = []
    protocols, total = "", 0
    stack = [(node, 0, "") for node in reversed(nodes if isinstance(nodes, list) else [])]
    while stack:
        node, depth, layer = stack.pop()
        if not isinstance(node, dict):
            continue
        label, name = str(node.get("l", "")), str(node.get("f", ""))
        if depth == 0:
            layer = name
        total += 1
        if len(tree) < LINES_PER_FRAME_MAX:
            tree.append((depth, _bounded(f"[{label}]" if node.get("g") else label)))
        if name.startswith("frame.protocols == ") and label.startswith("Protocols in frame: "):
            protocols = label[len("Protocols in frame: "):]
        children = node.get("n") if isinstance(node.get("n"), list) else []
        if name == "_ws.expert":
            found = _EXPERT_LABEL.fullmatch(label)
            if found:
                severity, group, message = found.groups()
                expert.append(ExpertInfo(severity=severity, group=group, message=message, protocol=layer))
        stack.extend((child, depth + 1, layer) for child in reversed(children))
    return Dissection(number=number, protocols=protocols, tree=tree, expert=expert,
                      lines_cut=max(0, total - LINES_PER_FRAME_MAX), creator=creator)


def dissect_with_sharkd(path: str, files: dict[int, object], counts: dict[int, int],
                        timeout: float = TSHARK_TIMEOUT_S) -> dict[int, list[Dissection] | str]:
    """Frames 1..counts[i] of each file `files[i]`, dissected by one sharkd (`path`): per index its Dissections,
    or why it has none (a file sharkd refused, a frame past its bound). An index missing from the answer is one
    sharkd never answered for (it ended or ran out of `timeout`): the caller dissects it another way."""
    import json

    request, meaning = _sharkd_requests(files, counts)
    result: dict[int, list[Dissection] | str] = {}
    creator = ["wireshark"]

    def take(ident: int, answer: bytes | None) -> None:
        """One answer, made a bounded Dissection (or a note) at once: the raw JSON is not kept."""
        what = meaning[ident - 1]
        kind, index = what[0], (what[1] if len(what) > 1 else None)
        try:
            reply = json.loads(answer) if answer is not None else None
        except ValueError:
            reply = {"error": {"message": "not JSON"}}
        if reply is None:
            result[index] = f"sharkd's dissection of frame {what[2]} is over {PDML_BYTES_MAX >> 20} MiB: left out" \
                if kind == "frame" else "sharkd's answer is too long"
            return
        body = reply.get("result") if isinstance(reply, dict) else None
        problem = reply.get("error") if isinstance(reply, dict) else "not an answer"
        if kind == "info" and isinstance(body, dict):
            version = re.search(r"\d+\.\d+\.\d+", str(body.get("version", "")))
            creator[0] = f"wireshark/{version.group(0)}" if version else "wireshark"
        elif kind == "load":
            if isinstance(body, dict) and body.get("status") == "OK":
                result[index] = []
            else:
                result[index] = f"sharkd could not read it: {_problem(problem)}"
        elif kind == "frame" and isinstance(result.get(index), list):
            if isinstance(body, dict) and "tree" in body:
                result[index].append(_from_tree(body["tree"], what[2], creator[0]))
            else:
                result[index] = f"sharkd failed on frame {what[2]}: {_problem(problem)}"

    answers, _err = _sharkd_answers(path, request, len(meaning), timeout, take)
    # an index whose load or frames were not all answered is tshark's to finish, not a partial view
    for ident, what in enumerate(meaning, start=1):
        if ident not in answers and what[0] in ("load", "frame"):
            result.pop(what[1], None)
    return result


def _problem(error) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    return str(message or "no message")[:300]


# ---- the report's frames -------------------------------------------------------------------------------------
@dataclass
class FindingView:
    pcap: str                                               # the evidence pcap, relative to the output folder
    dissections: list[Dissection] = field(default_factory=list)
    error: str | None = None                                # why tshark gave nothing for it


@dataclass
class Dissections:
    """What the report shows of Wireshark's view: per finding index, its frames; `status`, one line for the top
    of the report (None: nothing was to be dissected)."""

    views: dict[int, FindingView] = field(default_factory=dict)
    status: str | None = None

    def markdown(self, index: int) -> list[str]:
        """report.md lines of finding `index`'s section (empty without dissections)."""
        view = self.views.get(index)
        if view is None:
            return []
        lines = ["", "### Wireshark's view", ""]
        if view.error:
            return [*lines, markdown_text(f"Not shown: {view.error}")]
        for d in view.dissections:
            frame, rest = _heading(d, view.pcap)
            lines += [f"**{markdown_text(frame)}** {markdown_text(rest)}", ""]
            lines += [f"- {markdown_text(_expert_line(e))}" for e in d.expert[:EXPERT_MAX]] or ["- Expert Info: none"]
            lines += ["", *_fenced(_shown_tree(d, view.pcap))]
        return lines

    def html(self, index: int) -> list[str]:
        """report.html elements of finding `index`'s section (empty without dissections)."""
        view = self.views.get(index)
        if view is None:
            return []
        out = ["<h3>Wireshark's view</h3>"]
        if view.error:
            return [*out, f"<p>Not shown: {_e(view.error)}</p>"]
        for k, d in enumerate(view.dissections):
            frame, rest = _heading(d, view.pcap)
            out.append(f'<p class="dissected"><strong>{_e(frame)}</strong>{_e(rest)}</p><ul class="expert">')
            out += [f'<li class="{_e(e.severity.lower())}">{_e(_expert_line(e))}</li>' for e in d.expert[:EXPERT_MAX]]
            out.append("</ul>" if d.expert else "<li>Expert Info: none</li></ul>")
            out.append(f'<details{" open" if k == 0 else ""}><summary>Packet details ({len(d.tree):,} lines)'
                       f'</summary><pre class="dissection">{_e(_shown_tree(d, view.pcap))}</pre></details>')
        return out


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _heading(d: Dissection, pcap: str) -> tuple[str, str]:
    """("Frame 63 of the capture", "(frame 1 of evidence/x.pcap): eth:ethertype:ip:udp:dns")."""
    if d.capture_frame is None:
        return f"Frame {d.number} of {pcap}", f": {d.protocols or '-'}"
    return f"Frame {d.capture_frame:,} of the capture", f" (frame {d.number} of {pcap}): {d.protocols or '-'}"


def _expert_line(e: ExpertInfo) -> str:
    return f"Expert Info ({e.severity}/{e.group}), {e.protocol}: {_bounded(e.message)}"


def _shown_tree(d: Dissection, pcap: str) -> str:
    text = tree_text(d)
    if d.lines_cut:
        text += f"\n... {d.lines_cut:,} more lines: tshark -n -2 -V -r {pcap} -Y frame.number=={d.number}"
    return text


def _fenced(text: str) -> list[str]:
    """`text` as a fenced code block no line of it can close (the fence is longer than any backtick run in it),
    the characters a terminal or viewer would act on shown as \\xNN (render's, as everywhere in the report)."""
    lines = [CONTROL.sub(control_text, line) for line in text.split("\n")]
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}text", *lines, fence]


def plan(findings, evidence, roots: set[int] = frozenset()) -> dict[int, int]:
    """How many leading frames of each finding's evidence pcap to dissect: one each first (the incidents' root
    causes before the rest, then the canonical order), then more up to FRAMES_PER_FINDING, FRAMES_MAX in all."""
    order = sorted((i for i in evidence.frames if findings[i].evidence_pcap), key=lambda i: (i not in roots, i))
    counts = dict.fromkeys(order, 0)
    left = FRAMES_MAX
    for round_ in range(FRAMES_PER_FINDING):
        for i in order:
            if left and counts[i] == round_ and counts[i] < len(evidence.frames[i]):
                counts[i] += 1
                left -= 1
    return {i: n for i, n in counts.items() if n}


def root_causes(findings, incidents) -> set[int]:
    """Indexes of the findings named the root cause of an incident: detector.incidents.Incident (`root_cause` is
    the Finding), or findings.json's incidents (`root_cause` names its rule and identifier; a finding's index or
    its rule alone are read too)."""
    roots = set()
    for incident in incidents or ():
        cause = incident.get("root_cause") if isinstance(incident, dict) else getattr(incident, "root_cause", None)
        ident = incident.get("id") if isinstance(incident, dict) else getattr(incident, "id", None)
        if isinstance(cause, int) and 0 <= cause < len(findings):
            roots.add(cause)
        elif isinstance(cause, dict):
            roots.update(i for i, f in enumerate(findings)
                         if f.rule == cause.get("rule") and f.identifier == cause.get("identifier")
                         and getattr(f, "incident_id", None) == ident)
        elif cause is not None and hasattr(cause, "rule") and hasattr(cause, "identifier"):
            roots.update(i for i, f in enumerate(findings) if f is cause)
        elif isinstance(cause, str):
            roots.update(i for i, f in enumerate(findings)
                         if f.rule == cause and getattr(f, "incident_id", None) == ident)
    return roots


def dissect_evidence(out, findings, evidence, incidents=None) -> Dissections:
    """Wireshark's view of the first frames of each finding's evidence pcap (plan()), read from the output
    folder `out` (output.OutputDir) where this run wrote them. Never raises for tshark: a missing tshark is
    the status, a failing one its finding's error."""
    wanted = plan(findings, evidence, root_causes(findings, incidents))
    result = Dissections()
    if not wanted:
        return result
    path = tshark_path()
    if path is None:
        result.status = f"Wireshark's view of the cited frames is left out: {INSTALL_HINT}."
        return result
    deadline = time.monotonic() + REPORT_DEADLINE_S
    files = {index: out.written_path(findings[index].evidence_pcap) for index in wanted}

    def numbered(index: int, view: FindingView) -> tuple[int, FindingView]:
        for d in view.dissections:
            frames = evidence.frames[index]
            d.capture_frame = frames[d.number - 1] if 0 < d.number <= len(frames) else None
        return index, view

    shark: dict[int, list[Dissection] | str] = {}
    sharkd = sharkd_path(path)
    if sharkd is not None:
        try:
            shark = dissect_with_sharkd(sharkd, files, wanted, timeout=min(TSHARK_TIMEOUT_S, REPORT_DEADLINE_S))
        except DissectError as exc:          # not started: tshark does it all
            log.warning("%s", exc)
        except Exception:                    # a bug of ours on odd JSON must not cost the analysis its report
            log.warning("dissecting with sharkd failed", exc_info=True)

    def one(index: int) -> tuple[int, FindingView]:
        pcap = findings[index].evidence_pcap
        view = FindingView(pcap)
        if index in shark:
            answer = shark[index]
            if isinstance(answer, str):
                view.error = answer
            else:
                view.dissections = answer
            return numbered(index, view)
        left = deadline - time.monotonic()
        if left <= 1:
            view.error = f"the report's {REPORT_DEADLINE_S:g} s for tshark ran out"
            return index, view
        try:
            view.dissections = dissect_file(path, files[index], wanted[index], timeout=min(TSHARK_TIMEOUT_S, left),
                                            two_pass=True)
        except DissectError as exc:
            view.error = str(exc).replace(str(files[index]), pcap)
        except Exception as exc:  # a bug of ours on odd PDML must not cost the analysis its report
            log.warning("dissecting %s failed", pcap, exc_info=True)
            view.error = f"dissecting it failed: {type(exc).__name__}: {exc}"
        return numbered(index, view)

    rest = [index for index in sorted(wanted) if index not in shark]
    result.views = dict(one(index) for index in sorted(wanted) if index in shark)
    if rest:
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(rest))) as pool:
            result.views.update(pool.map(one, rest))
    result.views = dict(sorted(result.views.items()))
    shown = sum(len(v.dissections) for v in result.views.values())
    creators = sorted({d.creator for v in result.views.values() for d in v.dissections}) or ["tshark"]
    failed = sum(1 for v in result.views.values() if v.error)
    by = "sharkd" if shark and not rest else "tshark" if not shark else "sharkd and tshark"
    result.status = (f"Wireshark's view: {shown} cited frame{'s' * (shown != 1)} dissected by {by} "
                     f"({', '.join(creators)}), each in its evidence pcap as Wireshark shows that file: "
                     "packet details and Expert Info under each finding"
                     + (f"; tshark failed on {failed} evidence file{'s' * (failed != 1)}." if failed else "."))
    return result
