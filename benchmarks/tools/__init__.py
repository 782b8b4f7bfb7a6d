"""Generators of the data the package ships: each derives hardware_specs/ entries or package data (Megatron-Bridge
bases, host catalogue, stacks' host blocks and bands, power and serving constants) from the sources it cites, and
prints or rewrites them. The tests check that the shipped files hold what these derive.
"""
