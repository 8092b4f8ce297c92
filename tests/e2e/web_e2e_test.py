"""plateaud's web page end to end: a real headless Chromium, driven through
ChromeDriver's W3C WebDriver HTTP API (the standard library only), against
a live plateaud with auth on, while a job trains for real on the CPU
backend.

- /jobs without a token is the sign-in page; a wrong token says so; the
  user's token signs in (a cookie) and lands on /jobs, whose table has the
  job, RUNNING.
- The job page: its summary, its history (SUBMITTED, SCHEDULED, STARTED),
  a stacked memory bar per rank, and the loss, throughput and memory
  charts drawn by uPlot.
- /nodes has the worker.
- Another user's job is a 404 for the user; the admin sees both jobs, and
  the page of one with no progress yet says so in each chart's box.
- No page logs a JavaScript error or a failed load; each page's screenshot
  (jobs.png, job.png, nodes.png, login.png in $TEST_UNDECLARED_OUTPUTS_DIR)
  is a real render: 1280 px wide and of many colors.

Usage (Bazel runs it, see BUILD):
  web_e2e_test.py PLATEAUD PLATEAU_WORKER PLATEAU
"""

import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
from loopback import free_port, wait_until  # noqa: E402
import service_e2e_test as service  # noqa: E402
import synthetic_corpus  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH = 1280
# Long enough to still be training while the browser looks (a step takes
# tens of milliseconds); it is still running when the cluster stops.
STEPS = 3000
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # W3C's element key


class WebDriverError(Exception):

    def __init__(self, error, message):
        super().__init__(f"{error}: {message}")
        self.error = error


def capabilities(home):
    """A headless Chromium of a fixed window size, with a profile in `home`,
    logging the console."""
    return {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     f"--window-size={WIDTH},1024", "--disable-dev-shm-usage",
                     f"--user-data-dir={os.path.join(home, 'profile')}"],
        },
        "goog:loggingPrefs": {"browser": "ALL"},
    }


class Browser:
    """Headless Chromium through ChromeDriver's W3C WebDriver HTTP API."""

    def __init__(self, directory, log_directory):
        self.port = free_port()
        # Chromium writes a profile and caches under HOME: somewhere
        # writable inside Bazel's sandbox.
        home = os.path.join(directory, "chromium-home")
        os.makedirs(home, exist_ok=True)
        # Its profile's lock is a Unix socket in TMPDIR, whose path may not
        # exceed 107 bytes: Bazel's TEST_TMPDIR is deeper than that.
        self.socket_directory = tempfile.mkdtemp(prefix="plateau-web-",
                                                 dir="/tmp")
        environment = dict(os.environ, HOME=home,
                           TMPDIR=self.socket_directory)
        # Chromium's own output goes to ChromeDriver's log, kept with the
        # screenshots: the place to look when Chromium does not start.
        self.log_path = os.path.join(log_directory, "chromedriver.log")
        self.process = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}",
             f"--log-path={self.log_path}", "--enable-chrome-logs"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            env=environment)
        self.session = None
        try:
            wait_until(self.ready, 30, "chromedriver to answer")
            self.session = self.request(
                "POST", "/session",
                {"capabilities": {"alwaysMatch": capabilities(home)}}
            )["sessionId"]
        except WebDriverError as error:
            self.quit()
            with open(self.log_path, errors="replace") as file:
                raise AssertionError(
                    f"no browser: {error}\n--- {self.log_path}\n"
                    f"{file.read()[-6000:]}") from None
        except BaseException:
            self.quit()
            raise

    def ready(self):
        try:
            return self.request("GET", "/status").get("ready")
        except (OSError, WebDriverError):
            return False

    def request(self, method, path, body=None):
        """The `value` of a WebDriver command; WebDriverError for an
        error."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
            headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                value = json.loads(text)["value"]
            except (ValueError, KeyError):
                raise WebDriverError(f"HTTP {error.code}", text)
            raise WebDriverError(value.get("error"), value.get("message"))

    def command(self, method, path, body=None):
        return self.request(method, f"/session/{self.session}{path}", body)

    def quit(self):
        try:
            if self.session:
                self.request("DELETE", f"/session/{self.session}")
        except (OSError, WebDriverError):
            pass
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.socket_directory, ignore_errors=True)

    def get(self, url):
        self.command("POST", "/url", {"url": url})

    def url(self):
        return self.command("GET", "/url")

    def where(self):
        """What the browser shows, for a failure's message: the URL, the
        document's state, its data-page, title and first words."""
        return self.command("POST", "/execute/sync", {"script": """
            const body = document.body;
            return {url: location.href, readyState: document.readyState,
                    page: body && body.dataset.page, title: document.title,
                    text: body && body.innerText.slice(0, 300)};""",
            "args": []})

    def find_all(self, selector):
        """Element ids matching a CSS selector ([] for none)."""
        found = self.command("POST", "/elements",
                             {"using": "css selector", "value": selector})
        return [element[ELEMENT] for element in found]

    def text(self, element):
        return self.command("GET", f"/element/{element}/text")

    def texts(self, selector):
        """The text of each element matching a CSS selector; found again
        if the page reloaded in between (the live pages reload every 5
        s)."""
        for attempt in range(5):
            try:
                return [self.text(element)
                        for element in self.find_all(selector)]
            except WebDriverError as error:
                if error.error != "stale element reference" or attempt == 4:
                    raise

    def type(self, selector, keys):
        element, = self.find_all(selector)
        self.command("POST", f"/element/{element}/value", {"text": keys})

    def click(self, selector):
        element, = self.find_all(selector)
        self.command("POST", f"/element/{element}/click", {})

    def delete_cookies(self):
        self.command("DELETE", "/cookie")

    def cookies(self):
        return self.command("GET", "/cookie")

    def screenshot(self):
        """The viewport as PNG bytes; the window grows first to hold the
        whole page, so that the shot shows all of it."""
        height = self.command(
            "POST", "/execute/sync",
            {"script": "return document.documentElement.scrollHeight",
             "args": []})
        rect = self.command("GET", "/window/rect")
        self.command("POST", "/window/rect",
                     {"width": rect["width"],
                      "height": max(rect["height"],
                                    min(int(height) + 200, 4000))})
        try:
            return base64.b64decode(self.command("GET", "/screenshot"))
        finally:
            self.command("POST", "/window/rect",
                         {"width": rect["width"], "height": rect["height"]})

    def browser_log(self):
        """The console's entries since the last call: [{level, message,
        source, timestamp}]."""
        return self.command("POST", "/se/log", {"type": "browser"})

    def poll(self, condition, what, timeout=30):
        """condition()'s first true value; an element gone with a page
        reload (the live pages reload every 5 s) is another try."""
        def attempt():
            try:
                return condition()
            except WebDriverError as error:
                if error.error in ("stale element reference",
                                   "no such element"):
                    return None
                raise
        return wait_until(attempt, timeout, what)


def png_pixels(data):
    """(width, height, set of distinct pixels) of an 8-bit RGB or RGBA,
    non-interlaced PNG, decoded with zlib and struct."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("not a PNG")
    position, idat, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunk = data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
        elif kind == b"IEND":
            break
    width, height, depth, color_type, _, _, interlace = header
    if depth != 8 or color_type not in (2, 6) or interlace:
        raise AssertionError(f"unexpected PNG format {header}")
    channels = 4 if color_type == 6 else 3
    stride = width * channels
    raw = zlib.decompress(b"".join(idat))
    previous = bytearray(stride)
    colors = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                predictor = a if pa <= pb and pa <= pc else (
                    b if pb <= pc else c)
                line[i] = (line[i] + predictor) & 0xFF
        colors.update(bytes(line[i:i + channels])
                      for i in range(0, stride, channels))
        previous = line
    return width, height, colors


def metrics_port(cluster):
    """The port of plateaud's metrics (and web) address, from its log's
    first line."""
    def parse():
        with open(os.path.join(cluster.root, "plateaud.log")) as file:
            match = re.search(r"metrics on port (\d+)", file.readline())
        return match and int(match.group(1))
    return wait_until(parse, 30, "plateaud's metrics port in its log")


class WebEndToEndTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        service.DATA = synthetic_corpus.prepare_data(service.WORKER, cls.root)
        cls.outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.root)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        self.cluster = service.Cluster(self.root, "web", [("node-a", 2)],
                                       auth=True)
        self.addCleanup(self.cluster.stop)
        self.base = f"http://127.0.0.1:{metrics_port(self.cluster)}"
        self.browser = Browser(self.root, self.outputs)
        self.addCleanup(self.browser.quit)

    def cli_as_admin(self, *args):
        """The CLI with the admin's token in PLATEAU_TOKEN."""
        environment = dict(os.environ, PLATEAU_TOKEN=self.cluster.admin_token)
        result = subprocess.run(
            [service.CLI, f"--coordinator={self.cluster.address}", *args],
            capture_output=True, text=True, timeout=120, env=environment)
        self.assertEqual(result.returncode, 0,
                         f"{result.stdout}\n{result.stderr}")
        return result.stdout

    def fetch(self, path, token=None):
        """(status, headers, body) of a GET of the web page with a bearer
        token; redirects are not followed."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        request = urllib.request.Request(
            self.base + path,
            headers={"Authorization": f"Bearer {token}"} if token else {})
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=10) as response:
                return (response.status, response.headers,
                        response.read().decode())
        except urllib.error.HTTPError as error:
            return (error.code, error.headers,
                    error.read().decode(errors="replace"))

    def open(self, path, page):
        """Navigates to `path` and waits for a page of data-page `page`.
        The page left behind may be a live one, whose own reload (every 5
        s) can land as the navigation starts; a navigation that did not
        leave it is made again, and said on stderr. A timeout says where
        the browser is."""
        url = self.base + path

        def arrived():
            if self.browser.find_all(f'body[data-page="{page}"]'):
                return True
            where = self.browser.url()
            if where != url:
                print(f"the browser stayed at {where}; "
                      f"navigating to {path} again", file=sys.stderr)
                self.browser.get(url)
            return False
        self.browser.get(url)
        try:
            self.browser.poll(arrived, f"{path} to be the {page} page")
        except AssertionError as error:
            raise AssertionError(
                f"{error}; the browser shows {self.browser.where()}") from None

    def assert_no_errors(self, what, allowed=()):
        """No SEVERE console entry (a JavaScript error, a failed load) but
        those matching a regular expression in `allowed`."""
        errors = [entry["message"] for entry in self.browser.browser_log()
                  if entry["level"] == "SEVERE" and
                  not any(re.search(pattern, entry["message"])
                          for pattern in allowed)]
        self.assertEqual(errors, [], f"{what}: the browser logged errors")

    def save_screenshot(self, name):
        """Saves the page's screenshot as NAME.png and checks it is a real
        render."""
        data = self.browser.screenshot()
        path = os.path.join(self.outputs, name + ".png")
        with open(path, "wb") as file:
            file.write(data)
        width, height, colors = png_pixels(data)
        self.assertEqual(width, WIDTH, path)
        self.assertGreater(height, 500, path)
        self.assertGreater(len(colors), 50, f"{path}: a blank page?")
        return path

    def sign_in(self, token, user):
        self.browser.delete_cookies()
        self.open("/jobs", "login")
        self.browser.type("#token", token)
        self.browser.click('#login-form button[type="submit"]')
        self.browser.poll(
            lambda: self.browser.find_all('body[data-page="jobs"]'),
            f"{user} to land on /jobs")
        self.assertEqual(self.browser.url(), self.base + "/jobs")
        self.assertEqual(self.browser.texts("nav .user"), [user])

    def job_row_state(self, job_id):
        return self.browser.texts(
            f'#jobs-table tr[data-job-id="{job_id}"] .state')

    def test_the_pages_of_a_training_job(self):
        cluster, browser = self.cluster, self.browser
        job_id = cluster.submit(cluster.write_spec("web", steps=STEPS))
        cluster.wait_for_checkpoint(job_id, 20)

        # 1. Signing in. Without a token: the sign-in page; with a bearer
        # token, the user's jobs ("/" leads there).
        status, headers, body = self.fetch("/jobs")
        self.assertEqual(status, 303, "/jobs without a token")
        self.assertEqual(headers["Location"], "/login")
        self.assertNotIn(job_id, body)
        status, headers, body = self.fetch("/", cluster.user_token)
        if status == 303:
            self.assertEqual(headers["Location"], "/jobs")
        else:
            self.assertEqual(status, 200)
            self.assertIn('data-page="jobs"', body)
        status, _, body = self.fetch("/jobs", cluster.user_token)
        self.assertEqual(status, 200)
        self.assertIn(f'data-job-id="{job_id}"', body)
        self.assertEqual(self.fetch("/static/plateau.js")[0], 200)
        self.open("/jobs", "login")
        self.assertEqual(browser.texts("h1"), ["Sign in"])
        self.assertEqual(browser.find_all("#jobs-table"), [])
        self.save_screenshot("login")
        self.assert_no_errors("the sign-in page")
        browser.type("#token", "not-" + cluster.user_token)
        browser.click('#login-form button[type="submit"]')
        browser.poll(lambda: browser.find_all('body[data-page="login"] '
                                              'p.error'),
                     "the sign-in page to say the token is wrong")
        self.assertEqual(
            [cookie["name"] for cookie in browser.cookies()
             if cookie["name"] == "plateau_token"], [])
        self.assert_no_errors("a wrong token", allowed=[
            r"/login - Failed to load resource: the server responded with a "
            r"status of 40[13]"])
        browser.type("#token", cluster.user_token)
        browser.click('#login-form button[type="submit"]')
        browser.poll(lambda: browser.find_all('body[data-page="jobs"]'),
                     "ada to land on /jobs")
        self.assertEqual(browser.url(), self.base + "/jobs")
        cookie, = [cookie for cookie in browser.cookies()
                   if cookie["name"] == "plateau_token"]
        self.assertTrue(cookie["httpOnly"], cookie)
        self.assertEqual(cookie.get("sameSite"), "Strict", cookie)
        self.assertEqual(cookie.get("path"), "/", cookie)
        self.assertEqual(browser.texts("nav .user"), ["ada"])
        self.assertEqual(browser.texts("#jobs-table thead th"),
                         ["ID", "Name", "Owner", "State", "Priority",
                          "Devices", "Progress", "Loss", "Submitted"])
        self.assertEqual(self.job_row_state(job_id), ["RUNNING"])
        self.assertTrue(browser.find_all(
            f'#jobs-table tr[data-job-id="{job_id}"] '
            f'.state.state-running'))
        self.assertTrue(browser.find_all(
            f'#jobs-table tr[data-job-id="{job_id}"] '
            f'a[href="/jobs/{job_id}"]'))
        self.save_screenshot("jobs")
        self.assert_no_errors("/jobs")

        # 2. The job page.
        self.open(f"/jobs/{job_id}", "job")
        heading = browser.poll(lambda: browser.texts("h1"), "the heading")
        self.assertIn(job_id, heading[0])
        self.assertTrue(browser.find_all("#job-summary dl dt"))
        events = browser.poll(
            lambda: (lambda events: events if {
                "SUBMITTED", "SCHEDULED", "STARTED"} <= set(events) else None)(
                    browser.texts("#history-table tbody tr td:nth-child(2)")),
            "the history's SUBMITTED, SCHEDULED and STARTED rows")
        self.assertLess(events.index("SUBMITTED"), events.index("STARTED"))
        ranks = browser.poll(
            lambda: (lambda ranks: ranks if len(ranks) == 2 else None)(
                browser.find_all("#memory-bars .memory-rank")),
            "a memory bar per rank")
        for rank in range(2):
            self.assertTrue(browser.poll(
                lambda: browser.find_all(
                    f"#memory-bars .memory-rank:nth-of-type({rank + 1}) "
                    f".memory-bar .segment"),
                f"rank {rank}'s memory segments"))
        self.assertIn("rank 0", browser.texts(".memory-rank-label"))
        self.assertTrue(browser.find_all(
            "#memory-bars .memory-legend .swatch.component-weights"))
        for chart in ("loss-chart", "throughput-chart", "memory-chart"):
            browser.poll(lambda: browser.find_all(f"#{chart} .uplot canvas"),
                         f"#{chart} to be drawn")
        self.assertEqual(
            [browser.texts(f"#{chart} .u-title")[0] for chart in (
                "loss-chart", "throughput-chart", "memory-chart")],
            ["Loss", "Tokens/s", "Device memory peaks"])
        # The chart may first be drawn from a sample taken before the first
        # step, when only the weights and the optimizer's buffers exist.
        browser.poll(
            lambda: {"weights", "activations", "device peak"} <= set(
                browser.texts("#memory-chart .u-legend .u-label")),
            "the memory chart's weights, activations and device peak series")
        self.save_screenshot("job")
        self.assert_no_errors(f"/jobs/{job_id}")

        # 3. The nodes.
        self.open("/nodes", "nodes")
        self.assertEqual(browser.texts(
            '#nodes-table tr[data-node="node-a"] .node-state-ready'),
            ["READY"])
        cells = browser.texts('#nodes-table tr[data-node="node-a"] td')
        self.assertIn("node-a", cells[0])
        # Last heard from a heartbeat ago, not at its attach.
        self.assertRegex(cells[-1], r"^[0-2]s ago$")
        self.save_screenshot("nodes")
        self.assert_no_errors("/nodes")

        # 4. Another user's job: a 404 for ada, and listed for the admin.
        submitted = self.cli_as_admin(
            "submit", cluster.write_spec("admins", steps=10))
        other = re.search(r"\b(j-[0-9a-z]+)\b", submitted).group(1)
        self.assertEqual(self.fetch(f"/jobs/{other}", cluster.user_token)[0],
                         404)
        self.assertEqual(self.fetch(f"/jobs/{other}",
                                    cluster.admin_token)[0], 200)
        browser.get(f"{self.base}/jobs/{other}")
        browser.poll(lambda: browser.find_all("body"), "the 404 page")
        self.assertEqual(browser.find_all("#job-summary"), [])
        self.assertEqual(browser.find_all('body[data-page="job"]'), [])
        self.assert_no_errors("another user's job", allowed=[
            rf"/jobs/{other} - Failed to load resource: the server responded "
            rf"with a status of 404"])
        self.open("/jobs", "jobs")
        self.assertEqual(browser.find_all(
            f'#jobs-table tr[data-job-id="{other}"]'), [])
        self.assertEqual(self.job_row_state(job_id), ["RUNNING"])

        self.sign_in(cluster.admin_token, "root")
        self.assertEqual(len(self.job_row_state(job_id)), 1)
        self.assertEqual(len(self.job_row_state(other)), 1)
        self.assertEqual(self.browser.texts(
            f'#jobs-table tr[data-job-id="{other}"] td:nth-child(3)'),
            ["root"])
        self.open(f"/jobs/{job_id}", "job")  # an admin sees ada's job
        # The admin's job waits for ada's devices: no samples, no memory,
        # and the charts say so instead of failing.
        self.open(f"/jobs/{other}", "job")
        self.assertEqual(self.browser.texts(".state"), ["QUEUED"])
        self.assertEqual(
            self.browser.texts(".chart .note"),
            ["Not enough progress yet."] * 3)
        self.assertTrue(self.browser.find_all("#memory-bars p.empty"))
        self.assert_no_errors("the admin's pages")


if __name__ == "__main__":
    service.PLATEAUD = os.path.abspath(sys.argv.pop(1))
    service.WORKER = os.path.abspath(sys.argv.pop(1))
    service.CLI = os.path.abspath(sys.argv.pop(1))
    junit.main()
