"""``python -m mindformers_tbplugin`` is ``mftb``."""

import sys

from mindformers_tbplugin.cli import main

sys.exit(main())
