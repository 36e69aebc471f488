"""The web demo in a real headless Chromium (Selenium + Debian's chromedriver) against a real `fathom serve`
process: run a niah episode with the expert and watch it complete, browse the fixture traces, and check
that adversarial text in model output, REPL output and a pasted document is shown as text, never run.

Skipped only when /usr/bin/chromium is missing (`make test` installs it: APT_PACKAGES in the Makefile).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait
from server_support import server_process

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FIXTURES = Path(__file__).parent / "fixtures" / "trace-runs"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
XSS_MARKERS = ("script", "img", "svg", "iframe", "object")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is missing: apt-get install -y chromium chromium-driver (make test does)",
)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("demo-server") / "serve.log"
    args = ("--sub-lm", "expert", "--runs", str(FIXTURES), "--pool", "1", "--log-level", "warning")
    with server_process(*args, log=log) as (_, base_url):
        yield base_url


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="fathom-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument("--window-size=1360,1700")
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def open_page(browser: WebDriver, url: str) -> None:
    browser.get(f"{url}/demo")
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
    )


def text_of(browser: WebDriver, css: str) -> str:
    """An element's textContent: the text as written, before CSS (uppercase labels) changes its look."""
    return browser.find_element(By.CSS_SELECTOR, css).get_attribute("textContent")


def wait_for_result(browser: WebDriver, timeout: float = 60) -> None:
    WebDriverWait(browser, timeout).until(
        lambda d: d.find_elements(By.ID, "result") or d.find_elements(By.CSS_SELECTOR, ".failure")
    )
    failures = browser.find_elements(By.CSS_SELECTOR, ".failure")
    assert not failures, failures[0].get_attribute("textContent")


def show_traces(browser: WebDriver, file: str, rows: int) -> None:
    """Open the trace tab and list `file`, waiting until its `rows` good lines are listed."""
    browser.find_element(By.ID, "tab-traces").click()
    WebDriverWait(browser, 20).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#trace-file option[value='{file}']")
    )
    Select(browser.find_element(By.ID, "trace-file")).select_by_value(file)
    WebDriverWait(browser, 20).until(
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, ".trace-row")) == rows
            and d.find_element(By.ID, "trace-file").get_attribute("value") == file
        )
    )


def open_trace(browser: WebDriver, line: int) -> None:
    """Click a listed line and wait until the viewer shows it (not the trace shown before)."""
    before = browser.find_elements(By.ID, "result")
    browser.find_element(By.CSS_SELECTOR, f".trace-row[data-line='{line}']").click()
    if before:
        WebDriverWait(browser, 20).until(staleness_of(before[0]))
    wait_for_result(browser)


def assert_nothing_injected(browser: WebDriver) -> None:
    for tag in XSS_MARKERS:
        assert not browser.find_elements(By.CSS_SELECTOR, f"#viewer {tag}"), (
            f"a <{tag}> element got into the viewer"
        )
    assert browser.execute_script("return window.__pwned === undefined")


def assert_screenshot_is_a_page(path: Path) -> None:
    assert path.stat().st_size > 20_000, f"screenshot {path} is only {path.stat().st_size} bytes"
    image = Image.open(path).convert("RGB")
    assert image.size[0] >= 1000
    colors = image.getcolors(maxcolors=1 << 16)  # None: more colors than that, so certainly not blank
    assert colors is None or len(colors) > 50, f"screenshot {path} has only {len(colors)} colors"


def test_expert_niah_episode_live(browser, url, tmp_path):
    open_page(browser, url)
    Select(browser.find_element(By.ID, "family")).select_by_value("niah")
    Select(browser.find_element(By.ID, "length")).select_by_value("8192")
    seed = browser.find_element(By.ID, "seed")
    seed.clear()
    seed.send_keys("3")
    Select(browser.find_element(By.ID, "policy")).select_by_value("expert")
    browser.find_element(By.ID, "run").click()
    wait_for_result(browser)

    turns = browser.find_elements(By.CSS_SELECTOR, "#viewer .turn")
    assert [t.find_element(By.TAG_NAME, "h3").text for t in turns] == ["Turn 1", "Turn 2"]
    codes = [
        c.get_attribute("textContent") for c in browser.find_elements(By.CSS_SELECTOR, "#viewer pre.code")
    ]
    assert "re.findall" in codes[0] and "FINAL(values[0])" in codes[1]
    assert "needles" in text_of(browser, "#turn-1 pre.stdout")
    gold = text_of(browser, ".task-card .gold code")
    assert len(gold) == 7 and text_of(browser, "#answer") == gold and text_of(browser, "#gold-answer") == gold
    assert text_of(browser, "#verdict") == "correct"
    rows = [
        r.find_element(By.TAG_NAME, "td").text
        for r in browser.find_elements(By.CSS_SELECTOR, "#breakdown tbody tr")
    ]
    assert rows == ["format", "correctness", "token_budget", "recursion", "total"]
    assert "done: 2 turns" in text_of(browser, "#status")

    shot = tmp_path / "demo-expert-niah.png"
    browser.save_screenshot(str(shot))
    assert_screenshot_is_a_page(shot)


def test_trace_browser(browser, url, tmp_path):
    open_page(browser, url)
    show_traces(browser, "eval-run/traces.jsonl", rows=1)  # the first file is listed first
    files = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "trace-file")).options]
    assert files == ["eval-run/traces.jsonl", "train-run/traces.jsonl"]

    show_traces(browser, "train-run/traces.jsonl", rows=3)
    assert "not JSON" in text_of(browser, ".bad-line")
    open_trace(browser, 1)  # oolong: reads with llm()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#viewer .turn")) == 3
    assert browser.find_elements(By.CSS_SELECTOR, "#viewer .subcall")
    assert text_of(browser, "#verdict") == "correct" and "step" in text_of(browser, ".task-card .chips")

    show_traces(browser, "eval-run/traces.jsonl", rows=1)
    open_trace(browser, 0)
    assert text_of(browser, "#answer") == text_of(browser, "#gold-answer")
    assert text_of(browser, "#verdict") == "correct"

    shot = tmp_path / "demo-traces.png"
    browser.save_screenshot(str(shot))
    assert_screenshot_is_a_page(shot)


def test_adversarial_text_is_shown_as_text(browser, url):
    # A trace whose model output, REPL output, sub-calls and error carry markup.
    open_page(browser, url)
    show_traces(browser, "train-run/traces.jsonl", rows=3)
    open_trace(browser, 2)
    viewer = text_of(browser, "#viewer")
    assert "<script>window.__pwned = 1</script>" in text_of(browser, "#turn-1 pre.stdout")
    assert '<img src=x onerror="window.__pwned = 2">' in viewer
    assert '<svg onload="window.__pwned = 3"></svg>' in viewer and "<i>sandbox died</i>" in viewer
    assert text_of(browser, "#gold-answer") == "<b>gold</b>"
    assert_nothing_injected(browser)

    # A pasted document and question with markup, run live by the expert (its free-form script).
    browser.find_element(By.ID, "tab-run").click()
    browser.find_element(By.CSS_SELECTOR, "input[name=source][value=pasted]").click()
    document = (
        "Intro.\n<script>window.__pwned = 5</script>\n"
        'The vault code is <img src=x onerror="window.__pwned = 6"> amber-7.\nOutro.\n'
    )
    question = 'What is the vault code? <svg onload="window.__pwned = 7">'
    for field, value in (("document", document), ("question", question), ("gold", "amber-7")):
        browser.execute_script("arguments[0].value = arguments[1]", browser.find_element(By.ID, field), value)
    browser.find_element(By.ID, "run").click()
    wait_for_result(browser)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#viewer .turn")) == 2
    assert "<script>window.__pwned = 5</script>" in text_of(browser, ".task-card pre.doc")
    assert question in text_of(browser, ".task-card .question")
    # The keyword reader answers with whole lines: the document's markup comes back in the answer.
    assert '<img src=x onerror="window.__pwned = 6"> amber-7.' in text_of(browser, "#answer")
    assert text_of(browser, "#verdict") == "wrong"  # a line is not the code
    assert_nothing_injected(browser)
