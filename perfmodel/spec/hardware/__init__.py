"""Hardware as data: systems, accelerators, network tiers and the measured tables behind them (docs/hardware.md).

- `system`: the schema and catalogue: accelerators, efficiencies, systems (`System`, `load_hardware`).
- `network`: network tiers: NVLink domain, scale-out NICs, TPU ICI; bandwidth, latency and measured fits.
- `kernel_tables`: measured kernel tables read into regular grids; `grid_cache`: those grids kept on disk.
- `grouped_slowdown`: a part's measured grouped-GEMM slowdown.
- `power_model`: a device's power during a step, and the clock it sustains under the board limit.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
