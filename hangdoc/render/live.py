"""What the user watches while hangdoc samples: a live table on a TTY, a status line elsewhere."""
from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hangdoc.model import RankReport, Report, SlowKind
from hangdoc.render.escape import terminal as esc
from hangdoc.render.text import make_console
from hangdoc.render.words import flight_words, progress_word
from hangdoc.base.words import cut, duration, rank_label, rank_ranges

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], top: float) -> str:
    out = []
    for v in values:
        if v is None or top <= 0:
            out.append(" ")
        else:
            out.append(_BARS[min(len(_BARS) - 1, int(v / top * (len(_BARS) - 1) + 0.5))])
    return "".join(out)


def gpu_history(rank: RankReport) -> tuple[str, str]:
    trend = rank.gpu_trend
    if trend is None:
        return "-", "-"
    top = trend.power_limit_w or max(p or 0 for p in trend.power_w)
    return sparkline(list(trend.utilization_pct), 100), sparkline(list(trend.power_w), top)


def _progress(report: Report, rank: RankReport) -> str:
    """The rank's progress word; in a slow job, where its time goes instead: "waits 63%" (for the
    straggler, in the step's collectives), "straggler", or "data 64%" (waiting on its DataLoader)."""
    slow, shares = report.slow, rank.shares
    if slow is None or shares is None:
        return progress_word(rank)
    if slow.kind == SlowKind.DATA_BOUND:
        return f"data {shares.data:.0%}"
    if rank.rank in slow.stragglers:
        return "straggler"
    return f"waits {shares.step_wait:.0%}"


def live_table(report: Report, width: int = 80, now: str | None = None) -> Group:
    """Laid out for 80 columns first: RANK, STATE and FOR always show; TOP FRAME takes what is left
    and is cut with an ellipsis; the GPU sparklines show only when there are GPUs and room."""
    rows = []
    culprits = set(report.culprit_ranks)
    for rank in report.ranks:
        util, power = gpu_history(rank)
        style = "bold red" if rank.rank in culprits else ""
        rows.append(([rank_label(rank.rank), esc(rank.state), duration(rank.waiting_s), _progress(report, rank),
                      util, power, esc(rank.top_frame or "-")], style))
        for worker in rank.workers:
            index = worker.index if worker.index is not None else "?"
            rows.append(([f" w{index}", esc(worker.state), "", "", "", "", esc(worker.top_frame or "-")], "dim"))
    gpus = any(cells[4] not in ("-", "") for cells, _ in rows)
    names = ("RANK", "STATE", "FOR", "PROGRESS", "GPU", "POWER", "TOP FRAME")
    caps = (8, 16, 5, 14, 12, 12, None)
    shown = [0, 1, 2, 3] + ([4] if gpus else []) + ([5] if gpus and width >= 110 else []) + [6]
    table = Table(box=None, header_style="bold", pad_edge=False, expand=True, width=width)
    used = 0
    for i in shown:
        if caps[i] is None:
            table.add_column(names[i], no_wrap=True, overflow="ellipsis", ratio=1, min_width=10)
            continue
        fit = min(max([len(names[i])] + [len(cells[i]) for cells, _ in rows]), caps[i])
        used += fit + 2            # a column and the two spaces of padding between columns
        table.add_column(names[i], no_wrap=True, overflow="ellipsis", width=fit)
    room = max(10, width - used)
    for cells, style in rows:
        table.add_row(*(cells[i] if i != 6 else frame_cut(cells[i], room) for i in shown), style=style)
    return Group(_head(report, width, now or time.strftime('%H:%M:%S')), table)


def frame_cut(label: str, room: int) -> str:
    """A frame label "name (file:line)" in `room` characters: the name is cut in its middle, and
    file:line kept whole (the start of the file's path goes first when even that does not fit)."""
    if len(label) <= room or not label.endswith(")") or " (" not in label:
        return cut(label, room)
    name, _, where = label.rpartition(" (")
    where = f" ({where}"
    if "/" in where:                  # the directories go before any of the name does
        where = " (…/" + where.rsplit("/", 1)[1]
        if len(name) + len(where) <= room:
            return name + where
    left = room - len(where)          # what the name may take, "…" included
    if left >= 3:
        front = (left - 1) // 2
        back = left - 1 - front
        return name[:front] + "…" + (name[-back:] if back else "") + where
    return "…" + label[-(room - 1):]


def _head(report: Report, width: int, now: str) -> Text:
    """The header in `width`: the long words go first (the clock, then "watching"), never the pace."""
    ranks = f"{len(report.ranks)} ranks" if len(report.ranks) != 1 else "1 rank"
    tail = f"{_pace(report)}{flight_note(report)}"
    for text in (f"hangdoc watching {ranks} · sample {report.samples} · {now} · {tail}",
                 f"hangdoc · {ranks} · sample {report.samples} · {tail}",
                 f"hangdoc · sample {report.samples} · {tail}"):
        if len(text) <= width:
            break
    return Text(text, style="bold", no_wrap=True, overflow="ellipsis")


def _pace(report: Report) -> str:
    """"quiet 4 s of 10 s (learned)": how long no rank has stepped against the hang threshold, and
    where the threshold came from; past it, "quiet 55 s, over 10 s (past)"."""
    t = report.threshold
    if t is None:
        return report.verdict
    if round(t.quiet_s) > t.hang_after_s:
        return f"quiet {t.quiet_s:.0f} s, over {t.hang_after_s:g} s ({t.source})"
    return f"quiet {t.quiet_s:.0f} s of {t.hang_after_s:g} s ({t.source})"


STATUS_WIDTH = 100


def status_line(report: Report, width: int = STATUS_WIDTH) -> str:
    """One round in at most `width` columns: the clock, the sample, the pace, then each rank. Where
    that is too long, every rank shown goes before the clock: the head shrinks to the sample's
    number, ranks alike are folded into one entry ("r0-6 collective-wait 4s still"), then each
    entry leaves out how long its state has lasted, and what still does not fit is counted
    ("+3 more"). The Flight Recorder's setting is a standing fact: `flight_line` says it, once."""
    pace = _pace(report)
    heads = (f"hangdoc: {time.strftime('%H:%M:%S')} sample {report.samples} ({pace}): ",
             f"hangdoc #{report.samples} ({pace}): ")
    full = [(r.rank, f"{esc(r.state)} {duration(r.waiting_s)} {_progress(report, r)}") for r in report.ranks]
    short = [(r.rank, f"{esc(r.state)} {_progress(report, r)}") for r in report.ranks]
    choices = ([f"r{rank_label(rank)} {said}" for rank, said in full], _folded(full), _folded(short))
    for parts in choices:
        for head in heads:
            if len(head) + len(" | ".join(parts)) <= width:
                return head + " | ".join(parts)
    line, parts = heads[-1], choices[-1]
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        sep = " | " if i else ""
        if len(line) + len(sep) + len(part) + (len(f" | +{rest} more") if rest else 0) > width:
            return cut(line + f"{sep}+{len(parts) - i} more", width)
        line += sep + part
    return cut(line, width)


def _folded(entries: list[tuple[int | None, str]]) -> list[str]:
    alike: dict[str, list[int | None]] = {}
    for rank, said in entries:
        alike.setdefault(said, []).append(rank)
    return [f"r{_ranks(ranks)} {said}" for said, ranks in alike.items()]


def _ranks(ranks: list[int | None]) -> str:
    known = [r for r in ranks if r is not None]
    return rank_ranges(known) + (",-" if len(known) < len(ranks) else "") if known else "-"


def flight_line(report: Report) -> str | None:
    """"hangdoc: flight recorder unset (torch's default)": the ranks' Flight Recorder setting, a
    standing fact the status lines do not repeat; None when the watcher does not know it."""
    note = flight_note(report)
    return f"hangdoc:{note.replace(' · ', ' ', 1)}" if note else None


def flight_note(report: Report) -> str:
    """" · flight recorder on (2000 entries), 2 dumps" when the watcher knows the ranks' settings."""
    summary = report.flight
    if summary is None:
        return ""
    dumps = f", {summary.dumps} dump{'s' if summary.dumps != 1 else ''}" if summary.dumps else ""
    return f" · flight recorder {flight_words(summary)}{dumps}"


class LiveView:
    """A rich Live table on a TTY; a status line every `every` samples otherwise."""

    def __init__(self, out: TextIO = sys.stderr, live: bool = True, every: int = 3):
        self.out = out
        self.every = every
        self.count = 0
        self._flight: str | None = None     # the Flight Recorder line said last: said again only when it changes
        self._live = None
        if live and getattr(out, "isatty", lambda: False)():
            self._live = Live(console=make_console(out), refresh_per_second=4, transient=False)
            self._live.start()

    def update(self, report: Report) -> None:
        self.count += 1
        if self._live is not None:
            self._live.update(live_table(report, self._live.console.width))
        elif self.count == 1 or self.count % self.every == 0:
            flight = flight_line(report)
            if flight is not None and flight != self._flight:
                print(flight, file=self.out, flush=True)
                self._flight = flight
            print(status_line(report), file=self.out, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
