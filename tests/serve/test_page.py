"""The chat page (GET /) in a real headless Chromium, driven by Selenium, against the tiny pair's
server in this process: two turns typed in the page come back as the target's own greedy answers
to the same conversation, every streamed piece names its source, the figures show; behind an API
key the page asks for it (again when refused) and then works.

Needs /usr/bin/chromium, /usr/bin/chromedriver (Debian's chromium, chromium-driver) and the
`selenium` package; skipped without them."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from .conftest import KEY, serving

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs the selenium package")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from .test_server import FP32, own_greedy  # noqa: E402

pytestmark = pytest.mark.browser

N = 32  # max tokens, typed into the page's box
WAIT_S = 60


def chromium(user_data_dir) -> webdriver.Chrome:
    """Headless Chromium through Debian's chromedriver: nothing downloaded, nothing phoned home."""
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager stays offline
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1200,900", f"--user-data-dir={user_data_dir}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    driver = chromium(profile)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(models):
    """The target's own model, for its greedy answers."""
    from omnidraft.decode.target import LocalTarget
    from omnidraft.models.loading import load_model

    return LocalTarget(load_model(models[1], dtype="fp32"))


def session_of(models):
    from omnidraft.session import Session

    drafter, target = models
    return lambda: Session(drafter, target, runtime=FP32, slots=2)


def until(driver, script: str, *args):
    """Wait until ``script`` (a JS expression's body) returns something truthy; return it."""
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05).until(lambda d: d.execute_script(script, *args))


def answered(driver, n: int) -> None:
    until(driver, "return !document.body.dataset.busy && "
                  "document.querySelectorAll('.msg.assistant').length === arguments[0]", n)


def answers(driver) -> list[dict]:
    """Each assistant message: its pieces' text and classes, its content's text, its error."""
    return driver.execute_script("""
        return [...document.querySelectorAll('.msg.assistant')].map(m => ({
            pieces: [...m.querySelectorAll('.content > span')].map(p => [p.className, p.textContent]),
            content: m.querySelector('.content').textContent,
            error: m.querySelector('.error')?.textContent ?? null}));""")


def set_max_tokens(driver, n: int) -> None:
    box = driver.find_element(By.ID, "max-tokens")
    box.clear()
    box.send_keys(str(n))


def test_two_turns_in_the_page_are_the_targets_own_greedy_answers(models, home, browser, reference, qwen_tok):
    with serving(session_of(models), key=None) as (url, _runner):
        browser.get(url + "/")
        until(browser, "return document.getElementById('model').textContent === 'tiny'")
        until(browser, "return document.getElementById('slots').textContent === '2'")
        set_max_tokens(browser, N)
        prompt = browser.find_element(By.ID, "prompt")
        # turn 1, two lines (Shift+Enter), sent with Enter
        prompt.send_keys("Add a docstring to this function:", Keys.SHIFT, Keys.ENTER, Keys.NULL, "def add(a, b):")
        first = "Add a docstring to this function:\ndef add(a, b):"
        assert prompt.get_property("value") == first  # Shift+Enter is a newline, not a send
        prompt.send_keys(Keys.ENTER)
        answered(browser, 1)
        # turn 2, a follow-up, sent with the button
        prompt.send_keys("Now rename b to c.")
        browser.find_element(By.ID, "send").click()
        answered(browser, 2)

        got = answers(browser)
        turn1 = [{"role": "user", "content": first}]
        ref1 = own_greedy(reference, qwen_tok, turn1, n=N)
        turn2 = turn1 + [{"role": "assistant", "content": ref1}, {"role": "user", "content": "Now rename b to c."}]
        ref2 = own_greedy(reference, qwen_tok, turn2, n=N)
        assert [a["error"] for a in got] == [None, None]
        assert ["".join(text for _cls, text in a["pieces"]) for a in got] == [ref1, ref2]
        assert [a["content"] for a in got] == [ref1, ref2]  # nothing but the pieces
        classes = {cls for a in got for cls, _text in a["pieces"]}
        assert classes and classes <= {"piece drafted", "piece copied", "piece remembered", "piece target"}
        stats = browser.find_element(By.ID, "stats")
        assert "tokens / target forward" in stats.text
        tpf = stats.find_element(By.CSS_SELECTOR, "[data-k=tpf]").text
        assert re.fullmatch(r"\d+\.\d\d", tpf) and float(tpf) >= 1, tpf
        assert stats.find_element(By.CSS_SELECTOR, "[data-k=completion-tokens]").text == str(N)
        cached, prompt_tokens = stats.find_element(By.CSS_SELECTOR, "[data-k=cached]").text.split(" of ")
        assert 0 < int(cached) < int(prompt_tokens)  # the follow-up read its first turn from the slot's cache
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

        browser.find_element(By.ID, "new").click()  # a new conversation: the list is empty again
        assert browser.execute_script("return document.querySelectorAll('#messages .msg').length") == 0


def test_behind_a_key_the_page_asks_for_it_and_then_works(models, home, browser, reference, qwen_tok):
    with serving(session_of(models), key=KEY) as (url, _runner):
        browser.get(url + "/")
        key = browser.find_element(By.ID, "key")
        WebDriverWait(browser, WAIT_S).until(lambda _d: key.is_displayed())  # GET /v1/models answered 401
        key.send_keys("not-the-key-at-all", Keys.ENTER)
        until(browser, "return !document.getElementById('keybar').hidden && "
                       "document.getElementById('key-why').textContent.includes('refused')")
        key.clear()
        key.send_keys(KEY, Keys.ENTER)
        until(browser, "return document.getElementById('model').textContent === 'tiny'")
        assert not key.is_displayed()
        assert browser.execute_script("return sessionStorage.getItem('omnidraft-api-key')") == KEY
        set_max_tokens(browser, N)
        prompt = browser.find_element(By.ID, "prompt")
        prompt.send_keys("def fib(n):", Keys.ENTER)
        answered(browser, 1)
        (got,) = answers(browser)
        assert got["error"] is None
        assert got["content"] == own_greedy(reference, qwen_tok, [{"role": "user", "content": "def fib(n):"}], n=N)
