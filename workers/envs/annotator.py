"""A simulated annotator working an annotation queue through the public API, as a person would (no Django).

It signs in to the console with a username and password (session cookie + CSRF token, like the browser),
then repeatedly asks `GET /api/v1/annotation/queues/<id>/next/`, reads the trajectory
(`GET /api/v1/trajectories/<id>/`) and labels it (`POST /api/v1/annotation/items/<id>/labels/`) with
`SimulatedAnnotator`'s 0 / 0.5 / 1 judgement of the episode, or skips it (`.../skip/`). It labels a `share`
of the items it is given and skips the rest; it skips, too, an episode whose outcome it does not know (the
simulation's ground truth arrives through `outcomes`, keyed by session id). When the queue is empty (204)
it waits for the queue to refill.
"""

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from workers.envs.users import SimulatedAnnotator


@dataclass
class AnnotatorStats:
    labelled: int = 0
    skipped: int = 0
    errors: int = 0
    last_problem: str = ""


def console_sign_in(http, *, console_url: str, username: str, password: str) -> None:
    """Signs `http` (an httpx.Client on the console) in through the console's form, as a browser does: its
    CSRF cookie, then the credentials; the session cookie stays on `http`, and unsafe API calls send the
    CSRF token back as `X-CSRFToken`. PermissionError when the console refuses."""
    console_url = console_url.rstrip("/")
    http.get("/login/").raise_for_status()
    token = http.cookies.get("csrftoken", "")
    answer = http.post(
        "/login/",
        headers={"Referer": f"{console_url}/login/"},
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
    )
    if answer.status_code != 302 or "sessionid" not in http.cookies:
        raise PermissionError(f"{username} could not sign in ({answer.status_code})")
    http.headers["X-CSRFToken"] = http.cookies.get("csrftoken", token)
    http.headers["Referer"] = f"{console_url}/"


class AnnotatorClient:
    def __init__(
        self,
        *,
        console_url: str,
        username: str,
        password: str,
        queue_id: int,
        outcomes: Mapping,
        annotator: SimulatedAnnotator,
        seed: int = 0,
        idle_seconds: float = 2.0,
    ):
        self.console_url = console_url.rstrip("/")
        self.username, self.password, self.queue_id = username, password, queue_id
        self.outcomes, self.annotator = outcomes, annotator
        self.rng = random.Random(f"annotator:{seed}")
        self.idle_seconds = idle_seconds
        self.stats = AnnotatorStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "AnnotatorClient":
        self._thread = threading.Thread(target=self._work, name="demo-annotator", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def sign_in(self, http) -> None:
        console_sign_in(http, console_url=self.console_url, username=self.username, password=self.password)

    def work_once(self, http) -> bool:
        """Takes one item: True when there was one (labelled or skipped), False when the queue is empty."""
        answer = http.get(f"/api/v1/annotation/queues/{self.queue_id}/next/")
        if answer.status_code == 204:
            return False
        answer.raise_for_status()
        item = answer.json()
        trajectory = http.get(f"/api/v1/trajectories/{item['trajectory_id']}/")
        trajectory.raise_for_status()
        outcome = self.outcomes.get(trajectory.json().get("session_id"))
        if outcome is None or not self.annotator.wants(self.rng):
            http.post(f"/api/v1/annotation/items/{item['item_id']}/skip/").raise_for_status()
            self.stats.skipped += 1
            return True
        value = self.annotator.label(outcome, self.rng)
        http.post(
            f"/api/v1/annotation/items/{item['item_id']}/labels/", json={"value": value}
        ).raise_for_status()
        self.stats.labelled += 1
        return True

    def _work(self) -> None:
        import httpx

        with httpx.Client(base_url=self.console_url, timeout=30) as http:
            while not self._stop.is_set():
                try:
                    if "sessionid" not in http.cookies:
                        self.sign_in(http)
                    if not self.work_once(http):
                        self._stop.wait(self.idle_seconds)
                except (httpx.HTTPError, PermissionError, ValueError, KeyError) as error:
                    self.stats.errors += 1
                    self.stats.last_problem = str(error)[:200]
                    self._stop.wait(self.idle_seconds)
