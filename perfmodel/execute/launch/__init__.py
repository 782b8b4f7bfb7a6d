"""Launching under torchrun: one launch, its processes, and a failure told in one line.

- `torchrun`: a module of this package launched under torchrun; a failed launch as one clear line.
- `agent`: torchrun's elastic agent, its workers forked from one process that imported torch once.
- `processes`: the processes of one launch, found by a tag in their environment, and stopped.

It may import what `execute` may: `spec` and the ground (perfmodel.layers).
"""
