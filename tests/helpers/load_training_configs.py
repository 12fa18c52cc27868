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
    import copy

    import yaml
    from mindformers.pynative.config import TrainConfig

    for path in paths:
        config = TrainConfig.load_from_yaml(path)
        loaded[path] = {"callbacks": [entry.to_dict() for entry in config.callbacks]}
        loaded[path]["keys"] = sorted(config.to_dict())
        # Trainer(config=dict): the caller's dict is completed as a copy, its own left as it was
        with open(path, encoding="utf-8") as file:
            data = yaml.safe_load(file)
        given = copy.deepcopy(data)
        from_dict = TrainConfig.from_dict(data)
        loaded[path]["same_from_dict"] = [entry.to_dict() for entry in from_dict.callbacks] == loaded[path]["callbacks"]
        loaded[path]["dict_unchanged"] = data == given
print("CALLBACKS " + json.dumps(loaded), flush=True)
