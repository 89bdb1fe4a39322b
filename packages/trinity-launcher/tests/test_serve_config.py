"""Mode serve's config: what it reads (``explorer.proxy_port``, ``listen_address``,
``service_status_check_interval``, ``explorer.serve.*``) and what it refuses before anything
starts (engines without an OpenAI server, a buffer a trainer cannot read as it grows, an API
key variable that is not set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trinity.common.config import ConfigError
from trinity.launcher.serve.run import serve_settings
from trinity.launcher.validation import validate_config

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "serve_arithmetic.yaml")


@pytest.fixture
def env(monkeypatch, tmp_path, model_path):
    monkeypatch.setenv("TRINITY_QUICKSTART_MODEL", model_path)
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    monkeypatch.setenv("TRINITY_SERVE_BUFFER", f"sqlite:///{tmp_path}/served.db")
    return tmp_path


def test_serve_settings_come_from_the_config(env, monkeypatch):
    monkeypatch.setenv("MY_SERVE_KEY", "s3cret")
    config, _ = validate_config(
        EXAMPLE,
        overrides=[
            "explorer.serve.api_key_env=MY_SERVE_KEY",
            "explorer.serve.max_request_bytes=4096",
            "explorer.serve.max_concurrent_requests=7",
            "explorer.proxy_port=9123",
        ],
    )
    assert config.mode == "serve" and config.explorer.proxy_port == 9123
    assert config.explorer.rollout_model.enable_openai_api  # derived: the proxy forwards to it
    settings = serve_settings(config)
    assert settings["api_key"] == "s3cret"
    assert settings["max_request_bytes"] == 4096 and settings["max_concurrent_requests"] == 7
    assert settings["temperature"] == 1.0


def test_the_service_listens_on_loopback_unless_told_otherwise(env):
    text = Path(EXAMPLE).read_text()
    assert "  listen_address: 127.0.0.1" in text
    unset = env / "serve.yaml"
    unset.write_text(text.replace("  listen_address: 127.0.0.1", ""))
    config, _ = validate_config(str(unset))
    assert config.explorer.listen_address == "127.0.0.1"  # Trinity-RFT's default: 0.0.0.0


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        (
            "explorer.rollout_model.engine_type=transformers",
            "explorer.rollout_model.engine_type",
            "not supported yet in mode 'serve'",
        ),
        (
            "buffer.trainer_input.experience_buffer.storage_type=file",
            "buffer.trainer_input.experience_buffer.storage_type",
            "allowed: 'sql'",
        ),
        ("explorer.min_running_model_num=2", "explorer.min_running_model_num", "not supported yet"),
        ("explorer.db_url=sqlite:///h.db", "explorer.db_url", "not supported yet"),
    ],
)
def test_what_mode_serve_cannot_do_is_refused(env, override, field, message):
    with pytest.raises(ConfigError) as err:
        validate_config(EXAMPLE, overrides=[override])
    text = str(err.value)
    assert field in text and message in text, text


def test_an_unset_api_key_variable_is_bad_input(env, model_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity.launcher.cli",
            "run",
            "--config",
            EXAMPLE,
            "explorer.serve.api_key_env=TRINITY_NO_SUCH_KEY_VAR",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "TRINITY_NO_SUCH_KEY_VAR" in done.stderr and "is not set" in done.stderr
