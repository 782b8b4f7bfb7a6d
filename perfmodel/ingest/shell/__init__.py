"""A launch script read as bash would read it, never run: the one shell reader of every framework's scripts.

- `lex`: the text as tokens.
- `parse`: the tokens as a tree of commands: lists, pipelines, if, for, while, case, functions, heredocs.
- `expand`: a word as the words bash would pass: quotes, parameters, arithmetic, field splitting.
- `cond`: `[ ]`, `test` and `[[ ]]` conditions, three-valued where a value is unknown.
- `script`: the walker: the script's commands as the words bash would pass, and the files it writes.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
