"""report.html in a real browser (headless Chromium through Selenium, a 1400 × 900 px window): every
published report (results/*/report.html) and a small case-study report built here. Each page loads without
console errors, every figure is decoded with a non-zero size, the key figure starts on the first screen, no
Markdown marker reaches the visible text, and with every section collapsed the page is at most three screens
tall. The first screen is saved as reports/screenshot.png in the test's temp folder, to be looked at when a
check fails.

Skipped, with the reason, where Chromium and chromedriver are missing and cannot be installed (apt-get as
root; ``make setup`` installs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from loopscale.analysis.sweep import report_sweep

from .helpers import LAW, law_loss, synthetic_sweep

WIDTH, HEIGHT = 1400, 900  # px, the first screen
RESULTS = Path(__file__).resolve().parents[2] / "results"
MARKDOWN = re.compile(r"\*\*|`|\]\(|^#{1,6} ", re.MULTILINE)  # bold, code, a link, a heading


def _browser_binaries() -> tuple[str, str] | str:
    """(chromium, chromedriver) paths, installing the Debian packages when run as root; or why not."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "chromium and chromium-driver are not installed and cannot be without root and apt-get"
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", "chromium-driver"]
    if subprocess.run(install, capture_output=True, timeout=900).returncode != 0:
        return "apt-get could not install chromium and chromium-driver"
    found = shutil.which("chromium"), shutil.which("chromedriver")
    return found if all(found) else "chromium installed, yet chromium or chromedriver is not on PATH"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for every page of this module, console messages recorded."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip: .[dev])")
    binaries = _browser_binaries()
    if isinstance(binaries, str):
        pytest.skip(binaries)
    chromium, chromedriver = binaries
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(chromedriver))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def case_study_page(tmp_path_factory) -> Path:
    """A small case study: a variant sweep that lowers φ by 0.1 against the base whose r = 1 runs it
    reuses (law-exact losses, + 0.002 nats of noise on the looped runs)."""
    root = tmp_path_factory.mktemp("case-study")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(
            root
        )  # the variant's spec reuses results/laptop-factorial, relative to the working folder
        data = {"path": str(root / "no-dataset")}  # one dataset for both arms (else compare refuses them)
        synthetic_sweep(root / "results" / "laptop-factorial", "laptop", data=data)
        variant = root / "variant"
        rng = np.random.default_rng(3)
        for run in synthetic_sweep(variant, "laptop-truncated-bptt", data=data):
            path = variant / "runs" / run.name / "result.json"
            result = json.loads(path.read_text())
            if run.r > 1:
                coef = {**LAW, "phi": LAW["phi"] - 0.1}
                noise = 0.002 * rng.standard_normal()
                result["val_loss"] = law_loss(run.n_once, run.n_rec, run.r, run.tokens, coef) + noise
            else:  # the anchors are the base's own runs, bit for bit
                base = root / "results" / "laptop-factorial" / "runs" / run.name / "result.json"
                result = json.loads(base.read_text())
            path.write_text(json.dumps(result))
        return report_sweep(variant, restarts=10, bootstrap=0, peak_flops=1e11).html


def _check_page(driver, page: Path, shots: Path) -> dict:
    """Load ``page`` and return what the checks read (figure sizes, key figure top, text, heights)."""
    driver.get_log("browser")  # drop the messages of an earlier page
    driver.get(page.as_uri())
    driver.execute_script("window.scrollTo(0, 0)")
    shots.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shots / "screenshot.png"))
    return driver.execute_script(
        """
        const box = el => el.getBoundingClientRect();
        const figures = [...document.querySelectorAll('figure svg, figure img')].map(el => ({
            kind: el.tagName.toLowerCase(), width: box(el).width, height: box(el).height,
            decoded: el.tagName === 'IMG' ? el.complete && el.naturalWidth > 0 : el.childElementCount > 0}));
        const key = document.querySelector('#key-figures figure');
        const details = [...document.querySelectorAll('details')];
        details.forEach(d => d.open = true);
        const text = document.body.innerText;
        details.forEach(d => d.open = false);
        return {figures: figures, keyTop: key ? box(key).top + window.scrollY : null, text: text,
                collapsedHeight: document.documentElement.scrollHeight, sections: details.length};
        """
    )


def _pages(case_study_page) -> list[tuple[str, Path]]:
    published = [(page.parent.name, page) for page in sorted(RESULTS.glob("*/report.html"))]
    return [*published, ("case-study", case_study_page)]


def test_reports_read_well_in_a_browser(browser, case_study_page, tmp_path):
    for name, page in _pages(case_study_page):
        seen = _check_page(browser, page, tmp_path / name / "reports")
        errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, (name, errors)
        assert seen["figures"] and all(f["decoded"] and f["width"] > 0 and f["height"] > 0
                                       for f in seen["figures"]), (name, seen["figures"])  # fmt: skip
        assert seen["keyTop"] is not None and seen["keyTop"] < HEIGHT, (name, seen["keyTop"])
        assert not MARKDOWN.search(seen["text"]), (name, MARKDOWN.findall(seen["text"])[:5])
        assert not re.search(r"\bissue \d", seen["text"], re.IGNORECASE), name
        least = 2 if (page.parent / "price.json").is_file() else 8  # a price report: its looks and its pairs
        assert seen["sections"] >= least and seen["collapsedHeight"] <= 3 * HEIGHT, (
            name,
            seen["collapsedHeight"],
        )
        assert (tmp_path / name / "reports" / "screenshot.png").stat().st_size > 0
