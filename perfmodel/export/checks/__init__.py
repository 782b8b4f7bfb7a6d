"""Each framework release's own configuration code run on an export (`perfmodel export --check`).

A release is fetched from PyPI once; its own config loading and validation run on the exported text in a subprocess,
with that release first on the path.

- `releases`: fetch a release and run its check on exports.
- `batch`: the subprocess that runs a list of exports through one check.
- `megatron_check`, `torchtitan_check`, `deepspeed_check`, `maxtext_check`: each framework's checks.
- `maxtext_env`: the Python >= 3.12 with JAX that MaxText's check runs under.
- `spread`: the plans, one of every layout kind, whose exports the tests run through the checks.

The check scripts import only their framework; `releases` and `maxtext_env` import the ground; `spread` builds its
plans with `cost` and `search`, as export's row allows `checks` (perfmodel.layers).
"""
