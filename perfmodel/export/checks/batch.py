"""`python -m perfmodel.export.checks.batch TARGET VERSION`: a JSON list of exported texts on stdin, each run
through `<TARGET>_check.check(text, VERSION)`; prints the JSON list of results (perfmodel.export.checks.
run_checks starts it with the framework release first on PYTHONPATH)."""

import importlib
import json
import os
import sys

if __name__ == "__main__":
    target, version = sys.argv[1], sys.argv[2]
    check = importlib.import_module(f"perfmodel.export.checks.{target}_check").check
    print(json.dumps([check(text, version) for text in json.loads(sys.stdin.read())]), flush=True)
    # The results are out: skip the interpreter's teardown, where a framework's leftover native threads (DeepSpeed's
    # gloo process group) can call std::terminate ("terminate called without an active exception") and turn an
    # answered check into a failed one.
    os._exit(0)
