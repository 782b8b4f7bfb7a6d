"""Checkpoints of `perfmodel execute --checkpoint-every`: directories and manifests, save and resume with torch.distributed.checkpoint.

- `manifest`: Checkpoint directories of `perfmodel execute --checkpoint-every K --checkpoint-dir D`: names, manifests, and
- `resume`: Save and resume a plan's training with torch.distributed.checkpoint (DCP), inside the workers.

It imports only `perfmodel.spec` and the rest of `perfmodel.execute`.
"""
