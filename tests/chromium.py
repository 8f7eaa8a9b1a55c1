"""Pages opened in headless Chromium, measured by a script run in the page.

``measure(page, script)`` copies an HTML page, appends ``script`` (the body of an async
JavaScript function that returns a JSON-able value once the page has rendered: it may ``await``,
say, a click's re-rendering), opens the copy in headless Chromium
at the given window size and returns the value. Chromium's ``--dump-dom`` prints the page after
its scripts ran, so the value travels back in the DOM: no driver and no Python package needed.

Chromium is Debian's ``chromium``. Without it the tests that use it skip, unless
``INTERTWINE_REQUIRE_CHROMIUM`` is set (as CI sets it), when they fail.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

WINDOW = (1400, 1200)
_MARK = "intertwine-measure"


def chromium() -> str:
    """The Chromium executable, or a skip (a failure where CI requires it) saying how to get it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    message = "headless Chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("INTERTWINE_REQUIRE_CHROMIUM"):
        pytest.fail(message)
    pytest.skip(message)


def _run(url: str, *arguments: str, window=WINDOW) -> str:
    done = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--allow-file-access-from-files",
            f"--window-size={window[0]},{window[1]}",
            "--virtual-time-budget=10000",  # let the page's scripts finish
            *arguments,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def measure(page: Path, script: str, window=WINDOW):
    """Open ``page`` and return what ``script`` (a function body) returns after the page rendered.

    The page is copied beside itself (its relative links keep working) with the script appended
    and run once the page's own scripts have drawn it."""
    html = page.read_text()
    probe = (
        f'<script>window.addEventListener("load", () => setTimeout(async () => {{'
        f'const out = document.createElement("pre"); out.id = "{_MARK}";'
        f"out.textContent = JSON.stringify(await (async () => {{ {script} }})());"
        f"document.body.appendChild(out); }}, 500));</script>"
    )
    end = html.rfind("</body>")
    copy = page.with_name(f".measured-{page.name}")
    copy.write_text(html[:end] + probe + html[end:] if end >= 0 else html + probe)
    try:
        dom = _run(copy.as_uri(), "--dump-dom", window=window)
    finally:
        copy.unlink()
    found = re.search(rf'<pre id="{_MARK}">(.*?)</pre>', dom, flags=re.DOTALL)
    assert found, f"the measuring script did not run in {page}"
    return json.loads(_unescape(found.group(1)))


def screenshot(page: Path, path: Path, window=WINDOW) -> Path:
    """A PNG of ``page`` as it first appears at ``window``."""
    _run(page.as_uri(), f"--screenshot={path}", window=window)
    return path


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
