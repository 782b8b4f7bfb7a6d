"""Figures (matplotlib, headless: `canvas`) drawn from the pydantic results: a prediction's time and memory
breakdowns and pipeline schedule (`prediction`, `breakdown`, `gantt`), a search's front and heat map
(`search_results`), hardware upgrades (`upgrades`), goodput (`goodput`), measured steps (`measured_steps`), a
calibration's fit (`calibration_fit`) and predicted against measured (`validation_scatter`). It imports
`perfmodel.spec`, `perfmodel.cost` and `perfmodel.run` for what it draws; `perfmodel.validate` and the CLI draw
with it.
"""
