"""A plan file as one version of a training framework's configuration: Megatron-LM (`megatron`, `megatron_plan`,
`megatron_moe`), torchtitan (`torchtitan` and its `_model`, `_nearest`, `_py`, `_toml` parts), DeepSpeed
(`deepspeed`), MaxText (`maxtext`, `maxtext_mesh`), dispatched by `targets`; `nearest` changes a plan a version cannot run into the nearest one it can
and re-predicts it; `checks` runs each framework release's own configuration code on an export. The writers
import only `perfmodel.spec` (a plan file is all they read); `nearest` and `checks.spread` also import
`perfmodel.cost` and `perfmodel.search` to re-predict.
"""
