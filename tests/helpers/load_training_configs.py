"""Load configs with MindFormers' own config classes, importing nothing but mindformers, and print the
callbacks each one ends up with, as one JSON line: ``CALLBACKS {"<config>": [entry, ...], ...}``.

argv: classic|pynative CONFIG [CONFIG ...]
classic: ``MindFormerConfig(path)`` (run_mindformer.py, mftb train); pynative: MindFormers 2.x's PyNative
trainer's ``TrainConfig.load_from_yaml(path)`` (its ``Trainer(config=path)``), whose callbacks are
``CallbackConfig`` objects.
"""

import json
import sys

kind, paths = sys.argv[1], sys.argv[2:]
loaded = {}
if kind == "classic":
    from mindformers.tools.register import MindFormerConfig

    for path in paths:
        config = MindFormerConfig(path)
        loaded[path] = {"callbacks": [dict(entry) for entry in config.get("callbacks") or []]}
        loaded[path]["keys"] = sorted(config)
else:
    from mindformers.pynative.config import TrainConfig

    for path in paths:
        config = TrainConfig.load_from_yaml(path)
        loaded[path] = {"callbacks": [entry.to_dict() for entry in config.callbacks]}
        loaded[path]["keys"] = sorted(config.to_dict())
print("CALLBACKS " + json.dumps(loaded), flush=True)
