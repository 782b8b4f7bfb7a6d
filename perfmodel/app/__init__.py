"""`perfmodel app`: the planner page, a front end on top of the CLI (docs/app.md).

One page served on this machine (Starlette, uvicorn), its charts drawn by Plotly.js from the installed `plotly`
package (no CDN). Its forms are read off the CLI's own parsers and its answers are the CLI commands' own functions,
so the page and `perfmodel COMMAND` cannot disagree.

- `command`: the `perfmodel app` subcommand, which starts the server.
- `server`: the HTTP side: the page, its static files, one JSON route per tab.
- `forms`: the forms read off the CLI's parsers, and the argv a filled form runs as.
- `form_groups`: each flag's section and plain label (data).
- `actions`: what each tab runs: the CLI's own parse and functions, answered as JSON.
- `uploads`: the checks every file upload shares.
- `config_upload`: a framework's config uploaded and priced as `perfmodel predict --config` prices it.
- `trace_upload`: profiler traces uploaded, and the plan priced on the spec they calibrate.
- `sweep_tab`: a finished sweep's results read back for the Sweep tab.
- `static/`: the page itself (HTML, JavaScript, CSS).

It may import every stage below it (perfmodel.layers). Nothing imports it: `cli.main` names `command` by its path.
"""
