"""``trainer.trainer_config`` (compat D11): a dict of exactly the keys the config names --
dumps, YAML, ``in`` and equality see only those -- whose attributes, after
``check_and_update``, read the view the trainer's package derives (``TRAINER_VIEWS``).

The trainer's package is replaced here by a fake view function in a fresh registry, so these
tests need no sibling package; the launcher's real view is tested in trinity-launcher
(``test_verl_view.py``)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity.common import config as config_module
from trinity.common.config import (
    Config,
    TrainerConfig,
    TrainerConfigDict,
    TrainerViewError,
    _trainer_view,
    load_config,
    save_config,
)
from trinity.utils.registry import Registry

DATA_DIR = str(Path(__file__).resolve().parent)
MODEL_DIR = str(Path(__file__).resolve().parent / "data" / "model")
USER = {"critic": {"optim": {"lr": 1e-5}, "cliprange_value": 0.2}, "trainer": {"nnodes": 1}}


def runnable(tmp_path: Path, trainer_config: Any = USER) -> dict[str, Any]:
    return {
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": DATA_DIR}}},
        "trainer": {"trainer_config": copy.deepcopy(trainer_config)},
    }


def fake_view(config: Any) -> dict[str, Any]:
    """What a trainer package would derive: a value of the config, one overriding a user key."""
    fake_view.calls += 1  # type: ignore[attr-defined]
    return {
        "actor_rollout_ref": {"actor": {"optim": {"lr": config.algorithm.optimizer.lr}}},
        "critic": {"cliprange_value": 0.5},  # the trainer's value wins over the user's
        "trainer": {"experiment_name": config.name},
    }


@pytest.fixture(autouse=True)
def _cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """A registry without installed entry points, holding only what a test registers."""
    registry: Registry = Registry("trainer_views", entry_point_group="trinity.test_no_such_group")
    monkeypatch.setattr(_trainer_view, "TRAINER_VIEWS", registry)
    fake_view.calls = 0  # type: ignore[attr-defined]
    return registry


@pytest.fixture
def checked(tmp_path: Path, views: Registry) -> Config:
    views.register_module("verl", fake_view)
    return load_config(runnable(tmp_path)).check_and_update()


# ------------------------------------------------------------------ a dict of the user's keys


def test_the_field_is_a_dict_of_exactly_the_users_keys(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path))
    tc = config.trainer.trainer_config
    assert isinstance(tc, TrainerConfigDict) and isinstance(tc, dict)
    assert tc == USER and dict(tc) == USER and list(tc) == ["critic", "trainer"]
    assert "critic" in tc and "actor_rollout_ref" not in tc
    assert tc["critic"]["optim"]["lr"] == 1e-5
    assert isinstance(TrainerConfig().trainer_config, TrainerConfigDict)

    dumped = config.model_dump()["trainer"]["trainer_config"]
    assert type(dumped) is dict and dumped == USER
    assert type(config.to_dict()["trainer"]["trainer_config"]) is dict
    assert yaml.safe_load(yaml.safe_dump(config.to_dict()))["trainer"]["trainer_config"] == USER


def test_check_and_update_keeps_the_keys_and_round_trips(tmp_path: Path, checked: Config) -> None:
    assert checked.trainer.trainer_config == USER
    assert checked.to_dict()["trainer"]["trainer_config"] == USER
    assert "trainer_config" in checked._current_intent()["trainer"]
    path = tmp_path / "saved.yaml"
    save_config(checked, path)
    again = load_config(path)
    assert again == checked and again.trainer.trainer_config == USER
    assert fake_view.calls == 0  # nothing was derived: nobody read an attribute


def test_assignment_and_null_keep_the_type(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path))
    config.trainer.trainer_config = {"trainer": {"n_gpus_per_node": 2}}
    assert isinstance(config.trainer.trainer_config, TrainerConfigDict)
    assert "trainer_config" in config.trainer.model_fields_set
    with pytest.raises(TrainerViewError, match="check_and_update"):
        config.trainer.trainer_config.trainer  # noqa: B018 - assigned, not checked again yet
    assert load_config(runnable(tmp_path, None)).trainer.trainer_config is None


# ------------------------------------------------------------------ the derived view


def test_attributes_read_the_view_over_the_users_keys(checked: Config) -> None:
    tc = checked.trainer.trainer_config
    assert tc.actor_rollout_ref.actor.optim.lr == checked.algorithm.optimizer.lr
    assert tc.trainer.experiment_name == checked.name
    assert tc.trainer.nnodes == 1  # a key only the user wrote reads back as written
    assert tc.critic.optim.lr == 1e-5
    assert tc.critic.cliprange_value == 0.5  # derived wins: what the trainer uses
    assert tc["critic"]["cliprange_value"] == 0.2  # items stay the user's
    assert dict(tc.critic.optim) == {"lr": 1e-5}
    assert hasattr(tc, "critic") and not hasattr(tc, "no_such_section")
    with pytest.raises(AttributeError, match=r"critic\.nope.*has: cliprange_value, optim"):
        tc.critic.nope  # noqa: B018
    assert fake_view.calls == 1
    tc.trainer.nnodes  # noqa: B018 - computed once, then kept
    assert fake_view.calls == 1


def test_the_view_is_read_only(checked: Config) -> None:
    tc = checked.trainer.trainer_config
    with pytest.raises(AttributeError, match="read-only"):
        tc.critic = {}
    with pytest.raises(AttributeError, match="read-only"):
        tc.critic.optim.lr = 1.0
    tc["critic"] = {"optim": {"lr": 2e-5}}  # items are the config's, as any dict's
    assert checked.trainer.trainer_config["critic"] == {"optim": {"lr": 2e-5}}


def test_the_view_is_a_snapshot_of_the_checked_config(checked: Config) -> None:
    lr = checked.algorithm.optimizer.lr
    checked.algorithm.optimizer.lr = 0.5
    assert checked.trainer.trainer_config.actor_rollout_ref.actor.optim.lr == lr
    checked.check_and_update()
    assert checked.trainer.trainer_config.actor_rollout_ref.actor.optim.lr == 0.5
    source = checked.trainer.trainer_config._source
    assert source is not None and source.trainer.trainer_config._source is None  # no chain


def test_copies_and_pickles_keep_the_view(checked: Config) -> None:
    for other in (
        copy.deepcopy(checked),
        checked.model_copy(deep=True),
        pickle.loads(pickle.dumps(checked)),
    ):
        tc = other.trainer.trainer_config
        assert isinstance(tc, TrainerConfigDict) and tc == USER
        assert tc.trainer.experiment_name == checked.name
    assert pickle.loads(pickle.dumps(checked.trainer.trainer_config)).critic.cliprange_value == 0.5


# ------------------------------------------------------------------ when there is no view


def test_before_check_and_update_attributes_say_to_call_it(tmp_path: Path, views) -> None:
    views.register_module("verl", fake_view)
    tc = load_config(runnable(tmp_path)).trainer.trainer_config
    with pytest.raises(TrainerViewError, match=r"Config\.check_and_update\(\)"):
        tc.critic  # noqa: B018
    assert not hasattr(tc, "critic") and tc["critic"]["cliprange_value"] == 0.2
    assert fake_view.calls == 0


def test_without_the_trainer_package_attributes_name_it(tmp_path: Path, views) -> None:
    config = load_config(runnable(tmp_path)).check_and_update()
    with pytest.raises(TrainerViewError, match="pip install trinity-launcher") as info:
        config.trainer.trainer_config.actor_rollout_ref  # noqa: B018
    assert "trainer_type 'verl'" in str(info.value)
    assert isinstance(info.value, AttributeError)
    assert config.trainer.trainer_config["trainer"] == {"nnodes": 1}


def test_a_config_the_trainer_refuses_has_no_view(tmp_path: Path, views) -> None:
    def refuses(config: Any) -> dict[str, Any]:
        raise ValueError("VerlEngineSettings.lr=0 is invalid")

    views.register_module("verl", refuses)
    config = load_config(runnable(tmp_path)).check_and_update()
    with pytest.raises(ValueError, match=r"trainer refuses this config.*lr=0 is invalid"):
        config.trainer.trainer_config.critic  # noqa: B018
