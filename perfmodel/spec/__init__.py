"""What a user describes, as pydantic schemas and the catalogues behind them: the model (`model`, read from a
HuggingFace config.json by `spec.model.hf_config`, by preset name from `spec.model.presets` through `model_catalogue`), the
hardware (`hardware`: systems, accelerators, network tiers, efficiencies, the YAML catalogue in hardware_specs/),
the software stack (`stack`), the plan and its recompute policies (`plan`, `recompute`), the operators a plan
places (`operators`), plan files (`plan_file`), what the cost model returns (`result`), what the executor
measures (`measurement`) and the built-in example (`example`). It imports only `perfmodel.errors` and
`perfmodel.files` (and pydantic, numpy, PyYAML): every other stage reads it, it reads none of them.
"""
