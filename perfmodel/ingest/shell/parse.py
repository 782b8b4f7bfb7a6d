"""A launch script's tokens (perfmodel.ingest.shell.lex) as a tree of commands, bash's grammar in small: lists
joined by `;` `&` newlines, `&&` / `||`, pipelines, simple commands (assignments, words, redirections with their
heredocs) and the compound commands `if`, `for`, `while` / `until`, `case`, `{ }`, `( )`, `[[ ]]`, `(( ))` and
function definitions (`name() { ... }`, `function name { ... }`). Words stay as written; nothing is run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .lex import REDIRECTS, RESERVED_END, Tok, not_shell, tokenize


@dataclass
class Redirect:
    op: str  # ">", ">>", "<<", "<<-", "<<<", ...
    target: str  # the word after it (a heredoc's delimiter)
    body: str | None = None  # a heredoc's lines
    quoted: bool = False  # a heredoc not expanded (its delimiter quoted)


@dataclass
class Simple:
    assigns: list[str]  # NAME=value words before the command (raw)
    words: list[str]  # raw words
    redirects: list[Redirect] = field(default_factory=list)
    line: int = 0


@dataclass
class Pipeline:
    commands: list  # nodes
    negate: bool = False


@dataclass
class AndOr:
    first: Pipeline
    rest: list[tuple[str, Pipeline]]  # ("&&" or "||", pipeline)


@dataclass
class If:
    branches: list[tuple[list, list]]  # (condition list, body list)
    orelse: list | None = None


@dataclass
class For:
    var: str
    words: list[str] | None  # None: `for X; do` (the positional parameters)
    body: list


@dataclass
class While:
    cond: list
    body: list
    until: bool = False


@dataclass
class Case:
    word: str
    arms: list[tuple[list[str], list]]  # (patterns, body)


@dataclass
class Group:
    body: list
    subshell: bool = False


@dataclass
class Test:  # [[ ... ]]: its words as written (operators among them as their text)
    words: list[str]


@dataclass
class Arith:  # (( expression ))
    expr: str


@dataclass
class Function:
    name: str
    body: object  # a compound node


class Parser:
    def __init__(self, text: str, where: str) -> None:
        self.toks = tokenize(text, where)
        self.i = 0
        self.where = where

    # -- helpers --------------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def is_word(self, *texts: str) -> bool:
        t = self.peek()
        return not self.at_end() and t.kind == "word" and (not texts or t.text in texts)

    def is_op(self, *texts: str) -> bool:
        t = self.peek()
        return not self.at_end() and t.kind == "op" and t.text in texts

    def newlines(self) -> None:
        while not self.at_end() and self.peek().kind == "nl":
            self.i += 1

    def expect_word(self, text: str) -> None:
        self.newlines()
        if not self.is_word(text):
            got = "the end of the file" if self.at_end() else repr(self.peek().text)
            line = self.peek().line
            raise not_shell(self.where, line, f"expected {text!r}, found {got}")
        self.i += 1

    # -- lists ----------------------------------------------------------------------------------------------
    def script(self) -> list:
        body = self.compound_list(())
        if not self.at_end():
            t = self.peek()
            raise not_shell(self.where, t.line, f"unexpected {t.text!r}")
        return body

    def compound_list(self, stop: tuple[str, ...]) -> list:
        """And-or lists up to a reserved word that ends a compound command (`stop`, the one expected), `)`, `;;` or
        the end."""
        out = []
        while True:
            self.newlines()
            if self.at_end() or self.is_word(*RESERVED_END) or self.is_op(")", ";;", ";&", ";;&"):
                return out  # the caller checks it is the word it stops at (`fi` where `done` is due is refused)
            out.append(self.and_or())
            if self.is_op(";", "&"):
                self.i += 1

    def and_or(self) -> AndOr:
        first = self.pipeline()
        rest = []
        while self.is_op("&&", "||"):
            op = self.peek().text
            self.i += 1
            self.newlines()
            rest.append((op, self.pipeline()))
        return AndOr(first, rest)

    def pipeline(self) -> Pipeline:
        negate = False
        if self.is_word("!"):
            negate = True
            self.i += 1
        cmds = [self.command()]
        while self.is_op("|", "|&"):
            self.i += 1
            self.newlines()
            cmds.append(self.command())
        return Pipeline(cmds, negate)

    # -- commands -------------------------------------------------------------------------------------------
    def command(self):
        t = self.peek()
        if t.kind == "arith":
            self.i += 1
            return self.redirected(Arith(t.text))
        if t.kind == "op" and t.text == "(":
            self.i += 1
            body = self.compound_list(())
            self.close(")")
            return self.redirected(Group(body, subshell=True))
        if t.kind == "word":
            compound = {"if": self.if_, "for": self.for_, "while": self.while_, "until": self.while_,
                        "case": self.case, "{": self.brace, "[[": self.test, "function": self.function}
            if t.text in compound:
                return compound[t.text]()
            if self.peek(1).kind == "op" and self.peek(1).text == "(" and self.peek(2).text == ")":
                self.i += 3
                self.newlines()
                return Function(t.text, self.command())
        return self.simple()

    def close(self, op: str) -> None:
        self.newlines()
        if not self.is_op(op):
            got = "the end of the file" if self.at_end() else repr(self.peek().text)
            raise not_shell(self.where, self.peek().line, f"expected {op!r}, found {got}")
        self.i += 1

    def redirected(self, node):
        """A compound command's own redirections (`done > log`, `} 2>&1`) are read and dropped."""
        while self.peek().kind == "io" or self.is_op(*REDIRECTS):
            self.redirect()
        return node

    def redirect(self) -> Redirect:
        if self.peek().kind == "io":
            self.i += 1
        op = self.peek()
        self.i += 1
        target = self.peek().text if self.peek().kind == "word" else ""
        if self.peek().kind == "word":
            self.i += 1
        return Redirect(op.text, target, op.body, op.quoted)

    def simple(self) -> Simple:
        assigns, words, redirects = [], [], []
        line = self.peek().line
        while not self.at_end():
            t = self.peek()
            if t.kind == "io" or (t.kind == "op" and t.text in REDIRECTS):
                redirects.append(self.redirect())
            elif t.kind == "word":
                if not words and is_assignment(t.text):
                    assigns.append(t.text)
                else:
                    words.append(t.text)
                self.i += 1
            else:
                break
        if not (assigns or words or redirects):
            raise not_shell(self.where, line, f"unexpected {self.peek().text!r}")
        return Simple(assigns, words, redirects, line)

    def if_(self) -> If:
        self.i += 1
        branches, orelse = [], None
        while True:
            cond = self.compound_list(("then",))
            self.expect_word("then")
            body = self.compound_list(("elif", "else", "fi"))
            branches.append((cond, body))
            self.newlines()
            if self.is_word("elif"):
                self.i += 1
                continue
            if self.is_word("else"):
                self.i += 1
                orelse = self.compound_list(("fi",))
            self.expect_word("fi")
            return self.redirected(If(branches, orelse))

    def for_(self) -> For:
        self.i += 1
        if self.peek().kind == "arith":  # for (( i = 0; ... )): a C-style loop, read as not run
            self.i += 1
            var, words = "((", []
        else:
            var = self.peek().text
            self.i += 1
            self.newlines()
            words = None
            if self.is_word("in"):
                self.i += 1
                words = []
                while self.peek().kind == "word":
                    words.append(self.peek().text)
                    self.i += 1
        if self.is_op(";"):
            self.i += 1
        self.expect_word("do")
        body = self.compound_list(("done",))
        self.expect_word("done")
        return self.redirected(For(var, words, body))

    def while_(self) -> While:
        until = self.peek().text == "until"
        self.i += 1
        cond = self.compound_list(("do",))
        self.expect_word("do")
        body = self.compound_list(("done",))
        self.expect_word("done")
        return self.redirected(While(cond, body, until))

    def case(self) -> Case:
        self.i += 1
        word = self.peek().text
        self.i += 1
        self.expect_word("in")
        arms = []
        while True:
            self.newlines()
            if self.is_word("esac") or self.at_end():
                break
            if self.is_op("("):
                self.i += 1
            patterns = []
            while self.peek().kind == "word":
                patterns.append(self.peek().text)
                self.i += 1
                if self.is_op("|"):
                    self.i += 1
            self.close(")")
            body = self.compound_list(("esac",))
            arms.append((patterns, body))
            if self.is_op(";;", ";&", ";;&"):
                self.i += 1
        self.expect_word("esac")
        return self.redirected(Case(word, arms))

    def brace(self) -> Group:
        self.i += 1
        body = self.compound_list(("}",))
        self.expect_word("}")
        return self.redirected(Group(body))

    def test(self) -> Test:
        self.i += 1
        words = []
        while not self.at_end() and not self.is_word("]]"):
            t = self.peek()
            if t.kind == "nl":
                raise not_shell(self.where, t.line, "[[ without its ]]", "[[ A == B ]]")
            words.append(t.text)
            self.i += 1
        self.i += 1
        return self.redirected(Test(words))

    def function(self) -> Function:
        self.i += 1
        name = self.peek().text
        self.i += 1
        if self.is_op("("):
            self.close("(")
            self.close(")")
        self.newlines()
        return Function(name, self.command())


def is_assignment(word: str) -> bool:
    """NAME=..., NAME+=..., NAME[i]=... (before the command's name only)."""
    head = word.split("=", 1)[0]
    if "=" not in word:
        return False
    name = head.rstrip("+").split("[", 1)[0]
    return name.isidentifier() and name.isascii()


def parse(text: str, where: str) -> list:
    """The script's tree: a list of AndOr nodes. A script bash would refuse (an unclosed quote, an `if` without
    its `fi`) is refused in one line naming the line."""
    return Parser(text, where).script()
