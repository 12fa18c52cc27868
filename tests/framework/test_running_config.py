"""The running MindFormers config as plain data (framework/running_config.py): secret-looking keys masked
(token ids not), objects made YAML-safe, dotted lookups through dicts and config objects, and the config
found on the call stack, on the running MindFormers task trainer."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from mindformers_tbplugin.framework import running_config
from mindformers_tbplugin.framework.running_config import MASK, RunningConfig, find_running_config, get_path, plain


def test_secret_looking_keys_are_masked_and_token_ids_are_not() -> None:
    config = {
        "hf_token": "abc",
        "remote": {"password": "p", "AK": "x", "sk": "y", "secret_key": "z", "credentials": {"user": "u"}},
        "model": {"pad_token_id": 0, "tokenizer": {"type": "LlamaTokenizer"}, "num_key_value_heads": 2},
        "empty_token": "",
    }
    masked = running_config.plain(config)
    assert masked["hf_token"] == masked["remote"]["password"] == running_config.MASK
    assert {masked["remote"][k] for k in ("AK", "sk", "secret_key", "credentials")} == {running_config.MASK}
    assert masked["model"] == config["model"]
    assert masked["empty_token"] == ""


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("API-Key", True),  # hyphens read as underscores, any case
        ("access_key_id", True),  # contains a secret word
        ("db_passwd", True),
        ("hf-token", True),  # the last part
        ("tokenizer", False),
        ("pad_token_id", False),  # the last part is "id"
        ("num_key_value_heads", False),
        ("monkey", False),  # "key" inside a word is no part
    ],
)
def test_which_keys_look_secret(key: str, secret: bool) -> None:
    assert running_config.is_secret_key(key) is secret


def test_an_unset_secret_stays_unset_so_the_config_shows_it_is_missing() -> None:
    assert plain({"password": None, "hf_token": "", "api_key": False, "sk": 1234}) == {
        "password": None,
        "hf_token": "",
        "api_key": False,
        "sk": MASK,  # a number is a value: masked
    }


def test_alert_sink_urls_keep_only_their_host() -> None:
    """A bot's URL is its credential (hook id, access token): in the logged config only its host stays."""
    sinks = [
        {"feishu": "https://open.feishu.cn/open-apis/bot/v2/hook/HOOK-ID"},
        {"dingtalk": "https://oapi.dingtalk.com/robot/send?access_token=TOKEN", "secret_env": "DING"},
        {"webhook": "https://user:pw@hooks.example.com/x"},
        {"slack": "${TEAM_SLACK_URL}"},  # from the environment: nothing to mask
    ]
    assert plain({"sinks": sinks, "tensorboard_url": "http://tb.team:6006/"}) == {
        "sinks": [
            {"feishu": "https://open.feishu.cn/***"},
            {"dingtalk": "https://oapi.dingtalk.com/***", "secret_env": MASK},
            {"webhook": "https://***@hooks.example.com/***"},
            {"slack": "${TEAM_SLACK_URL}"},
        ],
        "tensorboard_url": "http://tb.team:6006/",
    }


def test_objects_become_yaml_safe_values() -> None:
    class WithDict:
        def to_dict(self) -> dict[str, Any]:
            return {"seq_length": 32, "secret": "s", "dims": (2, 3)}

    class HalfBuilt:
        def to_dict(self) -> dict[str, Any]:
            raise RuntimeError("not built yet")

        def __str__(self) -> str:
            return "<half built>"

    value = {1: (WithDict(), HalfBuilt()), "dtype": complex(1, 2), "rate": 0.5, "on": True}
    assert plain(value) == {
        "1": [{"seq_length": 32, "secret": MASK, "dims": [2, 3]}, "<half built>"],  # keys as text, tuples as lists
        "dtype": "(1+2j)",  # anything else as its text
        "rate": 0.5,
        "on": True,
    }


def test_a_dotted_path_is_looked_up_through_dicts_and_to_dict() -> None:
    class Model:
        def to_dict(self) -> dict[str, Any]:
            return {"model_config": {"seq_length": 4096, "num_layers": 0}}

    config = {"model": Model(), "runner_config": {"batch_size": 2}, "seed": 7}
    assert get_path(config, "model.model_config.seq_length") == 4096
    assert get_path(config, "model.model_config.num_layers") == 0  # a falsy value is still a value
    assert get_path(config, "runner_config.batch_size") == 2
    assert get_path(config, "runner_config.epochs") is None
    assert get_path(config, "seed.value") is None  # 7 has no parts
    assert get_path(config, "parallel.data_parallel") is None


def test_without_mindformers_imported_no_config_is_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain MindSpore training: MindFormers cannot be running it, and importing it would cost seconds.
    monkeypatch.delitem(sys.modules, "mindformers", raising=False)
    assert find_running_config() is None
    assert "mindformers" not in sys.modules


@pytest.mark.process  # imports MindFormers in this process (seconds; it logs under ./output)
def test_the_config_of_the_task_trainer_on_the_call_stack() -> None:
    from mindformers.tools.register import MindFormerConfig
    from mindformers.trainer.base_trainer import BaseTrainer

    config = MindFormerConfig(**{"model": {"model_config": {"seq_length": 32}}, "runner_config": {"epochs": 2}})
    trainer = BaseTrainer.__new__(BaseTrainer)  # a real task trainer, without building a model
    trainer.config = config

    def training_process(self: BaseTrainer) -> RunningConfig | None:
        return find_running_config()  # as a callback's train begin runs, deep under the trainer's method

    trainer.global_batch_size = 64
    assert training_process(trainer) == RunningConfig(config, 64)
    assert get_path(training_process(trainer).config, "model.model_config.seq_length") == 32
    trainer.global_batch_size = 0  # not computed yet: not a batch size
    assert training_process(trainer) == RunningConfig(config, None)
    assert find_running_config() is None  # no trainer on the stack, no MindFormers context built


@pytest.mark.parametrize(
    ("config", "skipped"),
    [
        ({}, 0),  # a fresh training
        ({"resume_training": True}, 8),  # the restored step
        ({"resume_training": True, "data_skip_steps": 12}, 12),
        ({"data_skip_steps": 12}, 12),
        ({"checkpoint": {"no_load_optim": False}}, 8),  # loading the optimizer state resumes too
        ({"checkpoint": {"no_load_optim": True}}, 0),
        ({"resume_training": True, "data_skip_steps": 12, "ignore_data_skip": True}, 0),
    ],
)
def test_the_batches_mindformers_skips_at_a_start(config: dict, skipped: int) -> None:
    """As MindFormers' classic trainer sets the dataset's initial step (base_trainer.py, 'check if skip datasets')."""
    from mindformers_tbplugin.framework.running_config import data_skip_steps

    assert data_skip_steps(config, 8) == skipped
