"""The built documentation site, opened in headless Chromium: what a reader sees.

Every page of ``docs/_build/html`` (or of ``$NBQUANT_DOCS_SITE``) is served on 127.0.0.1 and loaded at a
1280 x 900 window. The checks:

- no JavaScript error in the browser's console;
- no broken image (an ``<img>`` that loaded nothing);
- no dead internal link: every ``href`` into the site names a file that exists and, where it has one, an anchor
  that the target page holds;
- the navigation has entries on every page: the left sidebar lists the pages of the section (the home page,
  which lists the sections in its body, has no sidebar, so no empty "Section Navigation" heading either); and
  every page but the home page has a "previous" link, every page but the last a "next";
- no code block scrolls sideways (``scrollWidth`` wider than the box) at 1280 px (the site's stylesheet wraps long
  lines), and on the key pages (:data:`KEY_PAGES`) every code block fits without that wrapping.

Needs Chromium with its driver (Debian: ``apt-get install -y chromium chromium-driver``), selenium (the docs
extra) and a built site (``sphinx-build -b html docs docs/_build/html``). Without one of them the module is
skipped, with the reason, unless ``NBQUANT_DOCS_BROWSER=required`` (set by .ci/run's docs stage), which turns
the skip into a failure.

``python tests/test_docs_browser.py [SITE]`` prints the survey's counts without pytest.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("NBQUANT_DOCS_SITE", ROOT / "docs" / "_build" / "html"))
REQUIRED = os.environ.get("NBQUANT_DOCS_BROWSER") == "required"
WIDTH, HEIGHT = 1280, 900
# Chromium with no network: no sandbox (root in CI containers), no GPU, no background traffic, a fresh profile.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", f"--window-size={WIDTH},{HEIGHT}")
# Pages whose layout is Sphinx's own (the index of names, the search page): not reader pages.
# The pages a newcomer reads first: their code blocks fit at 1280 px as written, without the site's wrapping.
KEY_PAGES = ("index.html", "install.html", "getting_started.html", "tutorial_convert.html", "compile_cache.html",
             "reference/cli.html")
NOT_READER_PAGES = {"genindex.html", "search.html", "py-modindex.html"}

# One pass over the page, in the browser: every figure the survey needs.
SURVEY_JS = r"""
const wide = [], wrapped = [];
for (const pre of document.querySelectorAll('.bd-article pre')) {
  const first = pre.textContent.split('\n')[0].slice(0, 80);
  if (pre.scrollWidth > pre.clientWidth + 1) wide.push(first);
  const style = pre.style.whiteSpace;  // would it fit without the site's wrapping?
  pre.style.whiteSpace = 'pre';
  if (pre.scrollWidth > pre.clientWidth + 1) wrapped.push(first);
  pre.style.whiteSpace = style;
}
return {
  loaded: document.readyState === 'complete' && document.querySelector('.bd-article') !== null,
  title: document.title,
  ids: Array.from(document.querySelectorAll('[id]'), e => e.id)
       .concat(Array.from(document.querySelectorAll('a[name]'), e => e.getAttribute('name'))),
  links: Array.from(document.querySelectorAll('a[href]'), a => a.href),
  broken_images: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
                      .map(i => i.getAttribute('src')),
  nav_present: document.querySelectorAll('nav.bd-docs-nav').length,
  nav_entries: document.querySelectorAll('nav.bd-docs-nav a').length,
  prev: document.querySelectorAll('.prev-next-area a.left-prev').length,
  next: document.querySelectorAll('.prev-next-area a.right-next').length,
  wide_code: wide,
  wrapped_code: wrapped,
};
"""


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def missing() -> str | None:
    """Why the browser survey cannot run here, or None."""
    if not (SITE / "index.html").is_file():
        return f"no built site at {SITE} (sphinx-build -b html docs docs/_build/html)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[docs]')"
    if _chromium() is None or shutil.which("chromedriver") is None:
        return "chromium or chromedriver is not installed (apt-get install -y chromium chromium-driver)"
    return None


@dataclass
class Survey:
    """What the browser saw on each page of the site."""

    pages: list[str]
    order: list[str] = field(default_factory=list)  # the pages in the "next" chain, from the home page
    js_errors: dict[str, list[str]] = field(default_factory=dict)
    broken_images: dict[str, list[str]] = field(default_factory=dict)
    dead_links: dict[str, list[str]] = field(default_factory=dict)
    empty_nav: list[str] = field(default_factory=list)
    missing_prev_next: dict[str, str] = field(default_factory=dict)
    wide_code: dict[str, list[str]] = field(default_factory=dict)
    wrapped_code: dict[str, list[str]] = field(default_factory=dict)  # fit only because the site wraps them

    def counts(self) -> dict[str, int]:
        """The figures a report quotes."""
        return {"pages": len(self.pages), "pages with JavaScript errors": len(self.js_errors),
                "broken images": sum(map(len, self.broken_images.values())),
                "dead internal links": sum(map(len, self.dead_links.values())),
                "pages with empty navigation": len(self.empty_nav),
                "pages missing previous/next": len(self.missing_prev_next),
                "code blocks that scroll at 1280 px": sum(map(len, self.wide_code.values())),
                "pages with such blocks": len(self.wide_code),
                "code blocks wrapped to fit": sum(map(len, self.wrapped_code.values())),
                "wrapped blocks on the key pages": sum(len(self.wrapped_code.get(p, ())) for p in KEY_PAGES)}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the survey reports what matters
        pass


def _serve(site: Path) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(60)
    return driver


def survey(site: Path = SITE) -> Survey:
    """Open every page of ``site`` in headless Chromium and record what :data:`SURVEY_JS` finds."""
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if p.name not in NOT_READER_PAGES and "_static" not in p.parts and "_sources" not in p.parts)
    result = Survey(pages)
    server = _serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    seen: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="nbquant-chromium-") as profile:
        driver = _driver(profile)
        try:
            for page in pages:
                seen[page], errors = _load(driver, base + page)
                if errors:
                    result.js_errors[page] = errors
        finally:
            driver.quit()
            server.shutdown()
    for page, found in seen.items():
        if found["broken_images"]:
            result.broken_images[page] = found["broken_images"]
        if found["wide_code"]:
            result.wide_code[page] = found["wide_code"]
        if found["wrapped_code"]:
            result.wrapped_code[page] = found["wrapped_code"]
        if found["nav_entries"] == 0 and not (page == "index.html" and not found["nav_present"]):
            result.empty_nav.append(page)
        dead = [link for link in found["links"] if _dead(link, urljoin(base, page), base, site, seen)]
        if dead:
            result.dead_links[page] = sorted(set(dead))
    _walk_prev_next(result, seen)
    return result


def _load(driver, url: str, tries: int = 3) -> tuple[dict, list[str]]:
    """What :data:`SURVEY_JS` finds on ``url`` and the console's errors; a load that shows no article (Chromium
    now and then reports a page complete before its body has arrived, on a loaded machine) is tried again."""
    for _ in range(tries):
        driver.get(url)
        found = driver.execute_script(SURVEY_JS)
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if found["loaded"]:
            return found, errors
    return found, [*errors, f"the page did not load in {tries} tries (title {found['title']!r})"]


def _dead(link: str, page_url: str, base: str, site: Path, seen: dict[str, dict]) -> bool:
    """Whether an internal link names a missing file, or an anchor its target does not hold."""
    if not link.startswith(base):
        return False  # outside the site: not checked (no network)
    parts = urlsplit(link)
    path = unquote(parts.path[len(urlsplit(base).path):]) or "index.html"
    if path.endswith("/"):
        path += "index.html"
    if not (site / path).exists():
        return True
    if parts.fragment and path in seen:
        return unquote(parts.fragment) not in seen[path]["ids"]
    return False


def _walk_prev_next(result: Survey, seen: dict[str, dict]) -> None:
    """Every reader page but the home page has a "previous" link; every page but one (the last) a "next"."""
    no_next = [page for page, found in seen.items() if not found["next"]]
    for page, found in seen.items():
        if not found["prev"] and page != "index.html":
            result.missing_prev_next[page] = "no previous"
    if len(no_next) > 1:
        for page in no_next:
            result.missing_prev_next.setdefault(page, "no next")


@pytest.fixture(scope="module")
def site_survey() -> Survey:
    reason = missing()
    if reason:
        if REQUIRED:
            pytest.fail(f"NBQUANT_DOCS_BROWSER=required, but {reason}")
        pytest.skip(reason)
    return survey()


pytestmark = pytest.mark.nosim


def test_no_javascript_errors(site_survey):
    assert site_survey.js_errors == {}


def test_no_broken_images(site_survey):
    assert site_survey.broken_images == {}


def test_no_dead_internal_links_or_anchors(site_survey):
    assert site_survey.dead_links == {}


def test_navigation_has_entries_on_every_page(site_survey):
    assert site_survey.empty_nav == []
    assert site_survey.missing_prev_next == {}


def test_code_blocks_fit_at_1280_px(site_survey):
    assert site_survey.wide_code == {}


def test_key_pages_code_blocks_fit_without_wrapping(site_survey):
    assert {page: site_survey.wrapped_code[page] for page in KEY_PAGES if page in site_survey.wrapped_code} == {}


if __name__ == "__main__":
    found = survey(Path(sys.argv[1]) if len(sys.argv) > 1 else SITE)
    for name, count in found.counts().items():
        print(f"{count:6d}  {name}")
    for label, table in (("empty navigation", dict.fromkeys(found.empty_nav, "")),
                         ("dead links", found.dead_links), ("JavaScript errors", found.js_errors),
                         ("broken images", found.broken_images), ("prev/next", found.missing_prev_next),
                         ("wrapped on a key page", {p: found.wrapped_code[p] for p in KEY_PAGES
                                                    if p in found.wrapped_code})):
        for page, what in table.items():
            print(f"{label}: {page} {what}"[:300])
