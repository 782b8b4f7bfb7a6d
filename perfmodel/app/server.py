"""The planner page's HTTP side: one page, its static files, and a JSON route per tab (`actions`).

Safe by default: the CLI binds to 127.0.0.1; nothing here reads a path the page sends (a model config or spec
arrives as an upload, size-capped, written to a private temporary folder and parsed by the CLI's own loaders; a
framework's own config files likewise, read as data by perfmodel.ingest: `config_upload`; profiler traces likewise,
read by the trace reader: `trace_upload`), save the Sweep tab's results folder, which is only read, as `perfmodel
sweep report DIR` reads it (`sweep_tab`);
bad input answers 400 with the CLI's one-line message and the field it names, never a traceback. The work of a
request runs in a worker thread (Starlette runs sync endpoints in its thread pool), and a search runs as a job
the page polls, so a long search blocks no other request.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ..errors import InputError
from . import actions, config_upload, forms, sweep_tab, trace_upload

STATIC = Path(__file__).parent / "static"
MAX_UPLOAD = 1 << 20  # bytes per uploaded file: a HF config.json or a spec YAML is a few KiB
MAX_BODY = 4 << 20
UPLOAD_SUFFIXES = (".json", ".yaml", ".yml")
COMMANDS = ("predict", "search", "infer", "forecast")


def plotly_js() -> Path:
    """plotly.min.js as the `plotly` Python package ships it (no CDN)."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class Jobs:
    """Searches running in a small pool, polled by id; finished jobs are kept for the page to read."""

    def __init__(self, workers: int = 2):
        self.pool, self.jobs, self.ids, self.lock = ThreadPoolExecutor(workers), {}, itertools.count(1), threading.Lock()

    def start(self, fn) -> str:
        job = str(next(self.ids))
        with self.lock:
            self.jobs[job] = {"state": "running", "started": time.monotonic()}
        self.pool.submit(self._run, job, fn)
        return job

    def _run(self, job: str, fn) -> None:
        try:
            out = {"state": "done", "result": fn()}
        except InputError as err:
            out = {"state": "error", "message": str(err)}
        except Exception as err:  # noqa: BLE001 - one line to the page, never a traceback
            out = {"state": "error", "message": f"internal error: {type(err).__name__}: {err}"}
        with self.lock:
            self.jobs[job].update(out, elapsed_s=time.monotonic() - self.jobs[job]["started"])

    def get(self, job: str) -> dict:
        with self.lock:
            j = self.jobs.get(job)
            if j is None:
                raise InputError(f"job = {job!r} is not a search of this server")
            return {k: v for k, v in j.items() if k != "started"} | (
                {"elapsed_s": time.monotonic() - j["started"]} if j["state"] == "running" else {})


def refusal(err: Exception, command: str | None) -> JSONResponse:
    message = str(err)
    field = getattr(err, "field", None) or (forms.field_of(message, command) if command else None)
    return JSONResponse({"message": message, "field": field}, status_code=400)


async def body(request: Request, limit: int = MAX_BODY) -> dict:
    size = int(request.headers.get("content-length") or 0)
    if size > limit:
        raise InputError(f"request of {size} bytes; valid: up to {limit} bytes")
    try:
        data = json.loads(await request.body())
    except json.JSONDecodeError as err:
        raise InputError(f"request body is not JSON ({err}); valid: a JSON object {{values, uploads}}") from None
    if not isinstance(data, dict):
        raise InputError("request body: valid: a JSON object {values, uploads}")
    return data


def write_uploads(uploads: dict, folder: Path) -> dict[str, str]:
    """Each upload {flag: {name, text}} written into `folder` under a fixed name keeping its suffix; InputError for
    a file too large or of another kind."""
    out = {}
    for flag, up in (uploads or {}).items():
        if not isinstance(up, dict) or not isinstance(up.get("text"), str):
            raise InputError(f"upload for {flag}: valid: {{name, text}}")
        name = str(up.get("name") or "")
        suffix = Path(name).suffix.lower()
        if suffix not in UPLOAD_SUFFIXES:
            raise InputError(f"upload for {flag}: file {name!r}; valid: a {', '.join(UPLOAD_SUFFIXES)} file")
        data = up["text"].encode()
        if len(data) > MAX_UPLOAD:
            raise InputError(f"upload for {flag}: {name!r} is {len(data)} bytes; valid: up to {MAX_UPLOAD} bytes")
        if flag == "--hardware" and names_files(up["text"]):
            raise InputError(f"upload for {flag}: {name!r} names kernel table files (accelerator.kernel_tables), "
                             "which the page does not read from this machine; valid: a spec without them")
        path = folder / f"{forms.UPLOADABLE.get(flag, 'upload')}{suffix}"
        path.write_bytes(data)
        out[flag] = str(path)
    return out


def names_files(text: str) -> bool:
    """An uploaded hardware spec that names files beside it (its kernel tables): read from the server otherwise."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False  # the CLI's loader refuses it in its own words
    acc = data.get("accelerator") if isinstance(data, dict) else None
    return isinstance(acc, dict) and bool(acc.get("kernel_tables"))


def uploaded_names(message: str, written: dict[str, str], uploads: dict | None) -> str:
    """`message` with each upload's server-side path replaced by the name of the file the page sent."""
    for flag, path in written.items():
        message = message.replace(path, str((uploads or {}).get(flag, {}).get("name") or Path(path).name))
    return message


def create_app() -> Starlette:
    jobs = Jobs()

    def run(command: str, data: dict, fn):
        """fn(argv) on the form's values and uploads, with uploads in a private temporary folder (named in a
        refusal by the file name the page sent, not the server's path)."""
        with tempfile.TemporaryDirectory(prefix="perfmodel-app-") as tmp:
            written = write_uploads(data.get("uploads"), Path(tmp))
            try:
                return fn(forms.argv(command, data.get("values") or {}, written))
            except InputError as err:
                raise InputError(uploaded_names(str(err), written, data.get("uploads"))) from None

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        files = {"app.js": STATIC / "app.js", "forms.js": STATIC / "forms.js", "app.css": STATIC / "app.css",
                 "trace.js": STATIC / "trace.js", "sweep.js": STATIC / "sweep.js",
                 "plotly.min.js": plotly_js()}
        if name not in files:
            return JSONResponse({"message": f"no static file {name!r}"}, status_code=404)
        return FileResponse(files[name])

    async def meta(request: Request) -> Response:
        from ..cli.plan_flags import EXAMPLE
        from ..export.targets import versions
        from ..spec.hardware.system import list_systems
        from ..spec.model.catalogue import list_models

        from ..export.targets import TARGETS

        from ..ingest import FRAMEWORKS
        from .form_groups import SECTIONS

        return JSONResponse({"fields": {c: forms.fields(c) for c in COMMANDS}, "models": list_models(),
                             "hardware": list_systems(), "example": EXAMPLE, "sections": SECTIONS,
                             "frameworks": {k: what for k, (_, what) in FRAMEWORKS.items()},
                             "export": {t: list(versions(t)) for t in TARGETS}})

    def endpoint(command: str, work, limit: int = MAX_BODY):
        async def handle(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            try:
                data = await body(request, limit)
                return JSONResponse(await run_in_threadpool(work, data))
            except InputError as err:
                return refusal(err, command)
            except Exception as err:  # noqa: BLE001
                return JSONResponse({"message": f"internal error: {type(err).__name__}: {err}", "field": None},
                                    status_code=500)
        return handle

    def predict(data):
        return run("predict", data, actions.predict)

    def infer(data):
        return run("infer", data, lambda args: actions.command_json("infer", args))

    def forecast(data):
        return run("forecast", data, lambda args: actions.command_json("forecast", args))

    def import_config(data):  # a framework's config: predict --config FILES --from ... (config_upload)
        return config_upload.run_import(data)

    def trace(data):  # profiler traces: what they measured, the form's plan on the spec they calibrate (trace_upload)
        with tempfile.TemporaryDirectory(prefix="perfmodel-app-") as tmp:
            return run("predict", data, lambda args: trace_upload.run_trace(data, args, Path(tmp)))

    def export(data):
        return run("predict", data, lambda args: actions.export(args, str(data.get("to") or ""),
                                                               data.get("version") or None, bool(data.get("check"))))

    def search(data):
        # parse now, so that bad input is refused at once; the uploads must outlive the request: the job keeps them
        import shutil

        tmp = tempfile.mkdtemp(prefix="perfmodel-app-")
        try:
            written = write_uploads(data.get("uploads"), Path(tmp))
            args = forms.argv("search", data.get("values") or {}, written)
            forms.parse("search", args)
        except InputError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InputError(uploaded_names(str(err), locals().get("written", {}), data.get("uploads"))) from None

        def work():
            try:
                return actions.command_json("search", args)
            except InputError as err:
                raise InputError(uploaded_names(str(err), written, data.get("uploads"))) from None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return {"job": jobs.start(work)}

    async def job(request: Request) -> Response:
        try:
            return JSONResponse(jobs.get(request.path_params["job"]))
        except InputError as err:
            return JSONResponse({"message": str(err)}, status_code=404)

    async def sweeps(request: Request) -> Response:  # the sweeps under perfmodel-runs/sweeps/ (sweep_tab)
        from starlette.concurrency import run_in_threadpool

        return JSONResponse(await run_in_threadpool(sweep_tab.found))

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)

    routes = [Route("/", page), Route("/favicon.ico", no_icon), Route("/static/{name}", static), Route("/api/meta", meta),
              Route("/api/predict", endpoint("predict", predict), methods=["POST"]),
              Route("/api/search", endpoint("search", search), methods=["POST"]),
              Route("/api/jobs/{job}", job),
              Route("/api/export", endpoint("predict", export), methods=["POST"]),
              Route("/api/import", endpoint("predict", import_config), methods=["POST"]),
              Route("/api/trace", endpoint("predict", trace, trace_upload.MAX_BODY), methods=["POST"]),
              Route("/api/forecast", endpoint("forecast", forecast), methods=["POST"]),
              Route("/api/infer", endpoint("infer", infer), methods=["POST"]),
              Route("/api/sweeps", sweeps),
              Route("/api/sweep", endpoint(None, sweep_tab.results), methods=["POST"])]
    return Starlette(routes=routes)
