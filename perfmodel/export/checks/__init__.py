"""Each framework's own configuration checks run on an export (`perfmodel export --check`): `releases` fetches a
release from PyPI and runs the per-target check script (`megatron_check`, `torchtitan_check`, `deepspeed_check`,
`maxtext_check`: under the Python >= 3.12 `maxtext_env` makes) in a subprocess (`batch`), with that release first
on its path; `spread` is the set of plans whose exports the
tests run through them. The check scripts import only the framework; `releases` imports `perfmodel.errors`;
`spread` imports `perfmodel.cost` and `perfmodel.search` to build its plans.
"""
