"""Accuracy evaluations: perfmodel's predictions against published and measured runs (step time, memory, serving,
energy), the plans its search ranks against the layouts experts chose, and real configs and traces through its
readers. `.ci/run` runs most of them; `published` maps the development sets' rows into perfmodel's words.
"""
