"""The chat page's routes: ``GET /``, ``GET /static/{name}`` and ``GET /static/vendor/{name}``, headers and policy."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

import pytest

from chatstream.relay.http import Request
from chatstream.relay.page import STATIC_DIR, StaticSite
from chatstream.relay.service import RelayService
from tests.support import load_event
from tests.unit.relay.relay_support import FAST, FakeClock, relay_config

if TYPE_CHECKING:
    from pathlib import Path

    from chatstream.relay.http import Response
    from tests.unit.relay.conftest import SharedTable


class NoLambda:
    """The page never starts a generation: any invoke fails the test."""

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"the page route invoked the proxy: {kwargs}")


@pytest.fixture
def service(shared_table: SharedTable) -> RelayService:
    config = relay_config(shared_table.name)
    return RelayService(shared_table.table, NoLambda(), config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


def get(service: RelayService, path: str, *, caller: bool = True, method: str = "GET") -> Response:
    """A real-shaped Function URL event (the health sample) for ``path``."""
    raw = copy.deepcopy(load_event("relay-health.json"))
    raw["rawPath"] = path
    raw["requestContext"]["http"].update(method=method, path=path)
    raw["headers"]["accept"] = "text/html"
    if not caller:
        raw["requestContext"].pop("authorizer")
    return service.handle(Request.from_event(raw))


def body(response: Response) -> str:
    return "".join(response.body)


def policy(response: Response) -> dict[str, list[str]]:
    directives = [part.strip().split() for part in response.headers["Content-Security-Policy"].split(";")]
    return {words[0]: words[1:] for words in directives if words}


class Page(HTMLParser):
    """What the HTML loads, and anything inline that a strict policy would block."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        for name in ("src", "href"):
            value = names.get(name)
            if value is not None and not value.startswith("#") and (tag != "a"):
                self.loads.append(value)
        if tag == "script" and "src" not in names:
            self.inline.append("<script> without src")
        if tag == "style":
            self.inline.append("<style>")
        self.inline.extend(f"{tag} {name}=" for name, _ in attrs if name == "style" or name.startswith("on"))


def test_get_root_serves_the_chat_page_as_utf8_html_with_a_strict_policy(service: RelayService) -> None:
    # WHEN a browser opens the relay's root
    response = get(service, "/")
    # THEN the chat page, as UTF-8 HTML, from the packaged file
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert body(response) == (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert "<textarea" in body(response)
    # AND a policy that allows only this origin: no inline or eval'd script, no frames, no plugins
    csp = policy(response)
    assert csp["default-src"] == ["'none'"]
    for directive in ("script-src", "style-src", "connect-src", "img-src"):
        assert csp[directive] == ["'self'"], directive
    assert csp["frame-ancestors"] == ["'none'"] and csp["base-uri"] == ["'none'"]
    assert "unsafe" not in response.headers["Content-Security-Policy"]
    # AND no MIME sniffing, no referrer leaks, revalidated on every visit
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.stream is None


def test_everything_the_page_loads_is_served_from_this_origin_with_its_type(service: RelayService) -> None:
    # GIVEN what the page's HTML loads
    page = Page()
    page.feed(body(get(service, "/")))
    assert {"/static/app.js", "/static/sse.js", "/static/retry.js", "/static/app.css"} <= set(page.loads)
    expected = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    for path in page.loads:
        # WHEN each is fetched THEN it is a same-origin path the relay serves, with its type and the same headers
        assert path.startswith("/static/"), path
        response = get(service, path)
        assert response.status_code == 200, path
        assert response.headers["Content-Type"].startswith(expected[path[path.rindex(".") :]]), path
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert policy(response)["default-src"] == ["'none'"]


def test_the_page_has_nothing_inline_that_the_policy_would_block() -> None:
    # GIVEN the page's HTML WHEN it is parsed THEN no inline script, style or event handler attribute
    page = Page()
    page.feed((STATIC_DIR / "index.html").read_text(encoding="utf-8"))
    assert page.inline == []


def test_none_of_the_pages_own_files_requests_another_origin() -> None:
    # GIVEN every file of the page's own (an SVG's XML namespace is a name, not a request; the vendored code is
    # checked against its published checksum in test_vendor.py, and the browser test sees every request made)
    own = [path for path in STATIC_DIR.iterdir() if path.is_file()]
    assert {"index.html", "app.js", "markdown.js"} <= {path.name for path in own}
    for path in own:
        text = path.read_text(encoding="utf-8").replace('xmlns="http://www.w3.org/2000/svg"', "")
        # THEN no absolute or protocol-relative URL anywhere in it
        assert not re.search(r"https?://|[\"'(]//[a-z]", text, re.IGNORECASE), path.name


HTML_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment|\beval\(|new Function|\.style\b"
)


def test_the_pages_own_scripts_never_parse_html_or_write_styles() -> None:
    # GIVEN the page's own scripts (markdown.js builds elements from markdown-it's tokens)
    scripts = sorted(STATIC_DIR.glob("*.js"))
    assert "markdown.js" in {path.name for path in scripts}
    for path in scripts:
        # THEN none turns a string into HTML or code, or writes an inline style the policy would block
        found = HTML_SINKS.findall(path.read_text(encoding="utf-8"))
        assert found == [], (path.name, found)


def test_the_page_is_shown_without_an_identity_or_a_table(service: RelayService) -> None:
    # GIVEN a request without an IAM caller (a Function URL with AuthType NONE)
    # WHEN it asks for the page THEN it is served: the page is static and reads no session
    assert get(service, "/", caller=False).status_code == 200
    assert get(service, "/static/app.js", caller=False).status_code == 200


@pytest.mark.parametrize(
    "path", ["/static/nope.js", "/static/index.html", "/static/page.py", "/static/..%2fpage.py", "/static/%2e%2e"]
)
def test_an_unknown_static_name_is_404_not_found(service: RelayService, path: str) -> None:
    # WHEN a name outside the shipped files is asked for
    response = get(service, path)
    # THEN 404 not_found as JSON, never a file from elsewhere
    assert response.status_code == 404
    assert response.headers["Content-Type"] == "application/json"
    assert '"code":"not_found"' in body(response)


def test_vendored_code_is_served_below_static_vendor(service: RelayService) -> None:
    # WHEN the vendored markdown-it is asked for by its path
    response = get(service, "/static/vendor/markdown-it.umd.min.js")
    # THEN it is served as published, as JavaScript, with the page's headers
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert body(response) == (STATIC_DIR / "vendor" / "markdown-it.umd.min.js").read_text(encoding="utf-8")
    assert policy(response)["default-src"] == ["'none'"] and response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "/static/vendor/LICENSE",
        "/static/vendor/README.md",
        "/static/vendor/nope.js",
        "/static/vendor/app.js",
        "/static/vendor/..%2fapp.js",
        "/static/vendor",
        "/static/markdown-it.umd.min.js",
    ],
)
def test_only_the_vendored_scripts_are_served_from_vendor(service: RelayService, path: str) -> None:
    # WHEN a name beside the vendored code (its licence, its README), or a page file by the vendor path, is asked for
    # THEN 404 not_found: only files of a served type, each by its own path
    response = get(service, path)
    assert response.status_code == 404 and '"code":"not_found"' in body(response)


@pytest.mark.parametrize("path", ["/static/../relay/page.py", "/static/a/b.js", "/static/", "/static/vendor/a/b.js"])
def test_paths_below_static_that_are_not_one_name_match_no_route(service: RelayService, path: str) -> None:
    # WHEN a path has more (or fewer) segments THEN the router answers 404 itself
    assert get(service, path).status_code == 404


def test_other_methods_on_the_page_are_405_with_allow(service: RelayService) -> None:
    # WHEN the page's paths are POSTed to THEN 405 with Allow: GET, HEAD
    for path in ("/", "/static/app.js"):
        response = get(service, path, method="POST")
        assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD"


def test_a_package_without_the_page_fails_at_load_naming_the_file(tmp_path: Path) -> None:
    # GIVEN a static directory without index.html
    (tmp_path / "app.js").write_text("", encoding="utf-8")
    # WHEN it is loaded (a cold start) THEN it fails, naming the missing file
    with pytest.raises(FileNotFoundError, match="index.html"):
        StaticSite.load(tmp_path)


def test_a_site_serves_its_vendor_folder_and_no_deeper(tmp_path: Path) -> None:
    # GIVEN a static directory with a vendor folder, a folder below that, and another folder
    (tmp_path / "index.html").write_text("<p>page</p>", encoding="utf-8")
    for folder in ("vendor", "vendor/deeper", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "lib.js").write_text(f"// {folder}", encoding="utf-8")
    (tmp_path / "vendor" / "LICENSE").write_text("MIT", encoding="utf-8")
    # WHEN it is loaded THEN the page and the vendor folder's scripts are its files, nothing else
    assert set(StaticSite.load(tmp_path).files) == {"index.html", "vendor/lib.js"}


def test_files_are_read_once_at_load(tmp_path: Path) -> None:
    # GIVEN a site loaded from a directory
    (tmp_path / "index.html").write_text("<p>one</p>", encoding="utf-8")
    site = StaticSite.load(tmp_path)
    # WHEN the file changes on disk afterwards
    (tmp_path / "index.html").write_text("<p>two</p>", encoding="utf-8")
    # THEN the loaded page is served, unchanged (no disk read per request)
    assert "".join(site.index().body) == "<p>one</p>"
