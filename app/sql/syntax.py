"""SQL text → one sqlglot SELECT tree, within bounds, every refusal placed in the text.

The text is bounded before it is parsed (`MAX_SQL_CHARACTERS`, and `MAX_NESTING` levels
of parentheses or consecutive NOTs, which is also what keeps the parser's recursion
shallow); a syntax error from sqlglot becomes `bad_sql` with its line and column.
`ParsedSql` keeps the tokens, so refusals of constructs that carry no position of their
own in the tree (JOIN, DISTINCT, UNION, OVER) can point at their keyword.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from app.sql.errors import Position, SqlTooComplex, bad_sql, unsupported

DIALECT = "postgres"
MAX_SQL_CHARACTERS = 10_000
MAX_NESTING = 32


@dataclass(frozen=True)
class ParsedSql:
    """The text, its tokens and its one SELECT statement."""

    text: str
    tokens: tuple[Token, ...]
    tree: exp.Select

    def at(self, offset: int | None) -> Position | None:
        return None if offset is None else Position.in_text(self.text, offset)

    def position(self, node: exp.Expression | None) -> Position | None:
        """Where `node` starts: the first character any of its tokens has in the text."""
        return self.at(first_offset(node))

    def text_at(self, node: exp.Expression) -> str | None:
        """The text of the token a node's own position points at (a function's name)."""
        start = node.meta.get("start") if node.meta else None
        end = node.meta.get("end") if node.meta else None
        if not isinstance(start, int) or not isinstance(end, int):
            return None
        return self.text[start : end + 1]

    def keyword(
        self, node: exp.Expression, types: Iterable[TokenType], *, after: bool = False
    ) -> Position | None:
        """The keyword of a construct: the nearest token of `types` before (or after) the
        node's first positioned token; the node's own start when there is none."""
        wanted = set(types)
        start = first_offset(node)
        if start is None:
            candidates = [t for t in self.tokens if t.token_type in wanted]
            return self.at(candidates[0].start) if candidates else None
        if after:
            for token in self.tokens:
                if token.start >= start and token.token_type in wanted:
                    return self.at(token.start)
        else:
            for token in reversed(self.tokens):
                if token.start <= start and token.token_type in wanted:
                    return self.at(token.start)
        return self.at(start)

    def word(
        self, node: exp.Expression, words: Iterable[str], *, after: bool = False
    ) -> Position | None:
        """Like `keyword`, for a keyword known by its text (ROLLUP, FILTER, …)."""
        wanted = {w.upper() for w in words}
        types = {t.token_type for t in self.tokens if t.text.upper() in wanted}
        return self.keyword(node, types, after=after)


def first_offset(node: exp.Expression | None) -> int | None:
    """The smallest start offset among a tree's positioned nodes (identifiers, literals,
    function names); None if it has none."""
    if node is None:
        return None
    starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
    return min(starts) if starts else None


def _unterminated_quote(text: str) -> int | None:
    """Offset of a quote (', ") that is never closed, if any ('' and "" are escapes)."""
    index = 0
    while index < len(text):
        character = text[index]
        if character in "'\"":
            end = index + 1
            while True:
                end = text.find(character, end)
                if end < 0:
                    return index
                if text[end + 1 : end + 2] == character:
                    end += 2
                    continue
                break
            index = end + 1
        elif text.startswith("--", index):
            newline = text.find("\n", index)
            index = len(text) if newline < 0 else newline + 1
        else:
            index += 1
    return None


def _tokenize(text: str) -> tuple[Token, ...]:
    try:
        return tuple(sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text))
    except TokenError as error:
        quote = _unterminated_quote(text)
        if quote is not None:
            raise bad_sql(
                "a quoted string or name is never closed", Position.in_text(text, quote)
            ) from None
        offset = error.start + 50 if error.start else 0
        raise bad_sql("the text cannot be read as SQL", Position.in_text(text, offset)) from None


def _check_nesting(text: str, tokens: Sequence[Token]) -> None:
    depth = 0
    nots = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        nots = nots + 1 if token.token_type == TokenType.NOT else 0
        if depth > MAX_NESTING or nots > MAX_NESTING:
            position = Position.in_text(text, token.start)
            raise SqlTooComplex(
                f"query: nested more than {MAX_NESTING} levels deep at {position.describe()}",
                parameter="query",
                max_nesting=MAX_NESTING,
                **position.details(),
            )


def _syntax_error(text: str, tokens: Sequence[Token], error: ParseError) -> Exception:
    found = error.errors[0] if error.errors else {}
    line, column = found.get("line"), found.get("col")
    description = str(found.get("description") or "invalid SQL")
    offset = None
    if isinstance(line, int) and isinstance(column, int):
        # sqlglot reports the column of the offending token's last character.
        for token in tokens:
            if token.line == line and token.col == column:
                offset = token.start
                break
        if offset is None:
            lines = text.split("\n")
            offset = sum(len(part) + 1 for part in lines[: line - 1]) + max(column - 1, 0)
    position = Position.in_text(text, offset) if offset is not None else None
    return bad_sql(f"syntax error: {description}", position)


STATEMENT_NAMES = {
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
}
SET_OPERATION_TOKENS = (TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT)


def parse(text: str) -> ParsedSql:
    """Parse one SELECT statement, or refuse with the place that is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise bad_sql("give a SELECT statement", None)
    if len(text) > MAX_SQL_CHARACTERS:
        raise SqlTooComplex(
            f"query: {len(text)} characters, more than the limit of {MAX_SQL_CHARACTERS}",
            parameter="query",
            max_characters=MAX_SQL_CHARACTERS,
        )
    tokens = _tokenize(text)
    if not tokens:
        raise bad_sql("give a SELECT statement", None)
    _check_nesting(text, tokens)
    try:
        statements = [s for s in sqlglot.parse(text, dialect=DIALECT) if s is not None]
    except ParseError as error:
        raise _syntax_error(text, tokens, error) from None
    except RecursionError:
        raise SqlTooComplex(
            "query: nested too deeply to parse", parameter="query", max_nesting=MAX_NESTING
        ) from None
    if len(statements) != 1:
        semicolons = [t for t in tokens if t.token_type == TokenType.SEMICOLON]
        second = next((t for t in tokens if semicolons and t.start > semicolons[0].start), None)
        position = Position.in_text(text, second.start) if second is not None else None
        raise unsupported("a second statement", position, "send one SELECT statement per request")
    tree = statements[0]
    parsed_position = Position.in_text(text, tokens[0].start)
    for kind, name in STATEMENT_NAMES.items():
        if isinstance(tree, kind):
            keyword = next((t for t in tokens if t.token_type in SET_OPERATION_TOKENS), None)
            at = Position.in_text(text, keyword.start) if keyword is not None else None
            raise unsupported(name, at, "one SELECT over one table is answered")
    if not isinstance(tree, exp.Select):
        first = tokens[0]
        if first.token_type in (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN):
            raise unsupported(
                "a parenthesized or compound query", parsed_position, "write one plain SELECT"
            )
        if first.token_type == TokenType.VAR or first.token_type == TokenType.STRING:
            raise bad_sql(f"expected SELECT, found {first.text!r}", parsed_position)
        raise unsupported(
            f"{first.text.upper()} statement", parsed_position, "only SELECT is answered"
        )
    return ParsedSql(text=text, tokens=tokens, tree=tree)
