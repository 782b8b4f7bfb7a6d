"""The whole training run of one plan: how many steps and days, device-hours and dollars (`forecast`), energy
and emissions (`energy`), interruptions, checkpoints and goodput (`reliability`). It imports `perfmodel.cost`
(one step's estimate) and `perfmodel.spec`; `perfmodel.search` reads it to rank layouts by whole-run objectives.
"""
