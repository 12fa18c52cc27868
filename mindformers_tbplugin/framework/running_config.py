"""The MindFormers configuration of the running training, as plain data with secrets masked.

MindFormers hands a third-party callback neither its config nor its trainer (only its own monitors
get injected arguments). During ``Model.train`` the task trainer (``BaseTrainer.training_process``)
is on the call stack, and its ``config`` is the resolved config the training runs with (the YAML
after overrides, with the global batch size, parallel layout and steps filled in). We look it up
there, at train begin, and fall back to the config given to MindFormers' ``build_context``. A plain
MindSpore training has neither: callers then use what the callback parameters tell.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mindformers_tbplugin.log import mask_url

MASK = "******"
# Values of keys that look secret never reach a log: the key contains one of these words anywhere...
_SECRET_WORDS = ("password", "passwd", "secret", "credential", "private_key", "api_key", "access_key")
# ...or its last ``_``/``-``-separated part is one of these (``hf_token``, ``ak``; not ``pad_token_id``).
_SECRET_LAST_PARTS = {"token", "pwd", "key", "ak", "sk", "auth"}
# Alert sinks whose URL is itself the credential (a bot's hook id, an access token): host only.
_URL_SECRET_KEYS = {"webhook", "feishu", "dingtalk", "wecom", "slack"}


@dataclass(frozen=True)
class RunningConfig:
    config: Mapping[str, Any]  # the MindFormerConfig (a dict subclass)
    global_batch_size: int | None  # as the trainer computed it


def find_running_config(max_frames: int = 64) -> RunningConfig | None:
    """The config of the MindFormers task trainer that is running this training, if any."""
    if "mindformers" not in sys.modules:  # MindFormers cannot be running it; do not pay for its import
        return None
    from mindformers_tbplugin.framework.mindformers_api import resolve

    try:
        BaseTrainer = resolve("BaseTrainer")
    except Exception:  # no MindFormers: a plain MindSpore training
        return None
    frame = sys._getframe(1)
    for _ in range(max_frames):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if isinstance(owner, BaseTrainer) and isinstance(getattr(owner, "config", None), Mapping):
            batch = getattr(owner, "global_batch_size", None)
            return RunningConfig(owner.config, int(batch) if isinstance(batch, int) and batch > 0 else None)
        frame = frame.f_back
    return _context_config()


def _context_config() -> RunningConfig | None:
    from mindformers_tbplugin.framework.mindformers_api import resolve

    try:
        Context = resolve("Context")
        if Context.is_exists() and Context().config:
            return RunningConfig(Context().config, None)
    except Exception:  # an older or newer MindFormers without this singleton
        return None
    return None


def is_secret_key(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    return any(word in lowered for word in _SECRET_WORDS) or lowered.rsplit("_", 1)[-1] in _SECRET_LAST_PARTS


def plain(value: Any, key: str = "") -> Any:
    """A YAML-safe copy of ``value``: dicts, lists, scalars; secret-looking keys masked; objects as text."""
    if key and is_secret_key(key) and value not in (None, "", False):
        return MASK
    if key in _URL_SECRET_KEYS and isinstance(value, str) and "://" in value:
        return mask_url(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        try:
            return plain(value.to_dict())
        except Exception:  # to_dict of a half-built object
            return str(value)
    return str(value)


def get_path(config: Mapping[str, Any], dotted: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; None when any part is missing."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) and hasattr(node, "to_dict"):
            node = node.to_dict()
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
        if node is None:
            return None
    return node


def data_skip_steps(config: Mapping[str, Any] | None, initial_step: int) -> int:
    """The batches MindFormers' classic trainer skips at the start of the data (``base_trainer``: on a resume,
    or with ``data_skip_steps``, it sets the dataset's initial step to ``data_skip_steps``, else to the
    restored step; nothing with ``ignore_data_skip``)."""
    if not config or config.get("ignore_data_skip"):
        return 0
    resuming = config.get("resume_training") or get_path(config, "checkpoint.no_load_optim") is False
    if not (config.get("data_skip_steps") or resuming):
        return 0
    return int(config.get("data_skip_steps") or initial_step)
