"""`Job`: a measurement or mechanism job on the service — its state, `wait()` and `cancel()`.

`wait()` polls `GET /v1/jobs/{id}` (quickly at first, then every `poll_interval`
seconds) until the job succeeds, fails or is cancelled, and shows a progress bar
(tqdm) when someone is watching: stderr is a terminal, or the code runs in a Jupyter
kernel. The bar's fraction is the ρ a mechanism has used of its charge, or the stage
a measurement job is at; the fit's iteration and loss follow it, and a mechanism's
expected time left (`eta_seconds`) where the service can estimate it.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from privq_client.errors import JobFailed, JobTimeout
from privq_client.transport import Json, Transport, segment

if TYPE_CHECKING:
    from tqdm import tqdm

FINISHED = frozenset({"succeeded", "failed", "cancelled"})
DEFAULT_WAIT_SECONDS = 600.0
FIRST_POLL_SECONDS = 0.1
POLL_GROWTH = 1.5
# Where a measurement job is, as a fraction of its work (a fit's length is unknown).
STAGE_FRACTIONS = {
    "queued": 0.0,
    "requeued": 0.0,  # a stopping worker gave it back; another one picks it up
    "yielded": 0.0,  # gave its slot to another tenant's job; resumes in its turn
    "measuring": 0.1,
    "measured": 0.3,
    "waiting_for_fit": 0.4,
    "fitting": 0.5,
    "fitted": 0.9,
    "done": 1.0,
}


# Stages during which a fit reports its iteration and loss (a measurement job's fit, a
# mechanism's fits between rounds, its final fit).
FIT_STAGES = frozenset({"fitting", "round fitting", "final fit"})


def watched() -> bool:
    """True if a person can see a progress bar: a terminal on stderr, or a Jupyter kernel."""
    stream = sys.stderr
    try:
        if stream is not None and stream.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        pass
    return "ipykernel" in sys.modules


def progress_fraction(info: Json) -> float:
    """How far along the job is, in [0, 1], from its status and `progress`."""
    if info.get("status") in FINISHED:
        return 1.0
    progress = info.get("progress") or {}
    used, total = progress.get("rho_used"), progress.get("rho_total")
    if isinstance(used, int | float) and isinstance(total, int | float) and total > 0:
        # A mechanism: its rounds spend the charge; the final fit is the last tenth.
        iteration, cap = progress.get("iteration"), progress.get("max_iterations")
        final_fit = progress.get("stage") == "final fit"
        if final_fit and isinstance(iteration, int) and isinstance(cap, int) and cap > 0:
            return 0.9 + 0.1 * min(max(iteration / cap, 0.0), 1.0)
        return min(max(0.9 * used / total, 0.0), 0.9)
    stage = str(progress.get("stage", ""))
    return STAGE_FRACTIONS.get(stage, 0.0)


def progress_text(info: Json) -> str:
    """The job's stage, with a mechanism's round or a fit's iteration and loss."""
    progress = info.get("progress") or {}
    parts = [str(progress.get("stage") or info.get("status") or "")]
    if info.get("status") == "queued" and isinstance(info.get("queue_position"), int):
        parts.append(f"position {info['queue_position']} in the queue")
    if isinstance(progress.get("rounds_done"), int) and info.get("status") == "running":
        parts.append(f"{progress['rounds_done']} rounds")
    if progress.get("stage") in FIT_STAGES and isinstance(progress.get("iteration"), int):
        parts.append(f"iteration {progress['iteration']}")
        if isinstance(progress.get("loss"), int | float):
            parts.append(f"loss {progress['loss']:.4g}")
    eta = info.get("eta_seconds")
    if isinstance(eta, int | float) and info.get("status") == "running":
        parts.append(f"about {format_seconds(eta)} left")
    return " · ".join(part for part in parts if part)


def format_seconds(seconds: float) -> str:
    """`42 s`, `3 min`, `1.5 h`: an ETA as a person reads it."""
    if seconds < 90:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Job:
    """One job of the service. `info` is its last known state (`GET /v1/jobs/{id}`);
    `accepted` the 202 answer that created it (ρ charged, σ, …), if this client made it."""

    def __init__(
        self,
        transport: Transport,
        job_id: str,
        *,
        info: Json | None = None,
        accepted: Json | None = None,
    ) -> None:
        self._transport = transport
        self.id = job_id
        self.accepted = accepted
        status = (accepted or {}).get("status", "queued")
        self.info: Json = info if info is not None else {"id": job_id, "status": status}

    @property
    def status(self) -> str:
        """`queued`, `running`, `succeeded`, `failed` or `cancelled`."""
        return str(self.info.get("status"))

    @property
    def done(self) -> bool:
        """The job has finished, one way or another."""
        return self.status in FINISHED

    @property
    def progress(self) -> Json:
        return dict(self.info.get("progress") or {})

    @property
    def queue_position(self) -> int | None:
        """While queued: its place in the queue (1 = next), as of the last refresh."""
        position = self.info.get("queue_position")
        return position if isinstance(position, int) else None

    @property
    def eta_seconds(self) -> float | None:
        """While a mechanism job runs: the seconds it is expected to take still (from its
        own rounds and fits so far), as of the last `refresh`; None where unknown."""
        eta = self.info.get("eta_seconds")
        return float(eta) if isinstance(eta, int | float) else None

    @property
    def error(self) -> str | None:
        error = self.info.get("error")
        return None if error is None else str(error)

    @property
    def model_version(self) -> int | None:
        """The model version the job's work is in (once it succeeded)."""
        version = self.info.get("model_version")
        return version if isinstance(version, int) else None

    @property
    def rho_charged(self) -> float | None:
        value = (self.accepted or {}).get("rho_charged")
        return float(value) if isinstance(value, int | float) else None

    def refresh(self) -> Job:
        """Read the job's state again."""
        self.info = self._transport.json("GET", f"/v1/jobs/{segment(self.id)}")
        return self

    def cancel(self) -> Job:
        """Cancel it: a queued job at once (refunded whole); a running one stops at its
        next safe point and refunds the ρ it had not used. `ApiError` `job_finished`
        (409) if it had already finished."""
        self.info = self._transport.json("POST", f"/v1/jobs/{segment(self.id)}/cancel")
        return self

    def wait(
        self,
        timeout: float | None = DEFAULT_WAIT_SECONDS,
        *,
        poll_interval: float = 1.0,
        progress: bool | None = None,
        raise_on_failure: bool = True,
    ) -> Job:
        """Poll until the job has finished and return it.

        `timeout` in seconds (None: no limit) raises `JobTimeout` — the job goes on.
        `progress`: show a bar (True), never (False), or only when watched (None).
        A job that ended `failed` or `cancelled` raises `JobFailed` unless
        `raise_on_failure` is False.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        show = watched() if progress is None else progress
        bar = _open_bar(self) if show else None
        interval = min(FIRST_POLL_SECONDS, poll_interval)
        try:
            while True:
                self.refresh()
                if bar is not None:
                    _draw(bar, self)
                if self.done:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise JobTimeout(self, timeout if timeout is not None else 0.0)
                pause = interval
                if deadline is not None:
                    pause = max(0.0, min(pause, deadline - time.monotonic()))
                time.sleep(pause)
                interval = min(interval * POLL_GROWTH, poll_interval)
        finally:
            if bar is not None:
                bar.close()
        if raise_on_failure and self.status != "succeeded":
            raise JobFailed(self)
        return self

    def __repr__(self) -> str:
        kind = self.info.get("kind")
        described = f" {kind}" if kind else ""
        return f"<Job {self.id}{described} {self.status}>"


def _open_bar(job: Job) -> tqdm[Any]:
    from tqdm.auto import tqdm  # only when a bar is shown

    return tqdm(
        total=1.0,
        desc=f"job {job.id[:8]}",
        bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}]",
        file=sys.stderr,
        leave=True,
    )


def _draw(bar: tqdm[Any], job: Job) -> None:
    bar.n = progress_fraction(job.info)
    bar.set_description_str(f"job {job.id[:8]} {progress_text(job.info)}", refresh=False)
    bar.refresh()
