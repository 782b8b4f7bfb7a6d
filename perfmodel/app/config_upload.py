"""A framework's own config uploaded to the page: priced as `perfmodel predict --config FILE... --from FRAMEWORK
[--name C] [--hardware H] [--gpus N]` prices it (the same parse, `cli.plan_input.config_plan`), with what every key
became (perfmodel.ingest's `Imported.keys`) and the predict form's fields filled from the imported plan, so the
user can edit it and predict again.

The files are written into a private temporary folder under their own base names (checked: letters, digits, dots,
hyphens and underscores, nothing that leaves the folder), size-capped, read as data by the framework's reader
(never run), and the folder is gone when the answer is. A refusal is the reader's one line, with the folder's path
taken out so that it names the file the page sent.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..errors import InputError
from . import forms
from .uploads import check_count, upload_path

MAX_FILES = 16  # a MaxText import layers base.yml, a model YAML and a recipe; a Megatron one a script and a YAML
MAX_FILE_BYTES = 1 << 20  # a config is a few KiB; the server caps the whole request too (server.MAX_BODY)
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
BOX = ("--from", "--name", "--hardware", "--gpus")  # the upload box's fields, as predict's flags


def write_configs(files, folder: Path) -> list[Path]:
    """Each {name, text} of `files` written into `folder` under its base name, in order; InputError in one line
    for no file, too many, a name the folder cannot hold as is, a repeated name or a file too large."""
    check_count(files, "config upload", MAX_FILES, "one or more config files (the framework's own TOML, YAML, JSON, "
                "launch script or Python module)")
    out: list[Path] = []
    for up in files:
        if not isinstance(up, dict) or not isinstance(up.get("text"), str):
            raise InputError("config upload: each file is {name, text}; valid: a text file")
        path = upload_path(str(up.get("name") or ""), folder, out, "config upload", FILE_NAME,
                           "letters, digits and . _ - (up to 128, not starting with a dot)")
        data = up["text"].encode()
        if len(data) > MAX_FILE_BYTES:
            raise InputError(f"config upload: {path.name!r} is {len(data)} bytes; valid: up to {MAX_FILE_BYTES} bytes")
        path.write_bytes(data)
        out.append(path)
    return out


def box_values(data: dict) -> dict[str, str]:
    """The upload box's framework, config name, hardware and GPU count as predict's flags (empty ones left out)."""
    keys = {"--from": "framework", "--name": "name", "--hardware": "hardware", "--gpus": "gpus"}
    return {flag: str(data.get(key)).strip() for flag, key in keys.items() if data.get(key) not in (None, "")}


def run_import(data: dict) -> dict:
    """The page's answer to an upload {files, framework, name, hardware, gpus}: predict's answer (actions.predict)
    for `perfmodel predict --config FILES --from ...`, and under "import" every key's fate, the form's values and the
    CLI command it answers."""
    from . import actions

    values = box_values(data)
    if "--from" not in values:
        raise InputError("config upload: framework is not chosen; valid: "
                         f"{', '.join(forms.fields_by_flag('predict')['--from']['choices'])}")
    with tempfile.TemporaryDirectory(prefix="perfmodel-app-") as tmp:
        folder = Path(tmp)
        paths = write_configs(data.get("files"), folder)
        try:
            flags = forms.argv("predict", values)  # each value checked as the form checks it (no path, --from's list)
            out = actions.predict(["--config", *map(str, paths), *flags])
            out["import"] = imported(paths, values, out)
        except InputError as err:
            raise InputError(scrub(str(err), folder)) from None
    return scrub_all(out, folder)


def imported(paths: list[Path], values: dict[str, str], out: dict) -> dict:
    """What the config became: every key's fate, the predict form's values and the model to upload with them."""
    from ..ingest import launch_of, plan_fields, read_config
    from ..spec.hardware.system import load_hardware

    imp = read_config(paths, values["--from"], values.get("--name"))
    gpus = values.get("--gpus")
    hardware, count = launch_of(imp, values.get("--hardware"), int(gpus) if gpus else None)
    form, left = plan_values(plan_fields(imp, count, load_hardware(hardware)))
    model, upload = model_field(imp.model)
    form |= {"--model": model, "--hardware": hardware, "--gpus": str(count)}
    command = ["perfmodel", "predict", "--config", *(p.name for p in paths), "--from", imp.framework,
               *(["--name", imp.name] if imp.name else []), "--hardware", hardware, "--gpus", str(count)]
    return {"framework": imp.framework, "files": [p.name for p in paths], "name": imp.name,
            "keys": [k.model_dump() for k in imp.keys], "values": form, "model_upload": upload,
            "not_in_form": left, "command": " ".join(command), "model": imp.model.name}


def model_field(model) -> tuple[str, dict | None]:
    """The --model field for the imported model: its preset's name where the preset is the same model, else the
    model as a ModelConfig JSON upload (what `--model FILE.json` reads)."""
    from ..spec.model.catalogue import list_models, load_model

    if model.name in list_models() and load_model(model.name) == model:
        return model.name, None
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model.name).strip("-.") or "model"
    return f"{name}.json", {"name": f"{name}.json", "text": model.model_dump_json(indent=2)}


def plan_values(plan: dict) -> tuple[dict[str, object], list[str]]:
    """The imported plan's fields (ingest.plan_fields: the config's, before resolving) as predict's form values, and the fields the form has no place
    for ('field = value': re-predicting from the form leaves them at the stack's default)."""
    known = forms.fields_by_flag("predict")
    values: dict[str, object] = {}
    left: list[str] = []
    for field, v in plan.items():
        if v is None:
            continue
        flag = "--" + field.replace("_", "-")
        if field == "overlap_dp_comm":
            flag, v = "--no-overlap-dp-comm", not v
        elif field == "tp_comm_overlap":
            v = "on" if v else "off"
        elif field == "lora":
            for k, kv in {"--lora-rank": v.get("rank"), "--lora-modules": v.get("modules"),
                          "--lora-base": v.get("base_weights")}.items():
                if kv is not None:
                    values[k] = str(kv)
            continue
        f = known.get(flag)
        if f is None or f["kind"] == "checkbox" and v is False and flag in ("--moe-overlap", "--moe-pad-to-capacity"):
            left.append(f"{field} = {v if not isinstance(v, list) else ','.join(map(str, v))}")
        elif f["kind"] == "checkbox":
            if v:
                values[flag] = True
        else:
            values[flag] = ",".join(map(str, v)) if isinstance(v, list) else str(v)
    return values, left


def scrub(text: str, folder: Path) -> str:
    """`text` without the upload folder's path: the files by the names the page sent."""
    for f in {str(folder), str(folder.resolve())}:
        text = text.replace(f + "/", "").replace(f, "")
    return text


def scrub_all(value, folder: Path):
    """`scrub` over every string of a JSON-ready answer."""
    if isinstance(value, str):
        return scrub(value, folder)
    if isinstance(value, list):
        return [scrub_all(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: scrub_all(v, folder) for k, v in value.items()}
    return value
