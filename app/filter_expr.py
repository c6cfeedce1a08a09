"""The Runs page's filter expression: a small grammar over run fields, params and metrics, parsed here and
evaluated row by row. Nothing is passed to eval(): the text can only name values and compare them.

    family = "scornn" and rho > 0.3 and val/acc > 0.9
    (task in ("copying", "adding") or steps >= 1000) and not status = "failed"
    `duration (s)` < 60 and model.hidden_size != null

Grammar (case-insensitive keywords):

    expr       := conj ("or" conj)*
    conj       := unary ("and" unary)*
    unary      := "not" unary | "(" expr ")" | comparison
    comparison := operand OP operand | operand ["not"] "in" "(" literal ("," literal)* ")"
    OP         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">=" | "~"      (~: contains the text, any case)
    operand    := NAME | literal
    literal    := NUMBER | "text" | 'text' | true | false | null

A NAME is letters, digits and _ . / : - (starting with a letter or _), or any text in backticks. A value
that a run lacks is null: it equals only null, and every other comparison with it is false. An expression is at
most MAX_LENGTH characters, its brackets and "not"s nested at most MAX_DEPTH deep (the URL's ?where= is anyone's).
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "none"}
MAX_LENGTH = 2000  # characters of an expression
MAX_DEPTH = 50  # brackets and "not"s nested in one another
TOKEN = re.compile(  # each alternative matches one way only: a failed match backtracks linearly, not quadratically
    r"""\s*(?:
    (?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<quoted>`[^`]+`)
  | (?P<name>[A-Za-z_][\w./:-]*)
  | (?P<op>==|!=|<=|>=|=|<|>|~)
  | (?P<punct>[(),])
    )""",
    re.VERBOSE,
)


class FilterError(ValueError):
    """A filter expression that cannot be read or evaluated; the message says where and how to fix it."""


@dataclass(frozen=True)
class Token:
    kind: str  # number | string | name | keyword | op | punct | end
    value: Any
    at: int  # 1-based column in the text


@dataclass(frozen=True)
class Name:
    name: str
    at: int


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class Compare:
    op: str
    left: Name | Literal
    right: Name | Literal | tuple[Any, ...]  # a tuple for "in"
    at: int


@dataclass(frozen=True)
class Logic:
    op: str  # and | or | not
    terms: tuple[Node, ...]


Node = Compare | Logic


def tokenize(text: str) -> list[Token]:
    tokens, position, end = [], 0, len(text.rstrip())
    while position < end:
        match = TOKEN.match(text, position)
        if match is None or match.end() == position:
            start = len(text) - len(text[position:].lstrip())
            raise FilterError(
                f"at column {start + 1}: cannot read {text[start : start + 12]!r}; quote text values "
                '("scornn") and put names with spaces in backticks (`duration (s)`)'
            )
        kind = match.lastgroup
        raw = match.group(kind)
        at = match.start(kind) + 1
        if kind == "number":
            tokens.append(Token("number", float(raw) if any(c in raw for c in ".eE") else int(raw), at))
        elif kind == "string":
            tokens.append(Token("string", re.sub(r"\\(.)", r"\1", raw[1:-1]), at))
        elif kind == "quoted":
            tokens.append(Token("name", raw[1:-1], at))
        elif kind == "name" and raw.lower() in KEYWORDS:
            tokens.append(Token("keyword", raw.lower(), at))
        else:
            tokens.append(Token(kind, raw, at))
        position = match.end()
    tokens.append(Token("end", None, len(text) + 1))
    return tokens


def _shown(token: Token) -> str:
    return "the end" if token.kind == "end" else repr(str(token.value))


class _Parser:
    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.i = self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def keyword(self, word: str) -> bool:
        if self.peek().kind == "keyword" and self.peek().value == word:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: str, what: str) -> None:
        token = self.take()
        if token.kind != kind or token.value != value:
            raise FilterError(f"at column {token.at}: expected {what}, found {_shown(token)}")

    def expression(self) -> Node:
        terms = [self.conjunction()]
        while self.keyword("or"):
            terms.append(self.conjunction())
        return terms[0] if len(terms) == 1 else Logic("or", tuple(terms))

    def conjunction(self) -> Node:
        terms = [self.unary()]
        while self.keyword("and"):
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else Logic("and", tuple(terms))

    def unary(self) -> Node:
        token = self.peek()
        if (token.kind, token.value) not in (("keyword", "not"), ("punct", "(")):
            return self.comparison()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(
                f"at column {token.at}: brackets and 'not's nest more than {MAX_DEPTH} deep; "
                "write the expression flatter"
            )
        self.take()
        if token.value == "not":
            inner = Logic("not", (self.unary(),))
        else:
            inner = self.expression()
            self.expect("punct", ")", "')' closing the bracket")
        self.depth -= 1
        return inner

    def operand(self) -> Name | Literal:
        token = self.take()
        if token.kind == "name":
            return Name(token.value, token.at)
        if token.kind in ("number", "string"):
            return Literal(token.value)
        if token.kind == "keyword" and token.value in ("true", "false", "null", "none"):
            return Literal({"true": True, "false": False}.get(token.value))
        raise FilterError(f"at column {token.at}: expected a name or a value, found {_shown(token)}")

    def literal_list(self) -> tuple[Any, ...]:
        self.expect("punct", "(", "'(' after 'in'")
        values = []
        while True:
            item = self.operand()
            if isinstance(item, Name):
                raise FilterError(f"at column {item.at}: the list after 'in' holds values; quote text: \"{item.name}\"")
            values.append(item.value)
            token = self.take()
            if token.kind == "punct" and token.value == ")":
                return tuple(values)
            if not (token.kind == "punct" and token.value == ","):
                raise FilterError(f"at column {token.at}: expected ',' or ')' in the list, found {_shown(token)}")

    def comparison(self) -> Compare:
        left = self.operand()
        token = self.peek()
        negated = self.keyword("not")
        if self.keyword("in"):
            compare = Compare("in", left, self.literal_list(), token.at)
            return Compare("not in", left, compare.right, token.at) if negated else compare
        if negated:
            raise FilterError(f"at column {token.at}: 'not' here must be followed by 'in'")
        token = self.take()
        if token.kind != "op":
            subject = left.name if isinstance(left, Name) else repr(left.value)
            raise FilterError(
                f"at column {token.at}: expected a comparison (= != < <= > >= ~ in) after {subject!r}, "
                f"found {_shown(token)}"
            )
        return Compare(token.value, left, self.operand(), token.at)


def parse(text: str) -> Node | None:
    """The expression's tree, or None for an empty text; FilterError naming the column of a mistake."""
    if len(text) > MAX_LENGTH:
        raise FilterError(f"the expression is {len(text):,} characters long; at most {MAX_LENGTH:,} are read")
    parser = _Parser(text)
    if parser.peek().kind == "end":
        return None
    tree = parser.expression()
    if parser.peek().kind != "end":
        token = parser.peek()
        raise FilterError(f"at column {token.at}: expected 'and', 'or' or the end, found {_shown(token)}")
    return tree


def names(node: Node | None) -> list[Name]:
    """Every name the expression reads, in order."""
    if node is None:
        return []
    if isinstance(node, Logic):
        return [n for term in node.terms for n in names(term)]
    return [side for side in (node.left, node.right) if isinstance(side, Name)]


def resolve(name: str, known: Sequence[str]) -> str:
    """The known column a name means: itself, else the one dotted/slashed key it ends (rho ->
    model.family_args.rho); FilterError listing the candidates when it is unknown or ambiguous."""
    if name in known:
        return name
    lowered = {k.lower(): k for k in known}
    if name.lower() in lowered:
        return lowered[name.lower()]
    endings = [k for k in known if re.split(r"[./]", k)[-len(re.split(r"[./]", name)) :] == re.split(r"[./]", name)]
    if len(endings) == 1:
        return endings[0]
    if endings:
        raise FilterError(f"{name!r} could mean {', '.join(sorted(endings)[:6])}: write the full name")
    by_tail = {re.split(r"[./]", k)[-1]: k for k in known}  # a misspelt short name (rhoo) finds its param too
    close = [by_tail.get(c, c) for c in difflib.get_close_matches(name, [*known, *by_tail], n=3, cutoff=0.6)]
    close = list(dict.fromkeys(close))
    quotes = 'text values need quotes (family = "scornn")'
    hint = f"; did you mean {' or '.join(close)}? Or, if a text value, {quotes}" if close else f"; {quotes}"
    raise FilterError(f"no run field, param or metric is called {name!r}{hint}")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compatible(a: Any, b: Any) -> bool:
    return (_number(a) and _number(b)) or type(a) is type(b) or (isinstance(a, str) and isinstance(b, str))


def _compare(op: str, a: Any, b: Any) -> bool:
    if b is None or a is None:  # null on either side: equality with null only
        return {
            "=": _missing(a) == _missing(b),
            "==": _missing(a) == _missing(b),
            "!=": _missing(a) != _missing(b),
        }.get(op, False)
    if _missing(a) or _missing(b):
        return False
    if op == "~":
        return str(b).lower() in str(a).lower()
    if isinstance(a, (list, tuple)):  # tags: = means 'has this tag'
        return (b in a) if op in ("=", "==") else (b not in a) if op == "!=" else False
    if not _compatible(a, b):
        return op == "!="
    return bool(COMPARISONS[op](a, b))


def _check_types(node: Compare, column: pd.Series, literal: Any, name: str) -> None:
    """A comparison that cannot be true for any run because the types differ: say so instead of showing nothing."""
    if literal is None or node.op == "~":
        return
    present = [v for v in column if not _missing(v)]
    if present and not any(_compatible(v, literal) or isinstance(v, (list, tuple)) for v in present):
        kind = (
            "numbers"
            if all(_number(v) for v in present)
            else "text"
            if all(isinstance(v, str) for v in present)
            else "values"
        )
        raise FilterError(
            f"at column {node.at}: {name} holds {kind} (e.g. {present[0]!r}), compared with {literal!r}"
            + ("; drop the quotes" if kind == "numbers" and isinstance(literal, str) else "")
        )


def evaluate(
    node: Node | None, frame: pd.DataFrame, known: Sequence[str], column: Callable[[str], pd.Series]
) -> pd.Series:
    """Which rows of `frame` satisfy the expression. `known` lists the names that can be used and `column(name)`
    returns one of them as a Series aligned with `frame` (read only for the names the expression uses)."""
    if node is None:
        return pd.Series(True, index=frame.index)
    resolved = {n.name: resolve(n.name, known) for n in names(node)}
    columns = {full: column(full) for full in set(resolved.values())}

    def side(operand: Name | Literal) -> pd.Series | Any:
        return columns[resolved[operand.name]] if isinstance(operand, Name) else operand.value

    def run(node: Node) -> pd.Series:
        if isinstance(node, Logic):
            results = [run(term) for term in node.terms]
            if node.op == "not":
                return ~results[0]
            combined = results[0]
            for result in results[1:]:
                combined = combined & result if node.op == "and" else combined | result
            return combined
        left = side(node.left)
        if node.op in ("in", "not in"):
            values = left if isinstance(left, pd.Series) else pd.Series([left] * len(frame), index=frame.index)
            inside = values.map(lambda v: any(_compare("=", v, item) for item in node.right))
            present = values.map(lambda v: not _missing(v))
            return (present & ~inside) if node.op == "not in" else inside  # missing: false either way
        right = side(node.right)
        for series, other, operand in ((left, right, node.left), (right, left, node.right)):
            if isinstance(series, pd.Series) and not isinstance(other, pd.Series):
                _check_types(node, series, other, resolved[operand.name])
        lefts = left if isinstance(left, pd.Series) else pd.Series([left] * len(frame), index=frame.index)
        rights = right if isinstance(right, pd.Series) else pd.Series([right] * len(frame), index=frame.index)
        return pd.Series(
            [_compare(node.op, a, b) for a, b in zip(lefts, rights, strict=True)], index=frame.index, dtype=bool
        )

    return run(node)


def referenced(text: str, known: Iterable[str]) -> list[str]:
    """The full names an expression reads (for loading only those metrics); FilterError as parse/resolve."""
    known = list(known)
    return list(dict.fromkeys(resolve(n.name, known) for n in names(parse(text))))
