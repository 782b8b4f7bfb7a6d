r"""A launch script read as bash would read it, never run: lexer, parser, word expansion, conditions and the script walker.

- `cond`: A `[ ]` / `test` / `[[ ]]` condition over words already expanded (perfmodel.ingest.shell.script): three-valued,
- `expand`: A shell word as the words bash would pass (read as data, never run): quotes ('...', "...", $'...', \x),
- `lex`: A launch script's text as bash's grammar sees it (read as data, never run): tokens, then a tree of commands.
- `parse`: A launch script's tokens (perfmodel.ingest.shell.lex) as a tree of commands, bash's grammar in small: lists
- `script`: A launch script's commands as the words bash would pass them, read as data (never run): the one shell reader of

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
