"""Importing this module registers every class of ours in MindFormers' registry."""

from mindformers_tbplugin import callbacks, cpu_wrapper  # noqa: F401  (decorators register)
from mindformers_tbplugin.log import route_to_mindformers

route_to_mindformers()
