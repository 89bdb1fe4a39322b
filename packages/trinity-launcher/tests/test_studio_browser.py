"""Trinity Studio in a real browser: ``trinity studio`` serves the page, headless Chromium
(Debian's ``chromium`` + ``chromium-driver``, driven by selenium) opens it (no error before
anything is typed; Generate Config then shows what is missing), fills the essential fields,
generates the config and downloads it; the downloaded YAML passes the launcher's own checks.

Skips (saying why) where Chromium, its driver, selenium or Streamlit is missing;
``scripts/test.sh`` installs Debian's Chromium where it can. A screenshot of the final page goes
to ``$TRINITY_TEST_ARTIFACTS`` (default ``<repo>/test-artifacts``) as ``studio-browser.png``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]
TASKSET = REPO_ROOT / "examples" / "data" / "arithmetic"
EXP_NAME = "browser-run"
SERVER_START_TIMEOUT = 60
UI_TIMEOUT = 30
DOWNLOAD_TIMEOUT = 30
CODE = '[data-testid="stCode"]'  # st.code: the generated YAML
ERROR_BOX = '[data-testid="stAlertContentError"]'  # st.error
# Offline-safe Chromium: no network lookups, no first-run or background services.
CHROME_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,2200",
)
# The essential fields and a word that each one's error message holds.
FIELD_ERROR_WORDS = {
    "checkpoint_root_dir": "checkpoint_root_dir",
    "model_path": "model.model_path",
    "taskset_path": "taskset.path",
}


def _find_binary(path: str, name: str) -> str | None:
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return shutil.which(name)


def _require_tools() -> tuple[str, str]:
    """Chromium and its driver (Debian's paths, else PATH); skips, saying what is missing,
    where either one, selenium or Streamlit is not there."""
    chromium = _find_binary("/usr/bin/chromium", "chromium")
    chromedriver = _find_binary("/usr/bin/chromedriver", "chromedriver")
    missing = [n for n, p in (("chromium", chromium), ("chromedriver", chromedriver)) if not p]
    if missing:
        pytest.skip(
            "the Studio browser test needs Chromium and ChromeDriver (Debian: apt-get install "
            f"chromium chromium-driver); missing: {', '.join(missing)}"
        )
    if importlib.util.find_spec("selenium") is None:
        pytest.skip("selenium is not installed (the launcher's dev dependency group)")
    if importlib.util.find_spec("streamlit") is None:
        pytest.skip("Streamlit is not installed (extra 'studio')")
    return chromium, chromedriver


def _artifacts_dir() -> Path:
    path = Path(os.environ.get("TRINITY_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _wait_healthy(process: subprocess.Popen, port: int, log_path: Path) -> None:
    url = f"http://127.0.0.1:{port}/_stcore/health"
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    state = (
        f"exited with status {process.returncode}"
        if process.poll() is not None
        else f"not healthy after {SERVER_START_TIMEOUT} s"
    )
    pytest.fail(f"trinity studio {state}; its output:\n{log_path.read_text(errors='replace')}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def studio_url(tmp_path):
    """``trinity studio`` on a free port, run from a temporary directory; stopped at the end."""
    if importlib.util.find_spec("streamlit") is None:
        pytest.skip("Streamlit is not installed (extra 'studio')")
    port = free_port()
    workdir = tmp_path / "studio-cwd"
    workdir.mkdir()
    log_path = tmp_path / "studio.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "trinity.launcher.cli", "studio", "--port", str(port)],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killed as a whole
        )
    try:
        _wait_healthy(process, port, log_path)
        yield f"http://127.0.0.1:{port}/"
    finally:
        _stop(process)


@pytest.fixture
def download_dir(tmp_path):
    path = tmp_path / "downloads"
    path.mkdir()
    return path


@pytest.fixture
def browser(tmp_path, download_dir):
    """Headless Chromium that saves downloads into ``download_dir`` without asking."""
    chromium, chromedriver = _require_tools()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium  # an explicit browser and driver: selenium-manager idles
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(download_dir),
            "download.prompt_for_download": False,
            "download.directory_upgrade": True,
            "safebrowsing.enabled": False,
        },
    )
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        # Either the prefs above or this CDP command is enough for Chromium 150 in headless mode
        # (without both, it saves into ~/Downloads); both are kept, as versions differ.
        driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior",
            {"behavior": "allow", "downloadPath": str(download_dir), "eventsEnabled": False},
        )
        yield driver
    finally:
        driver.quit()


# ---------------------------------------------------------------------------------- page helpers
def _by_key(driver, key: str, inner: str = ""):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f".st-key-{key} {inner}".strip())


def _script_idle(driver) -> bool:
    """The app is connected and its script has run and is not running (Streamlit's own test
    attributes on the app element)."""
    state = driver.execute_script(
        "const app = document.querySelector('[data-testid=\"stApp\"]');"
        "return app && [app.getAttribute('data-test-script-state'),"
        " app.getAttribute('data-test-connection-state')];"
    )
    return bool(state) and state[0] == "notRunning" and state[1] == "CONNECTED"


def _error_texts(driver) -> list[str]:
    """The texts of the error boxes on the page (stale ones of a running rerun excluded)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-testid=\"stAlertContentError\"]'))"
        ".filter(e => !e.closest('[data-stale=\"true\"]')).map(e => e.innerText);"
    )


def _no_error_about(word: str):
    """A wait condition: the page has rerun and no error box mentions ``word``."""
    return lambda d: _script_idle(d) and not any(word in t for t in _error_texts(d))


def _wait(driver, timeout: float = UI_TIMEOUT):
    """A WebDriverWait that rides out elements Streamlit has not drawn yet or redraws."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver,
        timeout,
        poll_frequency=0.1,
        ignored_exceptions=(
            NoSuchElementException,
            StaleElementReferenceException,
            ElementNotInteractableException,
            ElementClickInterceptedException,
        ),
    )


def _generate_button(driver):
    """The Generate Config button (drawn a moment after the script run that placed it)."""
    return _by_key(driver, "_generate_config", "button")


def _click(driver, key: str) -> None:
    """Click the button of ``key``, again if Streamlit redrew it under the pointer."""

    def click(d) -> bool:
        _by_key(d, key, "button").click()
        return True

    _wait(driver).until(click, message=f"cannot click the button {key}")


def _set_text(driver, key: str, value: str, committed=_script_idle) -> None:
    """Type ``value`` into the text input of ``key``, commit it with Enter and wait until
    ``committed`` (a wait condition that shows the server has seen it) holds."""
    from selenium.webdriver.common.keys import Keys

    def typed(d) -> bool:  # retyped whole if the input was redrawn while typing
        field = _by_key(d, key, "input")
        if not (field.is_displayed() and field.is_enabled()):
            return False
        if field.get_attribute("value") != value:
            field.click()
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(Keys.BACKSPACE)
            field.send_keys(value)
        return field.get_attribute("value") == value

    _wait(driver).until(typed, message=f"cannot type {value!r} into the field {key}")
    _by_key(driver, key, "input").send_keys(Keys.ENTER)
    _wait(driver).until(
        lambda d: committed(d) and _by_key(d, key, "input").get_attribute("value") == value,
        message=f"the page did not take {value!r} in the field {key}",
    )


_PAGE_HEIGHT = """
const main = document.querySelector('[data-testid="stMain"]');
const side = document.querySelector('[data-testid="stSidebarContent"]');
return Math.max(document.documentElement.scrollHeight, main ? main.scrollHeight : 0,
                side ? side.scrollHeight : 0);
"""


def _save_screenshot(driver, path: Path) -> None:
    """The whole page: Streamlit scrolls inside its main area, so the viewport grows to that
    area's height (a device-metrics override) for the shot."""
    try:
        height = 0
        for _ in range(3):  # the layout follows the viewport: grow until everything fits
            wanted = min(int(driver.execute_script(_PAGE_HEIGHT) or 0), 16000)
            if wanted <= height:
                break
            height = wanted
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1400, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
            time.sleep(0.5)
        driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# ----------------------------------------------------------------------------------------- test
@pytest.mark.slow
def test_studio_generates_and_downloads_a_valid_config(browser, download_dir, studio_url, tmp_path):
    # browser first: where Chromium is missing, the test skips before starting the server
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By

    from trinity.launcher.validation import validate_config

    driver = browser
    checkpoint_root = tmp_path / "checkpoints"
    model_path = tmp_path / "model"
    model_path.mkdir()
    (model_path / "config.json").write_text("{}")  # a stand-in model directory: nothing loads it
    typed = {
        "checkpoint_root_dir": str(checkpoint_root),
        "model_path": str(model_path),
        "taskset_path": str(TASKSET),
    }
    artifacts = _artifacts_dir()
    (artifacts / "studio-browser-failure.png").unlink(missing_ok=True)  # from an earlier run
    wait = _wait(driver)
    try:
        driver.get(studio_url)
        # a fresh page: the essential fields are empty, yet nothing is red before any edit
        button = wait.until(
            lambda d: _script_idle(d) and _generate_button(d),
            message="no Generate Config button on the page",
        )
        assert _error_texts(driver) == [], "a fresh page shows errors before anything is typed"
        assert button.is_enabled(), "Generate Config is disabled on a fresh page"
        # asking for the config shows what is missing, under the fields, and blocks the button
        _click(driver, "_generate_config")
        shown = wait.until(
            lambda d: (
                _script_idle(d)
                and [
                    e
                    for e in d.find_elements(By.CSS_SELECTOR, ERROR_BOX)
                    if e.is_displayed() and "a model path is required" in e.text
                ]
            ),
            message="Generate Config on the empty page shows no 'a model path is required' error",
        )
        assert shown
        button = wait.until(_generate_button, message="no Generate Config button on the page")
        assert not button.is_enabled(), "Generate Config is enabled while the page shows errors"

        # exp_name shows on the page only in the YAML: checked there
        _set_text(driver, "exp_name", EXP_NAME)
        for key, value in typed.items():
            _set_text(driver, key, value, committed=_no_error_about(FIELD_ERROR_WORDS[key]))

        def ready(d) -> bool:
            stuck = [t for t in _error_texts(d) if any(w in t for w in FIELD_ERROR_WORDS.values())]
            return _script_idle(d) and not stuck and _generate_button(d).is_enabled()

        try:
            wait.until(ready)
        except TimeoutException as exc:
            raise AssertionError(
                f"the Generate button stays disabled; errors: {_error_texts(driver)}"
            ) from exc
        _click(driver, "_generate_config")

        wait.until(  # the YAML (st.code) is drawn a moment after the run that placed it
            lambda d: (
                _script_idle(d)
                and f"name: {EXP_NAME}" in d.find_element(By.CSS_SELECTOR, CODE).text
                and _by_key(d, "_download_config", "button").is_displayed()
            ),
            message=f"no generated YAML with 'name: {EXP_NAME}' and Download button",
        )
        _click(driver, "_download_config")

        target = download_dir / f"{EXP_NAME}.yaml"

        def downloaded(_d) -> bool:  # Chromium renames NAME.crdownload when it is complete
            partial = list(download_dir.glob("*.crdownload"))
            return target.is_file() and target.stat().st_size > 0 and not partial

        try:
            _wait(driver, DOWNLOAD_TIMEOUT).until(downloaded)
        except TimeoutException as exc:
            held = sorted(p.name for p in download_dir.iterdir())
            raise AssertionError(
                f"{target.name} was not downloaded in {DOWNLOAD_TIMEOUT} s; "
                f"the download directory holds {held}"
            ) from exc
        wait.until(_script_idle, message="the page did not settle after the download")
        _save_screenshot(driver, artifacts / "studio-browser.png")
    except BaseException:
        try:
            _save_screenshot(driver, artifacts / "studio-browser-failure.png")
        except WebDriverException:
            pass
        raise

    config, _warnings = validate_config(str(target))
    assert config.name == EXP_NAME
    assert config.model.model_path == typed["model_path"]
    assert config.buffer.explorer_input.taskset.path == typed["taskset_path"]
    assert config.checkpoint_root_dir == os.path.abspath(typed["checkpoint_root_dir"])
