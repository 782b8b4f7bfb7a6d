"""Checkpoints of `perfmodel execute --checkpoint-every`: where they go, which one a resume may trust, save and resume.

- `manifest`: checkpoint directories and manifests, and which one `--resume` may trust (no torch).
- `resume`: save and resume a plan's training with torch.distributed.checkpoint, inside the workers.

It may import what `execute` may: `spec` and the ground (perfmodel.layers).
"""
