"""What run_mindformer.py does for training, importing nothing but mindformers.

argv: CONFIG [--import-plugin]
"""

import sys

if "--import-plugin" in sys.argv:
    import mindformers_tbplugin  # noqa: F401  (the explicit route)

from mindformers.core.context import build_context
from mindformers.tools.register import MindFormerConfig
from mindformers.trainer import Trainer

try:
    from mindformers.utils.file_utils import set_output_path  # 1.8.0 and later
except ModuleNotFoundError:  # 1.7.0 (mindformers/tools/utils.py), imported as r1.7.0's run_mindformer.py does
    from mindformers.tools import set_output_path

config = MindFormerConfig(sys.argv[1])
set_output_path(config.output_dir)
build_context(config)
Trainer(config).train()
