"""The committed JSON schema of hardware spec files is the one the pydantic models export."""

import json
from pathlib import Path

from perfmodel.spec.hardware.system import hardware_json_schema

ROOT = Path(__file__).resolve().parents[1]


def test_committed_schema_matches_models():
    committed = json.loads((ROOT / "hardware_specs" / "schema.json").read_text())
    assert committed == hardware_json_schema(), "regenerate with: perfmodel hardware schema > hardware_specs/schema.json"


def test_schema_accepts_accelerator_name_or_object():
    acc = hardware_json_schema()["properties"]["accelerator"]["anyOf"]
    assert {"type": "string"}.items() <= acc[0].items()
    assert acc[1] == {"$ref": "#/$defs/Accelerator"}
