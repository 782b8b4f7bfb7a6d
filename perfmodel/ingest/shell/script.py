"""A launch script's commands as the words bash would pass them, read as data (never run): the one shell reader of
perfmodel.ingest (Megatron-LM's, DeepSpeed's, MaxText's and tpu-recipes' launch scripts, Megatron-Bridge's override
lines).

The text is tokenized and parsed as bash does (perfmodel.ingest.shell.lex / .parse: commands over several lines
inside quotes, arrays, `$( )`, after `\\`, `|`, `&&`, `||`; heredocs) and its commands are followed in order over
the variables the script sets (perfmodel.ingest.shell.expand): assignments, `export` / `local` / `declare`, arrays,
`if` / `elif` / `else` and `case` over known values, `for` over known words, `while` while its test is known,
functions (run where they are called, `$1`... bound to the call's words; a function never called is not run),
`&&` / `||`, `exit` / `return`. A heredoc or `echo` a command writes to a file (`cat > ds.json <<EOF`,
`cat <<EOF > $DIR/cfg.yaml`, `tee FILE <<EOF`, `cat <<EOF | tee FILE`) is kept in `files` (the path as expanded ->
the text). Commands are not run: they succeed, their output is not known. What cannot be known (command output,
$RANDOM, a variable the script never sets, its arguments) stays as written and is named in `unread`; nothing of it
refuses the file, nor does a script longer than its budget (its rest is named not read): the design of
perfmodel.ingest.reading, which the recipe reader shares. A script bash would refuse (an unclosed quote, an `if`
without its `fi`) is refused in one line. Written here, not taken from a library (lex says why).
"""

from __future__ import annotations

from ...errors import InputError
from ..given import GIVEN
from ..reading import MAX_LOOP, Budget, OverBudget, refusal
from .cond import Condition, glob
from .expand import EXPANSIONS, Expansion
from .lex import tokenize
from .parse import AndOr, Arith, Case, For, Function, Group, If, Pipeline, Simple, Test, While, is_assignment, parse

DECLARE = ("export", "local", "declare", "typeset", "readonly")


class _Exit(Exception):
    pass


class _Return(Exception):
    pass


class Script(Expansion):
    """The script's variables (arrays as word lists), its commands (each as its expanded words), the files its
    commands write, and what it leaves not read."""

    def __init__(self, text: str, where: str, every_branch: bool = False) -> None:
        """`every_branch`: run the body of every `if` / `elif` / `else` branch and `case` arm in order, as if no
        test were there (for a command under a test that needs the file system, `if [ -f "$CONFIG" ]`)."""
        super().__init__(where)
        self.positional = self.script_args = GIVEN.get().script_args  # the script's own, where the user gives them
        self.every_branch = every_branch
        self.commands: list[list[str]] = []
        self.files: dict[str, str] = {}
        self.inner: set[int] = set()  # indices of the commands read from a string or job script another shell runs
        self.functions: dict[str, Function] = {}
        self.budget = Budget("commands")  # a loop the reader cannot see the end of stops at its steps
        self._guessed = 0  # branches entered past a test not known
        self._locals: list[dict] = []
        try:
            self.run(parse(text, where))
        except (_Exit, _Return):
            pass
        except RecursionError:  # commands nested hundreds deep: no launch script is written so
            raise refusal(where, "is not shell perfmodel reads: commands nested too deep", "a launch script") from None

    # -- what readers ask -----------------------------------------------------------------------------------
    def scalars(self) -> dict[str, str]:
        """The script's variables as the one word each expands to (an array's words joined by spaces)."""
        return {k: " ".join(v) if isinstance(v, list) else v for k, v in self.vars.items()}

    def not_read(self, value: str | None) -> str | None:
        """Why `value` (a word of a command, or part of one) is not known: "EXPR: why" for the expansion in it the
        script leaves not read, e.g. "$(nvidia-smi -L | wc -l): command output"; None where it is known."""
        if not value:
            return None
        hits = [w for w in self.unread if w.startswith(EXPANSIONS) and w in value]
        if not hits:
            return None
        return self.unread.of(max(hits, key=len)).named

    # -- running the tree -----------------------------------------------------------------------------------
    def run(self, nodes: list) -> bool | None:
        status: bool | None = True
        for node in nodes:
            status = self.node(node)
        return status

    def node(self, n) -> bool | None:
        """Follow one command; its status: True (a command, assumed to succeed), False, or None (a test not known,
        which takes no branch)."""
        try:
            self.budget.step()
        except OverBudget as over:
            self.unread.name("(the rest of the script)", str(over))
            raise _Exit from None
        if isinstance(n, AndOr):
            self.bare_read = False
            status = self.pipeline(n.first)
            bare = self.bare_read and bool(n.rest)  # `[ -z "$1" ] && exit 1`: the rest on a bare run's reading
            self._guessed += bare
            try:
                for op, p in n.rest:
                    if (op == "&&" and status is True) or (op == "||" and status is False):
                        status = self.pipeline(p)
            finally:
                self._guessed -= bare
            return status
        if isinstance(n, If):
            return self.if_(n)
        if isinstance(n, Case):
            return self.case(n)
        if isinstance(n, For):
            return self.for_(n)
        if isinstance(n, While):
            return self.while_(n)
        if isinstance(n, Group):
            return self.run(n.body)
        if isinstance(n, Function):
            self.functions[n.name] = n
            return True
        if isinstance(n, Test):
            return self.test([w for w in n.words], double=True)
        if isinstance(n, Arith):
            v = self.arith(n.expr)
            return None if v is None else v != 0
        if isinstance(n, Pipeline):
            return self.pipeline(n)
        return self.simple(n, None)[0]

    def pipeline(self, p: Pipeline) -> bool | None:
        data, status = None, True
        for cmd in p.commands:
            if isinstance(cmd, Simple):
                status, data = self.simple(cmd, data)
            else:
                status, data = self.node(cmd), None
        if p.negate:
            return None if status is None else not status
        return status

    def if_(self, n: If) -> bool | None:
        # a test not known, or read as a bare run has it (a variable never set, no arguments: a usage guard's
        # `[ $# -lt 1 ]`): the branch after it is followed on that reading, not known to run, and its `exit` does not
        # end the reading
        guessed = False
        for cond, body in n.branches:
            if self.every_branch:
                self.run(body)
                continue
            status = self.run(cond)
            if status is True:
                return self.assumed(body, guessed or self.bare_read)
            guessed = guessed or status is None or self.bare_read
        return self.assumed(n.orelse, guessed) if n.orelse is not None else True

    def assumed(self, body: list, guessed: bool) -> bool | None:
        """Run a branch; where it was reached past a test not known, an `exit` in it does not end the reading."""
        self._guessed += guessed
        try:
            return self.run(body)
        finally:
            self._guessed -= guessed

    def case(self, n: Case) -> bool | None:
        self.testing, self.bare_read = True, False
        word, known = self.string(n.word)
        bare = self.bare_read  # `case $1 in ... *) usage; exit 1`: as if_ reads a test of what a bare run has
        for patterns, body in n.arms:
            if self.every_branch:
                self.run(body)
                continue
            pats = [self.string(p) for p in patterns]
            if known and any(k and glob(word, p) for p, k in pats):
                self.testing = False
                return self.assumed(body, bare)
        self.testing = False
        if not known and not self.every_branch:
            self.unread.name(f"case {n.word}", "the value it tests is not read: no arm followed")
        return True

    def for_(self, n: For) -> bool | None:
        if n.var == "((":
            self.unread.name("for ((...))", "a counted loop: its body not followed")
            return True
        raws = n.words if n.words is not None else ['"$@"']
        items = [w for raw in raws for w in self.fields(raw)]
        status = True
        for item in items[:MAX_LOOP]:
            self.vars[n.var] = item
            if self.not_read(item):
                self.unknown.add(n.var)
            else:
                self.unknown.discard(n.var)
            status = self.run(n.body)
        return status

    def while_(self, n: While) -> bool | None:
        status = True
        for _ in range(MAX_LOOP):
            go = self.run(n.cond)
            if go is None:
                self.unread.name("while/until loop", "its test is not known: its body not followed")
                return True
            if go == n.until:
                return status
            status = self.run(n.body)
        return status

    # -- simple commands ------------------------------------------------------------------------------------
    def simple(self, n: Simple, stdin: str | None) -> tuple[bool | None, str | None]:
        """(status, what it writes to its standard output where known: a heredoc through `cat` / `tee`, `echo`)."""
        self.line = n.line
        if not n.words:
            for a in n.assigns:
                self.assign(a)
            return True, None
        words = [w for raw in n.words for w in self.fields(raw)]
        if not words:
            return True, None
        for r in n.redirects:
            if r.op in ("<<", "<<-"):
                stdin = r.body if r.quoted else self.heredoc_of(r.target, r.body or "")
            elif r.op == "<<<":
                stdin = self.string(r.target)[0] + "\n"
        status, out = self.builtin(words, n, stdin)
        for r in n.redirects:
            if r.op in (">", ">|", "&>", ">>", "&>>"):
                self.write(r.target, out, r.op.endswith(">>"))
                out = None
        return status, out

    def builtin(self, words: list[str], n: Simple, stdin: str | None) -> tuple[bool | None, str | None]:
        name, args = words[0], words[1:]
        if name in DECLARE and n.words[0] == name:
            for raw in n.words[1:]:
                if is_assignment(raw):
                    self.assign(raw, local=name == "local")
                elif name == "local" and not raw.startswith("-"):
                    self._save(raw)
                    self.vars.pop(raw, None)
            return True, None
        if name == "unset":
            for a in args:
                if not a.startswith("-"):
                    self.vars.pop(a, None)
            return True, None
        if name == "shift" and self.positional is not None:
            k = int(args[0]) if args and args[0].isdigit() else 1
            mine = self.positional is self.script_args
            self.positional = self.positional[k:]
            if mine:  # the script shifts its own arguments: what is left is still theirs
                self.script_args = self.positional
            return True, None
        if name == "set" and "--" in args:
            self.positional = args[args.index("--") + 1:]
            return True, None
        if name in ("[", "test"):
            raws = n.words[1:-1] if name == "[" and n.words[-1] == "]" else n.words[1:]
            return self.test(raws, double=False), None
        if name in ("true", ":", "false"):
            return name != "false", None
        if name == "exit":
            if self._guessed or self.every_branch:
                self.unread.name("exit", "reached past a test not known, or one read as a bare run has it: the "
                                         "reading goes on")
                return True, None
            raise _Exit
        if name == "return":
            raise _Return
        if name in ("source", "."):
            self.unread.name(" ".join(words), "another file: not read")
        if name == "read" and args:
            self.read(args, stdin)
            return True, None
        if name in self.functions:
            return self.call(self.functions[name], args), None
        if name == "eval" and args:
            try:
                return self.run(parse(" ".join(args), f"{self.where} (eval)")), None
            except InputError:  # the words do not parse as shell (something not read in them): kept as words
                pass
        self.commands.append(words)
        self.shells(words, stdin)
        if name == "cat" and len(words) == 1:
            return True, stdin
        if name == "echo":
            flags = [a for a in args[:1] if a in ("-n", "-e", "-ne", "-en")]
            return True, " ".join(args[len(flags):]) + ("" if "n" in "".join(flags) else "\n")
        if name == "tee":
            for a in args:
                if not a.startswith("-"):
                    self.write_text(a, stdin, "-a" in args)
            return True, stdin
        return True, None

    def shells(self, words: list[str], stdin: str | None) -> None:
        """The script a command hands to another shell, read after it: `bash -c STRING` / `sh -c STRING` (also
        behind a launcher: `srun ... bash -x -c "$CMD"`), and a job script on standard input (`sbatch <<EOF`,
        `bash <<EOF`). Their commands are listed in `inner` (bash runs them in that other shell, not here)."""
        for i, w in enumerate(words):
            if w.rsplit("/", 1)[-1] not in ("bash", "sh"):
                continue
            rest = words[i + 1:]
            k = next((j for j, o in enumerate(rest) if not o.startswith("-")), len(rest))  # bash's options end
            if "-c" in rest[:k] and k < len(rest):  # the first word after them is the command string
                return self.nested(rest[k], rest[k + 2:], f"{w} -c")
            break
        launcher = words[0].rsplit("/", 1)[-1]
        if stdin is not None and launcher in ("sbatch", "bash", "sh") and all(a.startswith("-") for a in words[1:]):
            self.nested(stdin, [], f"{launcher}'s standard input")

    def nested(self, text: str, args: list[str], what: str) -> None:
        start, saved = len(self.commands), self.positional
        self.positional = list(args)
        try:
            self.run(parse(text, f"{self.where} ({what})"))
        except InputError as err:  # what it hands on does not parse (something not read in it): named, not read
            self.unread.name(f"{what} {text[:60]}", f"not read as shell: {err}")
        except (_Exit, _Return):
            pass
        finally:
            self.positional = saved
            self.inner.update(range(start, len(self.commands)))

    def read(self, args: list[str], stdin: str | None) -> None:
        """`read [-r] [-d ''] NAME <<EOF`: the heredoc (its first line without -d) into NAME."""
        names = [a for a in args if a.isidentifier()]
        if not names:
            return
        target = names[-1]
        if stdin is None:
            self.vars[target] = f"$({' '.join(['read'] + args)})"
            self.unknown.add(target)
            self.unread.name(self.vars[target], "read from its input, not known")
            return
        text = stdin if "-d" in args else stdin.split("\n", 1)[0]
        self.vars[target] = text.strip(" \t\n")
        self.unknown.discard(target)

    def call(self, fn: Function, args: list[str]) -> bool | None:
        """A function's body with $1... bound to the call's words; its `local` variables restored after."""
        try:
            self.budget.enter()
        except OverBudget as over:
            self.unread.name(f"{fn.name} (call)", f"{over}: not followed")
            return True
        saved = self.positional
        self.positional = list(args)
        self._locals.append({})
        try:
            return self.node(fn.body)
        except _Return:
            return True
        finally:
            self.budget.leave()
            for name, (old, unknown) in self._locals.pop().items():
                if old is None:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = old
                (self.unknown.add if unknown else self.unknown.discard)(name)
            self.positional = saved

    def _save(self, name: str) -> None:
        if self._locals and name not in self._locals[-1]:
            self._locals[-1][name] = (self.vars.get(name), name in self.unknown)

    def write(self, target: str, text: str | None, append: bool) -> None:
        self.write_text(self.string(target)[0], text, append)  # a path not read is kept as written

    def write_text(self, path: str, text: str | None, append: bool) -> None:
        if text is None or path.startswith("/dev/"):
            return
        self.files[path] = (self.files.get(path, "") if append else "") + text

    # -- assignments ----------------------------------------------------------------------------------------
    def assign(self, raw: str, local: bool = False) -> None:
        """NAME=value, NAME+=value, NAME=( words ), NAME+=( words ), NAME[i]=value (no field splitting of a value;
        an array's words split as a command's are)."""
        head, value = raw.split("=", 1)
        append = head.endswith("+")
        name, _, index = head.rstrip("+").partition("[")
        if local:
            self._save(name)
        old = self.vars.get(name)
        if value.startswith("(") and value.endswith(")") and not index:
            words = [t.text for t in tokenize(value[1:-1], self.where) if t.kind == "word"]
            items = [w for raw_w in words for w in self.fields(raw_w)]
            prev = (old if isinstance(old, list) else [old] if old else []) if append else []
            self.vars[name] = prev + items
            self.unknown.discard(name)
            return
        text, known = self.string(value)
        if index:
            self.assign_element(name, index[:-1], text, known, append)
            return
        if append and isinstance(old, list):
            self.vars[name] = old + [text]
        else:
            self.vars[name] = (old or "") + text if append and isinstance(old, str) else text
        if known and not (append and name in self.unknown):
            self.unknown.discard(name)
            self.bare.pop(name, None)
        else:
            self.unknown.add(name)
            self.bare_value(name, value, append)
            why = self.not_read(text)
            self.unread.name(name, f"= {why}" if why else f"= {text}: not read")

    def bare_value(self, name: str, value: str, append: bool) -> None:
        """The value a test reads of a variable set from what is unset (the script's arguments, its environment):
        that read as empty, as in a bare run (`OUTPUT=$1; if [ "$OUTPUT" == "" ]; then OUTPUT=./out; fi`)."""
        self.testing = True
        try:
            text, known = self.string(value)
        finally:
            self.testing = False
        old = self.bare.pop(name, None) if append else ""
        if known and old is not None:
            self.bare[name] = old + text

    # -- tests ----------------------------------------------------------------------------------------------
    def test(self, raws: list[str], double: bool) -> bool | None:
        """A `[ ]` / `test` / `[[ ]]` condition: True, False, or None where it needs what is not known (a file's
        existence, a value not read)."""
        self.testing = True
        try:
            items = [(raw, *self.string(raw)) for raw in raws]
        finally:
            self.testing = False
        return Condition(items, double).value()
