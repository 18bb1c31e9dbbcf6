"""`where=` of the notebook API: a pandas query over the packet table, read and checked before a packet is.

`Capture.packets_frame(columns, where="proto == 'tcp' and dest_port == 443")`
keeps the packets for which a pandas expression (DataFrame.eval's syntax:
`==`, `!=`, `<`, `in [...]`, `and`, `or`, `not`, `.isna()`, `.str.`...) is
true. `compile_where` reads the expression once, against the table's
columns (detector.packet_view), so that a mistake is one QueryError saying
what to write instead, before the capture is read:

- a name that is no packet column gives the nearest ones; a Wireshark field
  (`tcp.port`, `ip.src`, `frame.len`, ...), Zeek's (`id.orig_h`) or a
  protocol's name (`tcp`) gives the column that holds it here;
- `=` for `==`, `&&`, `||`, `!`, an address left unquoted, `is None`, a
  number column compared with text are each named as such;
- text compared with a column of names (proto, quote_proto, outer_proto,
  tunnel, arp_op, pkt_type) is read without regard to case, as Wireshark
  reads a protocol's name: `proto == 'TCP'` is `proto == 'tcp'`, the
  findings' spelling and the packets' alike. A number compares as its name
  (`proto == 6` is `proto == 'tcp'`, Wireshark's `ip.proto == 6`); `proto`
  holds names only, so a number without one (`proto == 89`) is an error
  naming `ip_proto == 89`, and a word that is no value of the column is an
  error listing its values, never a silent 0 rows;
- a MAC address compares in either case, with `:` or `-`; an IP address in
  any spelling of it (`'2001:DB8:0::1'` is the table's `2001:db8::1`); a
  time as text is a time (`time >= '2024-03-01 12:00'`), UTC unless it says;
- `@name` is the caller's variable, as in DataFrame.query.
"""
from __future__ import annotations

import ast
import io
import ipaddress
import re
import tokenize

import numpy as np
import pandas as pd

from . import packet_view
from .errors import QueryError

# What a local variable (`@name`) is called while the expression is read as Python (where `@` is an operator).
_LOCAL = "__where_local_"
# What a value made here (a time) is called in the expression: pandas reads it as a local variable.
_VALUE = "__where_value_"
_MAC = re.compile(r"[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}")
# Outside strings: an IPv4 address or a MAC address Wireshark-style, unquoted.
_BARE_ADDRESS = re.compile(r"\b\d{1,3}(\.\d{1,3}){3}\b|\b[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}\b")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_NAME_KINDS = ("category",)
_NUMBER_KINDS = ("int", "layers", "flag")
_TEXT_KINDS = ("mac", "ip", "ipv4")
_EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


class Where:
    """A checked where= expression: `text` for pandas, the packet `columns` it reads, the caller's variables it
    names; `mask(frame)` is its boolean per row of a frame holding those columns (<NA>: not kept)."""

    def __init__(self, source: str, text: str, columns: list[str], local_dict: dict):
        self.source = source
        self.text = text
        self.columns = columns
        self.local_dict = local_dict

    def evaluate(self, frame: pd.DataFrame):
        try:
            return frame.eval(self.text, local_dict=self.local_dict, global_dict={})
        except (ValueError, TypeError, KeyError, AttributeError, NameError, SyntaxError, NotImplementedError) as exc:
            # pandas' own words about an expression that is valid Python but not a query it evaluates
            raise QueryError(f"where: {self.source!r}: {exc}") from None

    def mask(self, frame: pd.DataFrame) -> np.ndarray:
        return pd.array(self.evaluate(frame), dtype="boolean").fillna(False).to_numpy(dtype=bool)


def compile_where(source: str, scope: dict | None = None) -> Where:
    """`source` read and checked against the packet columns (see the module docstring); `scope`: the caller's
    variables, for `@name`. Raises QueryError naming the first thing wrong and what to write instead."""
    scope = scope or {}
    python, local_names = _python_text(source)
    try:
        tree = ast.parse(python.strip(), mode="eval")
    except SyntaxError as exc:
        raise QueryError(_syntax_message(source, exc)) from None
    missing = [name for name in local_names if name not in scope]
    if missing:
        raise QueryError(f"where: @{missing[0]} is no variable where packets_frame was called")
    checker = _Checker({_LOCAL + name: scope[name] for name in local_names})
    tree = checker.visit(tree)
    if checker.unknown:
        raise QueryError(f"where: {packet_view.unknown_column(checker.unknown[0])}")
    local_dict = {**checker.locals, **checker.values}
    if not checker.columns:
        raise QueryError(f"where: {source!r} names no packet column: it would keep every packet or none")
    columns = [name for name in packet_view.COLUMNS if name in checker.columns]
    where = Where(source, _pandas_text(ast.unparse(tree)), columns, local_dict)
    _check_on_no_rows(where)
    return where


def _python_text(source: str) -> tuple[str, list[str]]:
    """`source` with each `@name` made a plain name (Python reads `@` as an operator), and the names; a
    QueryError for `=` where `==` is meant, and for Wireshark's `&&` and `||`."""
    tokens = _tokens(source)
    lines = source.splitlines(keepends=True) or [""]
    edits = []      # (row, column) of each `@` to replace by _LOCAL
    local_names = []
    depth = 0
    for i, token in enumerate(tokens):
        if token.type != tokenize.OP:
            continue
        if token.string in "([{":
            depth += 1
        elif token.string in ")]}":
            depth -= 1
        elif token.string == "=" and depth == 0:
            left, right = source[:_offset(lines, token.start)].strip(), source[_offset(lines, token.end):].strip()
            raise QueryError(f"where: {source!r}: `=` assigns; compare with `==`: {left} == {right}")
        elif token.string == "@" and i + 1 < len(tokens) and tokens[i + 1].type == tokenize.NAME:
            edits.append(token.start)
            local_names.append(tokens[i + 1].string)
    for wrong, right in (("&&", "and"), ("||", "or")):
        if wrong in _outside_strings(source, tokens):
            raise QueryError(f"where: {source!r}: write `{right}`, not `{wrong}` (Wireshark's)")
    text = source
    for start in sorted(edits, reverse=True):
        at = _offset(lines, start)
        text = text[:at] + _LOCAL + text[at + 1:]
    return text, local_names


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as exc:      # an unclosed bracket or string
        raise QueryError(f"where: {source!r} is not an expression: {exc.args[0]}") from None


def _offset(lines: list[str], position: tuple[int, int]) -> int:
    """The character offset in the source of a token's (row, column)."""
    row, column = position
    return sum(len(line) for line in lines[:row - 1]) + column


def _outside_strings(source: str, tokens) -> str:
    """`source` with its string literals blanked (an address or `&&` inside quotes is text, not syntax)."""
    lines = source.splitlines(keepends=True) or [""]
    text = list(source)
    for token in tokens:
        if token.type == tokenize.STRING:
            for at in range(_offset(lines, token.start), _offset(lines, token.end)):
                text[at] = " "
    return "".join(text)


def _syntax_message(source: str, exc: SyntaxError) -> str:
    """What is wrong with an expression Python cannot read: the common Wireshark habits first."""
    bare = _outside_strings(source, _tokens(source))
    for dotted in _DOTTED.findall(bare):
        if _foreign(dotted):
            return f"where: {packet_view.unknown_column(dotted)}"
    address = _BARE_ADDRESS.search(bare)
    if address:
        return f"where: {source!r}: quote the address: '{address.group(0)}'"
    if re.search(r"!(?!=)", bare):
        return f"where: {source!r}: write `not`, not `!` (Wireshark's)"
    return (f"where: {source!r} is not an expression ({exc.msg}); compare a column with ==, !=, <, in [...], "
            "join conditions with and, or")


def _pandas_text(python: str) -> str:
    """The expression unparsed, each local variable `@name` again (pandas' way of naming one)."""
    out = []
    for token in tokenize.generate_tokens(io.StringIO(python).readline):
        if token.type == tokenize.NAME and token.string.startswith((_LOCAL, _VALUE)):
            out.append((token.start[1], token.end[1]))
    for start, end in reversed(out):
        python = python[:start] + "@" + python[start:end] + python[end:]
    return python


def _check_on_no_rows(where: Where) -> None:
    """Evaluate on a typed table of no rows: pandas' type errors now, not after reading the capture, and an
    expression that is no condition (`dest_port + 1`) named as such."""
    empty = {name: np.zeros(0, dtype=np.uint64) for name in packet_view.sources(where.columns) | {"rss_queue"}}
    result = where.evaluate(packet_view.frame_of(empty, where.columns))
    if not isinstance(result, pd.Series) or not pd.api.types.is_bool_dtype(result.dtype):
        raise QueryError(f"where: {where.source!r} is not a condition (true or false for each packet)")


def _foreign(dotted: str) -> bool:
    """Whether `a.b.c` is a field of another tool's (Wireshark's frame.len, tcp.port), not a column's attribute
    (src_ip.str.startswith) or a variable's (@limits.max)."""
    if dotted in packet_view.OTHER_NAMES or dotted.startswith("tcp.flags."):
        return True
    return dotted.split(".")[0] not in packet_view.COLUMNS and not dotted.startswith(_LOCAL)


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class _Checker(ast.NodeTransformer):
    """Collects the packet columns an expression reads and the names that are none, and rewrites the literals
    compared with a column into the table's spelling of them."""

    def __init__(self, locals_: dict[str, object]):
        self.columns: set[str] = set()
        self.unknown: list[str] = []
        self.locals = locals_       # the caller's variables, by their _LOCAL names
        self.values: dict[str, object] = {}     # the names of the values made here (_VALUE) -> value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in packet_view.COLUMNS:
            self.columns.add(node.id)
        elif node.id in self.locals:
            # a number or a text (or a list of them) becomes a literal, spelled as the column it meets spells it
            literal = _literal(self.locals[node.id])
            if literal is not None:
                return literal
        elif not node.id.startswith(_VALUE):
            self.unknown.append(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        dotted = _dotted(node)
        if dotted is not None and _foreign(dotted):
            self.unknown.append(dotted)     # tcp.port, frame.len: a Wireshark field, not a column's method
            return node
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name):     # one of pandas' functions (abs, sqrt, ...): pandas checks it
            node.args = [self.visit(arg) for arg in node.args]
            return node
        node = self.generic_visit(node)
        func = node.func
        column = _column_of(func.value) if isinstance(func, ast.Attribute) else None
        if column is not None and func.attr == "isin" and node.args:    # proto.isin(['TCP']): proto in ['TCP']
            node.args[0] = self._spelled(column, node.args[0], ast.In())
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node = self.generic_visit(node)
        operands = [node.left, *node.comparators]
        for k, op in enumerate(node.ops):
            left, right = operands[k], operands[k + 1]
            if isinstance(op, (ast.Is, ast.IsNot)) or _is_none(left) or _is_none(right):
                column = _column_of(left) or _column_of(right) or "dest_port"
                raise QueryError(f"where: a missing field is <NA>, not None: write {column}.isna() or "
                                 f"{column}.notna()")
            for side, other in ((k, right), (k + 1, left)):
                column = _column_of(other)
                if column is not None:
                    operands[side] = self._spelled(column, operands[side], op)
        node.left, node.comparators = operands[0], operands[1:]
        return node


    def _spelled(self, column: str, node: ast.AST, op: ast.cmpop) -> ast.AST:
        """A literal (or a list of them) compared with `column`, as the column spells its values."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            node.elts = [self._spelled(column, elt, op) for elt in node.elts]
            return node
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            return node
        spec = packet_view.COLUMNS[column]
        value = node.value
        if spec.kind in _NUMBER_KINDS and isinstance(value, str):
            raise QueryError(f"where: {column} is a number: compare it with one, not with the text {value!r}")
        if spec.kind == "time" and isinstance(value, str):
            name = f"{_VALUE}{len(self.values)}"
            self.values[name] = _time(value)
            return ast.Name(name, ast.Load())
        if not isinstance(op, _EQUALITY):
            return node
        if spec.kind in _NAME_KINDS:
            return ast.Constant(_name_of(column, spec, value))
        if spec.kind in _TEXT_KINDS:
            if not isinstance(value, str):
                raise QueryError(f"where: {column} is an address: quote it, {column} == '...'")
            return ast.Constant(_mac(column, value) if spec.kind == "mac" else _ip(column, value))
        return node


def _literal(value) -> ast.AST | None:
    """`value` (a caller's variable) as a literal of the expression, if it is text, a whole number or a list of
    them; else None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (str, int)):
        return ast.Constant(value)
    if isinstance(value, (list, tuple, set)) and value:
        elts = [_literal(v) for v in value]
        return ast.List(elts, ast.Load()) if all(elt is not None for elt in elts) else None
    return None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _column_of(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) and node.id in packet_view.COLUMNS else None


def _time(value: str) -> pd.Timestamp:
    """A time as text, as the table's times are: UTC, unless the text names its own offset."""
    try:
        when = pd.Timestamp(value)
    except ValueError:
        raise QueryError(f"where: {value!r} is not a time (write '2024-03-01 12:00:00', UTC)") from None
    return when.tz_localize("UTC") if when.tzinfo is None else when.tz_convert("UTC")


def _name_of(column: str, spec, value) -> str:
    """`value` as the column of names holds it: lower case, a number as its name, or a QueryError listing the
    names."""
    names = spec.names
    text = str(value).strip().lower()
    if isinstance(value, (int, np.integer)) or text.isdigit():
        number = int(text)
        if number in names:
            return names[number]
        if spec.number_column:
            raise QueryError(f"where: {column} holds names and {number} has none: write "
                             f"{spec.number_column} == {number}")
        return text
    vocabulary = [name for name in dict.fromkeys(names.values()) if name]
    if text in vocabulary:
        return text
    numbers = (f"{spec.number_column} == 47 for a protocol without one" if spec.number_column else
               f"a number where no name exists ({column} == 47)")
    raise QueryError(f"where: {column} has no value {value!r}: its values are {', '.join(vocabulary)} "
                     f"(in any case), or {numbers}")


def _mac(column: str, value: str) -> str:
    text = value.strip().lower()
    if not _MAC.fullmatch(text):
        raise QueryError(f"where: {value!r} is not a MAC address for {column} (six bytes in hex: '00:1a:2b:3c:4d:5e')")
    return text.replace("-", ":")


def _ip(column: str, value: str) -> str:
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        raise QueryError(f"where: {value!r} is not an IP address for {column}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped       # the table writes an IPv4 address as such, wherever it came from
    return str(address)
