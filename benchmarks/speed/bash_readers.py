"""The bash front end decided by measurement: the hand-written lexer and parser (perfmodel/ingest/shell/lex.py and
parse.py) against tree-sitter-bash (the `tree-sitter` and `tree-sitter-bash` PyPI packages) behind a converter to the
same command tree (below), over every shell text the tests and benchmarks have the reader parse.

    python -m benchmarks.speed.bash_readers             # the table; tree-sitter's column needs its two packages
    python -m benchmarks.speed.bash_readers --repeat 9  # more timing runs per text (default 5; the fastest kept)

The corpus: every `.sh` under tests/fixtures/ and benchmarks/data/, and every shell text the readers hand on inside
them or take from a config (a `bash -c` string, an `eval`, xpk's `--command`, a Kubernetes manifest's container
command), recorded as perfmodel.ingest.shell.script asks for them.

(a) The same words as bash: each front end under perfmodel.ingest.shell.script.Script on the 47 scripts
    tests/test_shell_script.py runs under bash (its launchers stubbed to print their words), compared as that test
    compares them; on the whole corpus, whether tree-sitter's tree has an ERROR or MISSING node and whether the
    converted tree is the hand-written parser's node for node (every command, word and heredoc body); and whether
    a script `bash -n` refuses is refused, with the reason the user is told.
(b) Speed: each text parsed `--repeat` times, the fastest kept; the median over the corpus, and the whole reading
    (Script) for scale.
(c) Code lines (no blank, comment or docstring lines) each side needs: lex.py + parse.py, against the converter
    plus parse.py's node classes and the lex.py scanners expand.py uses, either way.

Its output is kept in benchmarks/results/bash_readers.txt; perfmodel keeps the hand-written front end (that file's
numbers say why).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import io
import os
import statistics
import subprocess
import tempfile
import time
import tokenize as pytokenize
from importlib import metadata
from pathlib import Path

from benchmarks import ROOT
from perfmodel.errors import InputError
from perfmodel.ingest.shell import lex, parse as shell_parse, script as shell_script
from perfmodel.ingest.shell.parse import (
    AndOr, Arith, Case, For, Function, Group, If, Pipeline, Redirect, Simple, Test, While)

try:
    import tree_sitter_bash
    from tree_sitter import Language, Parser
    PARSER = Parser(Language(tree_sitter_bash.language()))
except ImportError:  # the hand-written side is measured alone
    PARSER = None


# ---- the tree-sitter front end: its tree as perfmodel.ingest.shell.parse's nodes -------------------------------
TS_REDIRECTS = ("file_redirect", "heredoc_redirect", "herestring_redirect")
TS_EXPRESSIONS = ("binary_expression", "unary_expression", "parenthesized_expression", "negated_expression",
                  "ternary_expression", "postfix_expression")


def ts_parse(text: str, where: str) -> list:
    """`text` as tree-sitter-bash parses it, converted to the hand-written parser's nodes (a list of AndOr)."""
    tree = PARSER.parse(text.encode())
    bad = _ts_error(tree.root_node)
    if bad is not None:
        raise lex.not_shell(where, bad.start_point.row + 1, f"tree-sitter-bash reads {bad.type} here")
    return _ts_list(tree.root_node.children)


def _ts_error(node):
    if node.type == "ERROR" or node.is_missing:
        return node
    for c in node.children if node.has_error else ():
        bad = _ts_error(c)
        if bad is not None:
            return bad
    return None


def _named(nodes) -> list:
    return [n for n in nodes if n.is_named and n.type not in ("comment", "heredoc_body")]


def _text(node) -> str:
    return node.text.decode()


def _ts_list(nodes) -> list:
    return [_ts_and_or(n) for n in _named(nodes)]


def _ts_and_or(node) -> AndOr:
    if node.type == "list":  # `a && b || c` nests to the left: ((a && b) || c)
        left, op, right = node.children[0], node.children[1], node.children[2]
        head = _ts_and_or(left)
        return AndOr(head.first, head.rest + [(op.type, _ts_pipeline(right))] + _ts_after_heredoc(right)[1])
    return AndOr(_ts_pipeline(node), _ts_after_heredoc(node)[1])


def _ts_after_heredoc(node) -> tuple[list, list]:
    """What tree-sitter hangs under a heredoc's `<<EOF` from the rest of its line (`cat <<EOF | tee f`, `cat <<EOF
    && next`): the pipeline's further commands, and the and-or list's further (op, pipeline)."""
    pipe, rest = [], []
    for r in node.children if node.type == "redirected_statement" else ():
        kids = r.children if r.type == "heredoc_redirect" else []
        for i, c in enumerate(kids):
            if c.type == "pipeline":
                pipe += _named(c.children)
            elif c.type in ("&&", "||"):
                rest.append((c.type, _ts_pipeline(kids[i + 1])))
    return pipe, rest


def _ts_pipeline(node) -> Pipeline:
    if node.type == "negated_command":
        inner = _ts_pipeline(_named(node.children)[0])
        return Pipeline(inner.commands, not inner.negate)
    if node.type == "redirected_statement" and node.children[0].type in ("negated_command", "pipeline"):
        inner = _ts_pipeline(node.children[0])  # `! cmd &> /dev/null`: the redirection is the last command's
        if isinstance(inner.commands[-1], Simple):
            inner.commands[-1].redirects += _ts_redirects(node.children[1:])
        return inner
    if node.type != "pipeline":
        return Pipeline([_ts_command(node)] + [_ts_command(c) for c in _ts_after_heredoc(node)[0]])
    parts = _named(node.children)
    negate = parts[0].type == "negated_command"  # `! a | b`: bash negates the whole pipeline
    if negate:
        parts[0] = _named(parts[0].children)[0]
    return Pipeline([_ts_command(p) for p in parts], negate)


def _ts_words(node) -> list[str]:
    """A test's words: an expression's operands and operators, each as written."""
    if node.type in TS_EXPRESSIONS:
        return [w for c in node.children for w in _ts_words(c)]
    return [_text(node)]


def _ts_redirects(nodes) -> list[Redirect]:
    out = []
    for node in nodes:
        kids = node.children
        if node.type == "heredoc_redirect":
            op = next(c.type for c in kids if c.type in ("<<", "<<-"))
            start = next(c for c in kids if c.type == "heredoc_start")
            body = "".join(_text(c) for c in kids if c.type == "heredoc_body")
            if op == "<<-":
                body = "".join(ln.lstrip("\t") for ln in body.splitlines(keepends=True))
            out.append(Redirect(op, _text(start), body, any(q in _text(start) for q in "'\"\\")))
            out += _ts_redirects(c for c in kids if c.type in TS_REDIRECTS)  # `cat <<EOF > f`: under the heredoc
        elif node.type in TS_REDIRECTS:
            op = next((c for c in kids if not c.is_named), None)
            target = [c for c in _named(kids) if c.type != "file_descriptor"]
            out.append(Redirect(op.type if op else "", _text(target[-1]) if target else ""))
    return out


def _ts_body(node) -> list:
    """The commands of a do_group / compound_statement / subshell, between its opening and closing words."""
    return _ts_list(node.children)


def _ts_command(node):
    # the hand-written lexer numbers a word by the line it ends on
    kind, kids = node.type, node.children
    line = (node if kind == "variable_assignment" or not kids else kids[0]).end_point.row + 1
    if kind == "redirected_statement":
        body = _ts_command(kids[0])
        if isinstance(body, Simple):
            body.redirects += _ts_redirects(kids[1:])
        return body
    if kind == "command":
        assigns = [_text(c) for c in kids if c.type == "variable_assignment"]
        words = [_text(c) for c in _named(kids) if c.type not in TS_REDIRECTS + ("variable_assignment",)]
        return Simple(assigns, words, _ts_redirects(kids), line)
    if kind == "variable_assignment":
        return Simple([_text(node)], [], [], line)
    if kind == "variable_assignments":
        return Simple([_text(c) for c in _named(kids)], [], [], line)
    if kind in ("declaration_command", "unset_command"):
        return Simple([], [_text(c) for c in kids if c.type != "comment"], [], line)
    if kind == "test_command":
        words = [w for c in kids[1:-1] for w in _ts_words(c)]
        return Test(words) if kids[0].type == "[[" else Simple([], ["[", *words, "]"], [], line)
    if kind == "if_statement":
        return _ts_if(kids)
    if kind == "for_statement":
        var = next(c for c in kids if c.type == "variable_name")
        body = next(c for c in kids if c.type == "do_group")
        words = None
        if any(c.type == "in" for c in kids):
            at = [c.type for c in kids].index("in")
            words = [_text(c) for c in _named(kids[at + 1:]) if c.type != "do_group"]
        return For(_text(var), words, _ts_body(body))
    if kind == "c_style_for_statement":
        return For("((", [], _ts_body(next(c for c in kids if c.type == "do_group")))
    if kind == "while_statement":
        body = next(c for c in kids if c.type == "do_group")
        return While(_ts_list(kids[1:kids.index(body)]), _ts_body(body), kids[0].type == "until")
    if kind == "case_statement":
        word = _named(kids)[0]
        arms = []
        for item in (c for c in kids if c.type == "case_item"):
            close = [c.type for c in item.children].index(")")
            patterns = [_text(c) for c in _named(item.children[:close])]
            arms.append((patterns, _ts_list(item.children[close + 1:])))
        return Case(_text(word), arms)
    if kind == "compound_statement" and kids[0].type == "((":
        return Arith(_ts_between(node, kids[0], kids[-1]))
    if kind in ("compound_statement", "subshell"):
        return Group(_ts_body(node), subshell=kind == "subshell")
    if kind == "function_definition":
        name = next(c for c in kids if c.type == "word")
        return Function(_text(name), _ts_command(_named(kids)[-1]))
    if kind in ("pipeline", "list", "negated_command"):  # `{ a | b; }` keeps them under a command position
        return Group([_ts_and_or(node)])
    return Simple([], [_text(node)], [], line)  # a bare word the grammar names otherwise (a number, a string)


def _ts_if(kids) -> If:
    """An if_statement's or elif_clause's children: its branches in order, and its else."""
    cond, body, rest = [], [], []
    into = cond
    for c in kids[1:]:
        if c.type == "then":
            into = body
        elif c.type in ("elif_clause", "else_clause", "fi"):
            rest.append(c)
        elif not rest:
            into.append(c)
    branches, orelse = [(_ts_list(cond), _ts_list(body))], None
    for c in rest:
        if c.type == "elif_clause":
            branches += _ts_if(c.children).branches
        elif c.type == "else_clause":
            orelse = _ts_list(c.children[1:])
    return If(branches, orelse)


def _ts_between(node, first, last) -> str:
    """The source between two children of `node` (a `(( ))` command's expression)."""
    src = node.text
    return src[first.end_byte - node.start_byte:last.start_byte - node.start_byte].decode()
# ---- end of the tree-sitter front end ------------------------------------------------------------------------


def corpus() -> list[tuple[str, str]]:
    """(where, text) of every shell text the readers parse for the test and benchmark files: each `.sh`, and what
    the readers hand to another shell or read from a manifest (recorded at perfmodel.ingest.shell.script.parse)."""
    from perfmodel.ingest.maxtext.files import manifest_layers, shell_layer
    from perfmodel.ingest.sources import read_yaml

    seen: dict[str, str] = {}
    real = shell_script.parse

    def record(text: str, where: str) -> list:
        seen.setdefault(text, where)
        return real(text, where)

    shell_script.parse = record
    try:
        files = sorted(ROOT.glob("tests/fixtures/**/*.sh")) + sorted(ROOT.glob("benchmarks/data/**/*.sh"))
        for p in files:
            name = str(p.relative_to(ROOT))
            for every in (False, True):
                shell_script.Script(p.read_text(), name, every_branch=every)
            if "maxtext" in name:
                try:
                    shell_layer(p)
                except InputError:
                    pass
        for p in sorted(ROOT.glob("tests/fixtures/**/*.y*ml")):
            if b"containers" in p.read_bytes():
                try:
                    manifest_layers(p, read_yaml(p, "manifest"))
                except InputError:
                    pass
    finally:
        shell_script.parse = real
    return [(where, text) for text, where in seen.items()]


def fastest(fn, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def code_lines(source: str, start: str | None = None, end: str | None = None) -> int:
    """Lines holding code: no blank, comment or docstring lines (between the lines `start` and `end` if given)."""
    if start is not None:
        source = source.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
    docs = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for tok in pytokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (pytokenize.COMMENT, pytokenize.NL, pytokenize.NEWLINE, pytokenize.INDENT,
                            pytokenize.DEDENT, pytokenize.ENDMARKER):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docs)


def function_lines(path: Path, names: set[str]) -> int:
    """Code lines of the named top-level functions of a module."""
    source = path.read_text()
    return sum(code_lines(ast.get_source_segment(source, node, padded=True)) for node in ast.parse(source).body
               if isinstance(node, ast.FunctionDef) and node.name in names)


def normal(node):
    """A tree with `\`-newline taken out of its words: bash removes it before it splits words (the hand-written lexer
    leaves it in a word it ends, and expansion drops it), so it makes no difference to the words."""
    if isinstance(node, str):
        return node.replace("\\\n", "")
    if isinstance(node, (list, tuple)):
        return type(node)(normal(x) for x in node)
    if dataclasses.is_dataclass(node):
        return type(node)(**{f.name: normal(getattr(node, f.name)) for f in dataclasses.fields(node)})
    return node


def simple_commands(node) -> list[list[str]]:
    """The simple commands of a tree in order, each as its assignments and words as written."""
    if isinstance(node, Simple):
        return [node.assigns + node.words]
    if isinstance(node, (list, tuple)):
        return [c for x in node for c in simple_commands(x)]
    if dataclasses.is_dataclass(node):
        return [c for f in dataclasses.fields(node) for c in simple_commands(getattr(node, f.name))]
    return []


def difference(ours: list, theirs: list) -> str:
    """The first simple command the two trees split differently, or that they group the same commands differently."""
    for a, b in zip(simple_commands(ours), simple_commands(theirs)):
        if a != b:
            k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"hand-written {a[k:k + 2]}, tree-sitter {b[k:k + 2]}"
    return "the same commands, grouped otherwise (`a && b | c` as `(a && b) | c`)"


def against_bash(front) -> tuple[int, int, list[str]]:
    """(scripts whose words are bash's, scripts, the others) with `front` as Script's parser, as
    tests/test_shell_script.py compares them."""
    spec = importlib.util.spec_from_file_location("shell_tests", ROOT / "tests" / "test_shell_script.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    real, shell_script.parse = shell_script.parse, front
    good, bad = 0, []
    try:
        for path in tests.SCRIPTS:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp) / "run"
                work.mkdir()
                try:
                    tests.check_against_bash(path.read_text(), work)
                    good += 1
                except (AssertionError, InputError) as err:
                    pair = err.args[0] if err.args else None  # the test's (ours, bash's) words
                    why = (f"read {pair[0][:4]}..., bash ran {pair[1][:4]}..." if isinstance(pair, tuple) else
                           str(err).splitlines()[0][:160])
                    if isinstance(pair, tuple) and all(isinstance(w, str) for w in pair[0] + pair[1]):
                        k = next((i for i, (x, y) in enumerate(zip(*pair)) if x != y), min(map(len, pair)))
                        why = f"read {pair[0][k:k + 2]}, bash ran {pair[1][k:k + 2]}"
                    bad.append(f"{path.relative_to(ROOT)}: {why}")
    finally:
        shell_script.parse = real
    return good, len(tests.SCRIPTS), bad


# scripts `bash -n` refuses (tests/test_shell_script.py's): the reason each front end gives
REFUSED = {"python x.py --a 'open\n": "the quote ' opened here is never closed",
           "if [ 1 ]; then\n  python x.py\n": "expected 'fi', found the end of the file",
           'X="$(date\n': "is never closed",
           "for x in a b; do echo; fi\n": "expected 'done', found 'fi'",
           "case $X in a) echo;;\n": "expected 'esac', found the end of the file"}


def refusals(front) -> tuple[int, int]:
    """(scripts bash -n refuses that `front` refuses, those it refuses with the reason)."""
    refused = reason = 0
    for text, why in REFUSED.items():
        assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode != 0, text
        try:
            front(text, "x.sh")
        except InputError as err:
            refused += 1
            reason += why in str(err)
    return refused, reason


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timing runs per text (the fastest kept)")
    args = ap.parse_args()
    texts = corpus()
    files = sum(1 for w, _ in texts if w.endswith(".sh"))
    print(f"corpus: {len(texts)} shell texts ({files} .sh files, {len(texts) - files} handed on inside them or "
          f"read from manifests), {sum(len(t) for _, t in texts) / 1000:.0f} kB, "
          f"{sum(t.count(chr(10)) for _, t in texts)} lines; times: the fastest of {args.repeat} runs, median over "
          f"the texts (and their sum), on {os.cpu_count()} cores at load {os.getloadavg()[0]:.1f}\n")
    ms = lambda xs: f"{statistics.median(xs) * 1e3:.3f} ms ({sum(xs) * 1e3:.0f} ms)"  # noqa: E731
    hand_ok, n, hand_bad = against_bash(shell_parse.parse)
    hand_refused = refusals(shell_parse.parse)
    t_hand = [fastest(lambda t: shell_parse.parse(t, "x.sh"), text, args.repeat) for _, text in texts]
    t_read = [fastest(lambda t: shell_script.Script(t, "x.sh"), text, args.repeat) for _, text in texts]
    lex_parse = sum(code_lines((ROOT / "perfmodel/ingest/shell" / f).read_text()) for f in ("lex.py", "parse.py"))
    # with tree-sitter the reader still needs parse.py's node classes and the lex.py scanners expand.py uses;
    # Script.assign splits `NAME=( ... )` with lex.tokenize, which could be tree-sitter's array node instead
    nodes = code_lines((ROOT / "perfmodel/ingest/shell/parse.py").read_text().split("class Parser")[0])
    scanners = function_lines(ROOT / "perfmodel/ingest/shell/lex.py",
                              {"not_shell", "skip_quote", "skip_backtick", "skip_dollar"})
    tokenizer = function_lines(ROOT / "perfmodel/ingest/shell/lex.py", {
        "_skip_part", "_skip_array", "_is_assign_prefix", "_read_heredocs", "_delimiter", "tokenize",
        "_command_starts", "_skip_arith", "_word_end"})
    converter = code_lines(Path(__file__).read_text(), "# ---- the tree-sitter front end", "# ---- end of the tree")
    rows = [("", "hand-written lex.py + parse.py", "tree-sitter-bash + converter"),
            ("(a) words as bash's: test_shell_script's scripts", f"{hand_ok}/{n}"),
            ("(a) corpus texts parsed (tree-sitter: no ERROR/MISSING)", f"{len(texts)}/{len(texts)}"),
            ("(a) trees equal to the hand-written parser's", "-"),
            ("(a) bash -n's refusals refused / with the reason", "{}/{} / {}/{}".format(
                hand_refused[0], len(REFUSED), hand_refused[1], len(REFUSED))),
            ("(b) parse per text (lex + parse / tree-sitter + convert)", ms(t_hand)),
            ("(b)   tree-sitter's own parse", "-"),
            ("(b)   the whole reading, Script(text), for scale", ms(t_read)),
            ("(c) code lines of the front end", f"{lex_parse}"),
            ("dependencies", "none")]
    bad, errors, differ = {"hand-written": hand_bad}, [], []
    if PARSER is None:
        rows = [r + ("n/a: pip install tree-sitter tree-sitter-bash",) if len(r) == 2 else r for r in rows]
    else:
        same = 0
        for where, text in texts:
            if _ts_error(PARSER.parse(text.encode()).root_node) is not None:
                errors.append(where)
                continue
            ours, theirs = normal(shell_parse.parse(text, where)), normal(ts_parse(text, where))
            same += ours == theirs
            if ours != theirs:
                differ.append(f"{where}: {difference(ours, theirs)}")
        ts_ok, _, bad["tree-sitter"] = against_bash(ts_parse)
        ts_refused = refusals(ts_parse)
        t_ts = [fastest(lambda t: PARSER.parse(t.encode()), text, args.repeat) for _, text in texts]
        t_conv = [fastest(lambda t: ts_parse(t, "x.sh"), text, args.repeat) for _, text in texts]
        size = sum(f.size for d in ("tree-sitter", "tree-sitter-bash") for f in metadata.files(d) or () if f.size)
        ts = [f"{ts_ok}/{n}", f"{len(texts) - len(errors)}/{len(texts)}", f"{same}/{len(texts)} (up to \\-newline)",
              f"{ts_refused[0]}/{len(REFUSED)} / {ts_refused[1]}/{len(REFUSED)}", ms(t_conv), ms(t_ts), "-",
              f"{converter} converter + {nodes} node classes + {scanners} lex.py scanners = "
              f"{converter + nodes + scanners} (+{tokenizer} while arrays are split by lex.tokenize)",
              f"tree-sitter {metadata.version('tree-sitter')} + tree-sitter-bash "
              f"{metadata.version('tree-sitter-bash')}: compiled wheels, {size / 2**20:.1f} MiB installed"]
        rows = rows[:1] + [r + (t,) for r, t in zip(rows[1:], ts)]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}")
    for title, items in [(f"not bash's words, {k}", v) for k, v in bad.items()] + [
            ("tree-sitter ERROR / MISSING nodes", errors), ("trees that differ: the first command split otherwise",
                                                            differ)]:
        if items:
            print(f"\n{title}:")
            for item in dict.fromkeys(items):  # a text read twice (its `eval` on either branch) once
                print(f"  {item.replace(str(ROOT) + '/', '')}" + (f" (x{items.count(item)})" if items.count(item) > 1
                                                                   else ""))


if __name__ == "__main__":
    main()
