"""`perfmodel app`: the planner page, the front end above the CLI. A small ASGI app (Starlette, served by uvicorn:
`server`, started by `command`) with one page whose charts Plotly.js draws from the installed `plotly` package (no
CDN). Its forms are read off the CLI's own parsers (`forms`) and its answers are the CLI commands' own functions
(`actions`), so the page and `perfmodel COMMAND` cannot disagree. It imports `perfmodel.cli` and what the CLI
imports; nothing imports it (`cli.main` names its command module by path).
"""
