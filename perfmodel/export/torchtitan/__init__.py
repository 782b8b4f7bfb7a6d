"""torchtitan exports: the config of a release (TOML or Python), its model families and the nearest plan it runs.

- `config`: torchtitan: the plan as the configuration a named torchtitan release reads, then the plan settings it cannot
- `model`: torchtitan's model families for a plan's model: llama3 for a dense model, deepseek_v3 (latent attention) or qwen3
- `nearest`: The nearest plan torchtitan can run: plan settings a torchtitan version has no way to express, changed to what
- `python`: torchtitan 0.3.0's Python config: a module whose function `perfmodel_plan` returns torchtitan/trainer.py
- `toml`: torchtitan 0.2.2's TOML job config (torchtitan/config/job_config.py JobConfig, read by torchtitan/config/

It imports only `perfmodel.spec` and the rest of `perfmodel.export`.
"""
