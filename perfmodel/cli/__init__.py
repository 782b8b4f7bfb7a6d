"""The command line: `main` (the `perfmodel` entry point) parses and dispatches to one module per command
(`<command>_command`), which calls the Python API and formats the answer (`report`: the text tables); shared
flags and their types are `plan_flags` and `argtypes`; `docgen` writes the schema tables of docs/. No modelling
here: it may import every other stage, and none imports it but the planner page (perfmodel.app), whose own
command module `main` names by its full path.
"""
