"""The memory inspector page in a real headless Chromium (Debian's, driven by Playwright)."""

import os
import shutil
from pathlib import Path

import pytest

from .conftest import Server

CHROMIUM = os.environ.get("FLEXAMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_CHROMIUM") == "1"
if not REQUIRED:  # skipped only when neither a browser nor the requirement is there
    pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (scripts/setup_chromium.sh installs it)")


@pytest.mark.slow
def test_inspector_shows_budget_timeline_pieces_and_links(server: Server, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "FLEXAMEM_REQUIRE_CHROMIUM=1 but no Chromium found"
    with server.client() as c:
        for i in range(40):
            turns = [{"speaker": "Ana", "text": f"Day {i}: walked the dog, watered the garden, read {i} pages."}]
            if i == 7:
                turns = [{"speaker": "Ana", "text": "The hotel refund goes to my Visa ending 4417."}]
            c.post("/v1/histories/diary/sessions", json={"turns": turns, "session_id": f"d{i}"})
        asked = {"query": "Which card gets the hotel refund", "budget": 600}
        link = c.post("/v1/histories/diary/inspect-link", json=asked)
        assert link.status_code == 200 and server.keys["acme"] not in link.text
    url = server.url + link.json()["url"]
    shot = tmp_path / "inspector.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url)
        assert page.title().startswith("FlexA-Mem inspector")
        bar = page.locator("#budget-bar .part")
        assert bar.count() >= 3 and page.locator("#budget-bar").is_visible()
        parts = {bar.nth(i).get_attribute("data-part") for i in range(bar.count())}
        assert {"prompt", "margin"} <= parts
        units = page.locator("#timeline .unit")
        assert units.count() == 40 and units.first.is_visible()
        resolutions = {units.nth(i).get_attribute("data-resolution") for i in range(units.count())}
        assert "pieces" in resolutions and resolutions <= {"raw", "excerpt", "record", "merged", "pieces", "hidden"}
        pieces = page.locator("#pieces tr.piece")
        assert pieces.count() >= 1 and "4417" in page.locator("#pieces").inner_text()
        assert page.locator("#pieces td.score").first.is_visible()
        assert page.locator("#links").is_visible()
        page.screenshot(path=str(shot), full_page=True)
        with server.client("other") as c:  # another tenant's link names its own history, not acme's
            other = c.post("/v1/histories/diary/sessions", json={"turns": [{"speaker": "B", "text": "mine"}]})
            assert other.status_code == 200
            theirs = server.url + c.post("/v1/histories/diary/inspect-link", json={"query": "refund"}).json()["url"]
        denied = browser.new_page()
        response = denied.goto(theirs)
        assert response is not None and response.status == 200 and "4417" not in denied.content()
        response = denied.goto(url.split("token=")[0] + "token=" + "x" + url.split("token=")[1])  # forged
        assert response is not None and response.status == 401
        browser.close()
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("FLEXAMEM_ARTIFACTS"):  # keep the screenshot (docs, CI artifacts)
        shutil.copy(shot, Path(os.environ["FLEXAMEM_ARTIFACTS"]) / "inspector.png")
