"""Hardware as data: accelerators, systems, network tiers, measured kernel tables (and their grid cache), grouped-GEMM slowdowns and the power model.

- `grid_cache`: Grids built from measured kernel tables (spec.hardware.kernel_tables), kept on disk between processes.
- `grouped_slowdown`: A part's measured grouped-GEMM slowdown: how much longer a device's local experts take as one grouped GEMM than
- `kernel_tables`: Measured kernel tables a hardware spec names (`Accelerator.kernel_tables`), read into regular grids.
- `network`: The network tiers of a system (NVLink domain, scale-out NICs, TPU ICI) as a hardware spec describes them:
- `power_model`: A device's power as a training step draws it, and the clock its compute sustains under the board limit.
- `system`: Hardware schema and catalogue: accelerators, network tiers, achievable efficiencies, systems.

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
