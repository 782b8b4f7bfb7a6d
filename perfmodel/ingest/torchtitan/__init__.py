"""torchtitan configs in: TOML job configs and config registry modules, flavors, spellings, switches and its key table.

- `flavors`: torchtitan's model families and flavors as perfmodel models: the preset `spec.model.catalogue.preset_for_name`
- `keys`: torchtitan's keys and what each becomes: the model from [model] name / flavor, the plan from [parallelism],
- `reader`: torchtitan's own config read as data: a TOML job config (torchtitan <= 0.2.x, torchtitan/config/job_config.py
- `spellings`: The keys older torchtitan TOML job configs spell otherwise, read under today's names (the ledger keeps the key as
- `switches`: torchtitan's precision and switches: the float8 / MX / NVFP4 converters and the stored dtypes

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
