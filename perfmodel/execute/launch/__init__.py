"""Launching under torchrun: the launch and its failures, the elastic agent that forks ranks from one torch import, and the processes of a launch.

- `agent`: torchrun's elastic agent with its workers forked from one process that has imported torch once.
- `processes`: The processes of one launch, found by a tag in their environment, and stopping every one of them.
- `torchrun`: Launching a module of this package under `torchrun`, and turning a failed launch into one clear line.

It imports only `perfmodel.spec` and the rest of `perfmodel.execute`.
"""
