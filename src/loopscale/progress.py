"""Progress bars on stderr (tqdm, with an ETA) for every phase that takes more than a few seconds.

Two ways in, one bar per phase, closed when the phase ends::

    with progress_bar(total, "bootstrap", "refit") as advance:   # advance(n=1): n more units done
        for chunk in chunks:
            ...
            advance(len(chunk))

    for run in progress(runs, "plots", "figure"):                 # an iterable, one unit per item
        ...

    with progress_bar(n_docs, "tokenizer", "document") as advance:  # items, then more work in the phase
        train(advancing(docs, advance))

A function whose caller should own the bar takes ``advance: Callable[[float], None] = NO_PROGRESS`` (the
callable ``progress_bar`` yields; ``NO_PROGRESS`` does nothing) and calls it as units finish.

Rules, so that output stays tidy:

- Bars go to stderr also when it is not a terminal, so a log file shows progress: on a terminal the bar
  redraws at most every ``TERMINAL_INTERVAL_S``; elsewhere every redraw is one line of its own, at most one
  every ``LOG_INTERVAL_S``.
- A bar first draws after ``FIRST_DRAW_S``: a phase that ends sooner shows nothing, and bad input found as
  a phase starts leaves only its one error line.
- A phase whose units are slow is never silent: a heartbeat redraws the bar (its elapsed time) when nothing
  was drawn for the interval.
- Nested phases are silent: while one bar is open in this process (e.g. the design search), the bars of the
  work it calls (each bootstrap inside it) draw nothing, so there is one bar per phase.
- ``LOOPSCALE_PROGRESS=0`` turns every bar off; ``enable=False`` turns one off (a config's
  ``progress: false``).

tqdm is imported only when a bar is drawn, so importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

ENV_VAR = "LOOPSCALE_PROGRESS"
FIRST_DRAW_S = 2.0  # a phase draws nothing before this many seconds (a short phase: nothing at all)
TERMINAL_INTERVAL_S = 1.0  # seconds between redraws on a terminal
LOG_INTERVAL_S = 5.0  # seconds between lines when stderr is a file or pipe (logs stay small)

T = TypeVar("T")

_lock = threading.Lock()
_open_bars = 0  # bars open in this process; a bar opened inside another one draws nothing


def NO_PROGRESS(n: float = 1) -> None:  # noqa: N802 - a constant-like default for ``advance=`` parameters
    """The ``advance`` callback that shows nothing."""


def progress_enabled() -> bool:
    """False when the environment variable ``LOOPSCALE_PROGRESS`` is 0 / false / no / off."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def progress_bar(
    total: float | None, desc: str, unit: str = "it", *, upper_bound: bool = False, enable: bool = True
) -> Iterator[Callable[[float], None]]:
    """A bar for one phase of ``total`` units (None: unknown, the bar counts up); yields ``advance(n=1)``.
    A phase that does more than ``total`` raises the total with the count: a bar never reads past 100%.

    ``upper_bound``: ``total`` is at most what the phase does (figures that may be skipped), so a phase
    that ends early ends at 100%; otherwise the last line shows where it stopped. Draws nothing when
    disabled (``enable``, ``LOOPSCALE_PROGRESS=0``) or nested in another open bar. The bar closes when the
    block ends; a block left by an exception leaves no final line behind."""
    global _open_bars
    with _lock:
        nested = _open_bars > 0
        _open_bars += 1
    try:
        if nested or not enable or not progress_enabled():
            yield NO_PROGRESS
            return
        terminal = sys.stderr.isatty()
        bar = _make_bar(total, desc, unit, terminal)
        stop = threading.Event()
        beat_drawn = [0.0, 0]  # (time, count) of the heartbeat's last draw
        beat = threading.Thread(
            target=_heartbeat, args=(bar, stop, beat_drawn), name="loopscale-progress", daemon=True
        )
        beat.start()
        finished = False

        def advance(n: float = 1) -> None:
            if bar.total is not None and bar.n + n > bar.total:
                bar.total = bar.n + n  # the phase outgrew its estimate (compare's growing bootstrap)
            bar.update(n)

        try:
            yield advance
            finished = True
        finally:
            stop.set()
            beat.join()
            if beat_drawn[0] > bar.last_print_t:  # tqdm counts only its own draws as shown
                bar.last_print_t, bar.last_print_n = beat_drawn
            # the final line: not after an exception, nor twice in a log (its last line shows the count)
            bar.leave = finished and (terminal or bar.last_print_n != bar.n)
            if finished and upper_bound and bar.total is not None and bar.n < bar.total:
                bar.total, bar.leave = bar.n, True
            bar.close()
    finally:
        with _lock:
            _open_bars -= 1


def progress(
    items: Iterable[T],
    desc: str,
    unit: str = "it",
    *,
    total: float | None = None,
    upper_bound: bool = False,
    enable: bool = True,
) -> Iterator[T]:
    """``items`` one by one, with a bar of ``total`` units (default ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar(total, desc, unit, upper_bound=upper_bound, enable=enable) as advance:
        yield from advancing(items, advance)


def advancing(items: Iterable[T], advance: Callable[[float], None]) -> Iterator[T]:
    """``items`` one by one, calling ``advance(1)`` as each is taken: progress of a bar that stays open
    after the items run out (a tokenizer that reads its documents, then merges)."""
    for item in items:
        yield item
        advance(1)


def _make_bar(total: float | None, desc: str, unit: str, terminal: bool):
    from tqdm import tqdm

    stream = sys.stderr
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=stream if terminal else _OneLinePerRedraw(stream),
        mininterval=TERMINAL_INTERVAL_S if terminal else LOG_INTERVAL_S,
        delay=FIRST_DRAW_S,
        dynamic_ncols=terminal,
        ascii=not terminal,
        # an open count reads "12 document", not tqdm's "12document"
        bar_format=None if total is not None else "{desc}: {n_fmt} {unit} [{elapsed}, {rate_fmt}{postfix}]",
        disable=False,  # tqdm's default (None) turns the bar off whenever stderr is not a terminal
    )


def _heartbeat(bar, stop: threading.Event, drawn: list) -> None:
    """Draw ``bar`` once its first-draw delay is over, then whenever nothing was drawn for its interval and
    no unit finished since (slow units: the line shows the elapsed time). Units that did finish are drawn by
    tqdm's own update, which also times the rate; the heartbeat steps in for them only after two intervals
    of silence. ``drawn``: set to [time, count] of each draw of its own."""
    last_beat = 0.0  # tqdm's last_print_t counts only the redraws of update(), which also time the rate
    while not stop.wait(min(bar.delay, bar.mininterval) / 4 or 0.05):
        now = bar._time()
        if now < bar.start_t + bar.delay:
            continue
        last_drawn = max(bar.last_print_t, last_beat)
        silent = now - last_drawn
        idle = bar.n == bar.last_print_n
        if last_drawn <= bar.start_t or silent >= (1 if idle else 2) * bar.mininterval:
            count = bar.n
            bar.refresh()
            last_beat = now
            drawn[:] = [now, count]


class _OneLinePerRedraw:
    """A stream for tqdm when stderr is a file or pipe: each redraw (tqdm starts it with a carriage return
    and pads it with spaces) becomes one plain line; a repeat of the previous line (the final redraw of
    ``close``) is dropped."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line and line != self.last:
            self.stream.write(line + "\n")
            self.last = line

    def flush(self) -> None:
        self.stream.flush()
