"""MaxText configs in: layered YAML files, the model, mesh axes, precision and remat settings, with its key table.

- `axes`: MaxText's device mesh and batch as plan fields: the inverse of perfmodel.export.maxtext.mesh.mesh and
- `files`: MaxText's config files as layers of keys (read as data, never run): YAML configs (base.yml, a model's YAML, a
- `keys`: MaxText's vocabulary as data for `perfmodel import --from maxtext`: the base.yml defaults the reader needs when
- `model`: MaxText's model as a ModelConfig: the decoder block's shape keys (a configs/models/<model_name>.yml over
- `reader`: `perfmodel import --from maxtext`: MaxText's layered config read as data (base.yml, a model's YAML, a recipe's
- `settings`: MaxText's precision, remat policy and MoE keys as plan fields (perfmodel.ingest.maxtext.reader's `Config`):

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
