"""Text from packets and files made safe to show: a terminal's controls made visible, and Markdown that renders as
exactly its text (report.md, and the dissections report/dissect.py quotes). The HTML report escapes with
html.escape; this module is what report.md and Wireshark's view share, so neither imports the other.
"""
from __future__ import annotations

import re

# Characters not whitespace that a terminal or a viewer would act on rather than show: C0 and C1 controls
# (escape sequences) and the bidirectional embeddings, overrides and isolates that reorder what is shown.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Characters that act anywhere in a line in CommonMark or GitHub's dialect, whatever surrounds them: escapes,
# code spans, emphasis, link and image brackets, strikethrough, math.
_MD_INLINE = re.compile(r"([\\`*\[\]~$])")
# An underscore acts (emphasis) only at a word's edge: `completion_known` stays as it is.
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# "<" acts when it opens an HTML tag, comment or declaration, or an autolink; "&" when it begins an entity.
_MD_ANGLE = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?\w+;)")
# What a line may start with to become a block: a heading, quote, list item, or a line of "-" or "=" (a
# thematic break or a setext underline).
_MD_LINE_START = re.compile(r"^(?:#{1,6}|[-+]|\d{1,9}[.)])(?=\s|$)|^>|^(?=[-=]+$)")
# Words a viewer would make a link of (a scheme's "//", an e-mail's "@", a host name: a dot before a letter,
# as "www.evil.example") and addresses: shown as code, where nothing is a link. Sentence punctuation around
# the word stays outside.
_MD_WORD = re.compile(r"^([(\"'<]*)(.*?)([.,;:)!?\"'>]*)$")
_MD_LINKABLE = re.compile(r"//|@|(?<=\w)\.(?=[^\W\d_]{2})|\d\.\d+\.\d+\.\d|(?:^|\[)[0-9a-fA-F]{0,4}:[0-9a-fA-F]{0,4}:")


def control_text(match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(value) -> str:
    """`value` as one line of text with its controls made visible."""
    return CONTROL.sub(control_text, " ".join(str(value).split()))


def markdown_code(value, cell: bool = False) -> str:
    """`value` (text from a packet or a file: an address, a name, a frame's summary) as a markdown code span,
    where a viewer shows it as it is: the fence is longer than any backtick run inside, and in a table `cell` a
    pipe is escaped (GitHub's tables split cells before they read code spans)."""
    text = one_line(value)
    if not text:
        return "-"
    if cell:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# A word none of whose characters can act is left as it is, with one search instead of four substitutions (most
# words of a report).
_MD_MAY_ACT = re.compile(r"[\\`*\[\]~$_<&|]")


def _escape_word(word: str, cell: bool) -> str:
    if not _MD_MAY_ACT.search(word):
        return word
    word = _MD_INLINE.sub(r"\\\1", word)
    word = _MD_UNDERSCORE.sub(r"\\_", word)
    word = _MD_ANGLE.sub(r"\\<", word)
    word = _MD_ENTITY.sub(r"\\&", word)
    return word.replace("|", "\\|") if cell else word


def markdown_text(value, cell: bool = False, line_start: bool = True) -> str:
    """`value`, words that may quote packets, as markdown that renders as exactly its text on one line: only
    what a viewer would act on is escaped (nothing a terminal reader would stumble over), and the words it
    would make a link of, addresses among them, are code. `cell`: the text is a table cell (its pipes
    escaped; no block starts there); `line_start`: the text may begin a line, where a block could start."""
    words = []
    for word in one_line(value).split(" "):
        lead, core, trail = _MD_WORD.match(word).groups()
        if core and _MD_LINKABLE.search(core):
            words.append(_escape_word(lead, cell) + markdown_code(core, cell=cell) + _escape_word(trail, cell))
        else:
            words.append(_escape_word(word, cell))
    text = " ".join(words)
    if cell or not line_start:
        return text
    return _MD_LINE_START.sub(lambda m: "\\" if not m.group() else f"\\{m.group()}" if not m.group()[0].isdigit()
                              else f"{m.group()[:-1]}\\{m.group()[-1]}", text, count=1)
