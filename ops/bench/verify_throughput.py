# ruff: noqa: T201
"""Throughput of the verifier: sim artifacts judged through one shared Chromium.

Measures, for ``--artifacts`` pages from
:func:`worker.tasks.dashboard.pages.render_dashboard` (distinct seeds, the pages the ``sim``
model authors) judged with :func:`verifier.chromium.judge.judge` on one
:class:`verifier.chromium.browser.Browser` per repetition: wall time, artifacts per minute, verdicts
passed (and which checks failed), median seconds per artifact, the page fps (median and
minimum), and the peak memory of Chromium's process tree (sum of RSS, and sum of PSS, over
``browser_pids()``, sampled every 250 ms). Each setting is one Chromium binary from
``--chromium`` with ``Browser(max_pages=k)`` for each k in ``--pages``; the summary gives
medians over ``--repeat`` repetitions, throughput against the first binary at ``max_pages=1``
(or the first setting) of the same run, and whether the target "100 artifacts in at most
90 s" is met.

    python -m ops.bench.verify_throughput                       # 100 artifacts, pages 1-4, x3
    python -m ops.bench.verify_throughput --artifacts 20 --pages 1,2 --repeat 1
    python -m ops.bench.verify_throughput --pages 4 \
        --chromium /usr/bin/chromium-headless-shell,/usr/bin/chromium     # the two builds
    python -m ops.bench.verify_throughput --json > verify_throughput.json   # progress on stderr
    python -m ops.bench.verify_throughput --artifacts 100 --pages 2 --before HEAD

``--before REF`` measures the verifier of a git revision in the same window: that revision's
own copy of this script, run from ``git archive REF`` in a temporary directory, judges the
same pages in a subprocess, alternating with this tree's verifier repetition by repetition,
and its rows are printed as ``before``. (A revision's script counts its own way: the old
real-time judge judged a page again when it called the host starved.)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from logging.handlers import BufferingHandler
from typing import Any, get_args

import click
import psutil

from verifier.chromium.binary import default_executable
from verifier.chromium.browser import Browser, BrowserUnavailable, DisplayMode
from verifier.chromium.judge import Verdict, judge
from worker.tasks.dashboard.pages import render_dashboard

MIB = 1024 * 1024
#: The target: this many artifacts in at most TARGET_S seconds (scaled to ``--artifacts``).
TARGET_ARTIFACTS, TARGET_S = 100, 90.0
#: Figures of one repetition that the summary takes the median of.
MEDIAN_KEYS = (
    "wall_s",
    "per_min",
    "passed",
    "s_per_artifact",
    "slot_use",
    "cpu_s_per_artifact",
    "fps_median",
    "fps_min",
    "not_judged",
    "peak_rss_mib",
    "peak_pss_mib",
    "end_rss_mib",
    "warmup_s",
)


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and its descendants, living or reaped.

    Each living process counts its own time plus that of the children it has reaped, so a
    renderer that exited between two readings is still counted, through the zygote that
    reaped it. The difference of two readings is the CPU the verifier used in between: this
    process (judge(), Playwright's client), Playwright's driver and every Chromium process.
    """
    total = 0.0
    me = psutil.Process()
    for proc in (me, *me.children(recursive=True)):
        try:
            t = proc.cpu_times()
        except psutil.Error:  # exited after the listing: its reaper counts it
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def sample(
    browser: Browser,
    interval_s: float,
    done: threading.Event,
    samples: list[tuple[int, int | None]],
) -> None:
    """Every ``interval_s`` until ``done``: (RSS-sum, PSS-sum or None) over browser_pids()."""
    procs: dict[int, psutil.Process] = {}
    while not done.wait(interval_s):
        rss, pss, has_pss = 0, 0, True
        for pid in browser.browser_pids():
            try:  # memory_full_info() reads /proc/<pid>/smaps_rollup on Linux
                proc = procs.get(pid) or procs.setdefault(pid, psutil.Process(pid))
                info = proc.memory_full_info()
            except psutil.Error:  # exited between listing and reading
                continue
            rss, pss = rss + int(info.rss), pss + int(getattr(info, "pss", 0))
            has_pss = has_pss and hasattr(info, "pss")  # PSS is Linux-only
        if rss:
            samples.append((rss, pss if has_pss else None))


def measure(
    *,
    chromium: str,
    pages: int,
    seeds: list[int],
    display: DisplayMode,
    min_fps: float,
    interval_s: float,
    alerts: BufferingHandler,
) -> dict[str, Any]:
    """One repetition: a fresh Browser(max_pages=pages) judges every seed's page."""
    htmls = [render_dashboard(seed).html for seed in seeds]
    alerts.buffer.clear()
    samples: list[tuple[int, int | None]] = []
    done = threading.Event()

    def one(html: str) -> tuple[float, Verdict | str]:
        """A verdict as the verify task reaches it."""
        started = time.monotonic()
        try:
            verdict: Verdict | str = judge(html, browser=browser, min_fps=min_fps)
        except BrowserUnavailable as exc:
            verdict = f"BrowserUnavailable: {exc}"
        return time.monotonic() - started, verdict

    # judge() holds its thread for the whole measurement and its static checks take
    # milliseconds, so `pages` threads keep every page slot busy; one more would only queue
    # on the browser's semaphore and make each judge() time include that wait.
    pool = ThreadPoolExecutor(max_workers=pages)
    with Browser(executable_path=chromium, display=display, max_pages=pages) as browser:
        sampler = threading.Thread(target=sample, args=(browser, interval_s, done, samples))
        sampler.start()
        try:
            # Untimed: launches Chromium, as a long-lived worker has done already.
            warmup_s, warm = one(render_dashboard(max(seeds) + 1).html)
            started, cpu_started = time.monotonic(), tree_cpu_s()
            results = list(pool.map(one, htmls))
            wall_s, cpu_s = time.monotonic() - started, tree_cpu_s() - cpu_started
        finally:  # on Ctrl-C only the pages in flight finish
            pool.shutdown(cancel_futures=True)
            done.set()
            sampler.join()
    verdicts = [v for _, v in results if isinstance(v, Verdict)]
    fps = [v.fps for v in verdicts if v.fps is not None]
    rss = [r for r, _ in samples] or [0]
    pss = [p for _, p in samples if p is not None]
    return {
        "chromium": chromium,
        "pages": pages,
        "artifacts": len(seeds),
        "wall_s": round(wall_s, 2),
        "per_min": round(len(seeds) / wall_s * 60, 1),
        "passed": sum(v.passed for v in verdicts),
        "failed_checks": dict(Counter(name for v in verdicts for name in v.failed)),
        "fps_failures": sorted(v.fps for v in verdicts if "fps" in v.failed and v.fps is not None),
        "s_per_artifact": round(statistics.median(t for t, _ in results), 2),
        "slot_use": round(sum(t for t, _ in results) / (wall_s * pages), 3),
        "cpu_s_per_artifact": round(cpu_s / len(seeds), 2),
        "fps_median": statistics.median(fps) if fps else 0.0,
        "fps_min": min(fps, default=0.0),
        "peak_rss_mib": round(max(rss) / MIB, 1),
        "end_rss_mib": round(rss[-1] / MIB, 1),
        "peak_pss_mib": round(max(pss) / MIB, 1) if pss else None,
        "warmup_s": round(warmup_s, 2),
        "not_judged": len(results) - len(verdicts),
        "other_failures": [  # fps is listed apart
            f"{c.name}: {c.detail}"
            for v in verdicts
            for c in v.checks
            if not c.passed and c.name != "fps"
        ][:5],
        "browser_errors": [v for _, v in [*results, (0, warm)] if isinstance(v, str)][:10],
        "log_alerts": [f"{r.levelname} {r.name}: {r.getMessage()}" for r in alerts.buffer][:10],
    }


def checkout(ref: str) -> tempfile.TemporaryDirectory[str]:
    """The tree of git revision ``ref``, extracted into a temporary directory."""
    tree = tempfile.TemporaryDirectory(prefix="verify-before-")
    archive = subprocess.run(["git", "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree.name], input=archive, check=True)
    return tree


def measure_before(tree: str, *, chromium: str, pages: int, seed: int, n: int) -> dict[str, Any]:
    """One repetition of the old revision's own bench, run from its tree in a subprocess."""
    args = [sys.executable, "-m", "ops.bench.verify_throughput", "--json", "--repeat", "1"]
    args += ["--artifacts", str(n), "--pages", str(pages), "--chromium", chromium]
    args += ["--seed", str(seed)]
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(args, cwd=tree, env=env, check=True, capture_output=True, text=True)
    rep: dict[str, Any] = json.loads(done.stdout)["repetitions"][0]
    return {key: rep.get(key, 0) for key in (*MEDIAN_KEYS, "failed_checks")} | {
        "browser_errors": rep.get("browser_errors", [])
    }


def medians(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median across repetitions (PSS only if all had it); failures summed."""
    out: dict[str, Any] = {}
    for key in MEDIAN_KEYS:
        values = [r[key] for r in reps if r[key] is not None]
        out[key] = round(statistics.median(values), 3) if len(values) == len(reps) else None
    out["failed_checks"] = dict(sum((Counter(r["failed_checks"]) for r in reps), Counter()))
    out["browser_errors"] = sum(len(r["browser_errors"]) for r in reps)
    out["reps"] = len(reps)
    return out


#: Header of the Markdown table that repetitions and medians are printed in.
HEADER = (
    "| chromium | pages | wall s | art/min | vs {base} | passed | not judged "
    "| s/art | slots busy | CPU s/art | fps med/min "
    "| peak RSS-sum / PSS-sum MiB | end RSS-sum | warm-up s | <= {target:g} s |\n|" + " --- |" * 15
)


def row(build: str, label: str, f: dict[str, Any], *, n: int, target_s: float) -> str:
    """One repetition, or the medians of a setting (with its throughput ratio), as a row."""
    pss = f"{f['peak_pss_mib']:.0f}" if f["peak_pss_mib"] is not None else "n/a"
    ratio = f"{f['throughput_ratio']:.2f}x" if "throughput_ratio" in f else ""
    return (
        f"| {build} | {label} | {f['wall_s']:.1f} | {f['per_min']:.1f} | {ratio} "
        f"| {f['passed']:g}/{n} | {f['not_judged']:g} "
        f"| {f['s_per_artifact']:.2f} "
        f"| {f['slot_use']:.0%} | {f['cpu_s_per_artifact']:.2f} "
        f"| {f['fps_median']:.1f}/{f['fps_min']:.1f} "
        f"| {f['peak_rss_mib']:.0f} / {pss} | {f['end_rss_mib']:.0f} | {f['warmup_s']:.1f} "
        f"| {'yes' if f['wall_s'] <= target_s else 'no'} |"
    )


def parse_chromium(_ctx: object, _param: object, value: str | None) -> list[str] | None:
    """``PATH[,PATH...]`` as a list of existing binaries (None: the verifier's default)."""
    if value is None:
        return None
    paths = [part.strip() for part in value.split(",") if part.strip()]
    missing = [path for path in paths if not os.path.exists(path)]
    if not paths or missing:
        raise click.BadParameter(f"no such binary: {', '.join(missing) or value!r}")
    return paths


def build_name(chromium: str) -> str:
    """A binary's short name for the table: its file name."""
    return os.path.basename(chromium)


def setting_name(setting: tuple[str, int]) -> str:
    """A (binary, pages) setting as ``build/pages``, as the ratio column names its base."""
    chromium, pages = setting
    return f"{build_name(chromium)}/{pages}"


def parse_pages(_ctx: object, _param: object, value: str) -> list[int]:
    """``1,2,3,4`` as a list of positive ints."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise click.BadParameter("a comma-separated list of integers >= 1, e.g. 1,2,3,4")
    return [int(part) for part in parts]


@click.command(context_settings={"show_default": True})
@click.option("--artifacts", type=click.IntRange(min=1), default=100, help="Artifacts per run.")
@click.option(
    "--pages",
    default="1,2,3,4",
    callback=parse_pages,
    help="Browser(max_pages=k) settings, comma-separated.",
)
@click.option(
    "--chromium",
    "chromiums",
    callback=parse_chromium,
    default=None,
    help="Chromium binaries to compare, comma-separated  "
    "[default: the verifier's, chromium-headless-shell when installed].",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    help="Repetitions of each setting, a fresh Browser every time.",
)
@click.option("--seed", type=int, default=1, help="First seed; seeds seed..seed+N-1.")
@click.option("--min-fps", type=float, default=30.0, help="judge(min_fps=...).")
@click.option(
    "--before",
    "before_ref",
    default=None,
    help="Also measure the verifier of this git revision (e.g. HEAD), alternating with this one.",
)
@click.option("--display", type=click.Choice(get_args(DisplayMode)), default="headless")
@click.option("--interval-ms", type=click.IntRange(min=10), default=250, help="Memory sampling.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def main(
    artifacts: int,
    pages: list[int],
    chromiums: list[str] | None,
    repeat: int,
    seed: int,
    min_fps: float,
    before_ref: str | None,
    display: DisplayMode,
    interval_ms: int,
    as_json: bool,
) -> None:
    """Measure verifier throughput per page concurrency against max_pages=1."""
    chromiums = chromiums or [default_executable(display)]
    settings = [(c, k) for c in chromiums for k in pages]
    out = sys.stderr if as_json else sys.stdout
    alerts = BufferingHandler(capacity=10_000)  # verifier warnings: relaunches, lost root pid
    alerts.setLevel(logging.WARNING)
    logging.getLogger("verifier").addHandler(alerts)
    seeds = list(range(seed, seed + artifacts))
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{artifacts} artifacts, pages {pages}, {', '.join(chromiums)}, {repeat} "
        f"repetition(s), {display}, {os.cpu_count()} CPUs, load average {load_start}",
        file=out,
        flush=True,
    )
    target_s = TARGET_S * artifacts / TARGET_ARTIFACTS
    base = (chromiums[0], 1 if 1 in pages else pages[0])
    print(HEADER.format(base=setting_name(base), target=target_s), file=out)
    reps: dict[tuple[str, int], list[dict[str, Any]]] = {s: [] for s in settings}
    before_reps: dict[tuple[str, int], list[dict[str, Any]]] = {s: [] for s in settings}
    before_tree = checkout(before_ref) if before_ref else None
    interrupted = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C
    try:
        for i in range(1, repeat + 1):
            for c, k in settings:  # settings alternate, so drift in the load hits them alike
                if before_tree is not None:
                    b = measure_before(
                        before_tree.name, chromium=c, pages=k, seed=seed, n=artifacts
                    )
                    before_reps[c, k].append(b)
                    label = f"{k} #{i} before"
                    print(row(build_name(c), label, b, n=artifacts, target_s=target_s), file=out)
                f = measure(
                    chromium=c,
                    pages=k,
                    seeds=seeds,
                    display=display,
                    min_fps=min_fps,
                    interval_s=interval_ms / 1000,
                    alerts=alerts,
                )
                reps[c, k].append(f)
                print(
                    row(build_name(c), f"{k} #{i}", f, n=artifacts, target_s=target_s),
                    file=out,
                    flush=True,
                )
                if f["failed_checks"]:
                    print(
                        f"    failed checks: {f['failed_checks']}, fps of fps failures: "
                        f"{f['fps_failures'][:20]}",
                        file=out,
                    )
                for note in (*f["other_failures"], *f["browser_errors"], *f["log_alerts"]):
                    print(f"    {note}", file=out)
    except KeyboardInterrupt:
        print("interrupted; Chromium closed; summary of the finished repetitions", file=out)
        interrupted, reps = True, {k: r for k, r in reps.items() if r}
        if not reps:
            sys.exit(130)
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    summary = {s: medians(r) for s, r in reps.items()}
    if base not in summary:
        base = next(iter(summary))
    for m in summary.values():
        m["throughput_ratio"] = round(m["per_min"] / summary[base]["per_min"], 2)
        m["meets_target"] = m["wall_s"] <= target_s
    if as_json:
        print(
            json.dumps(
                {
                    "artifacts": artifacts,
                    "repeat": repeat,
                    "display": display,
                    "min_fps": min_fps,
                    "before": before_ref,
                    "before_summary": [
                        {"chromium": c, "pages": k, **medians(r)}
                        for (c, k), r in before_reps.items()
                        if r
                    ],
                    "baseline": setting_name(base),
                    "target_s": target_s,
                    "load_start": load_start,
                    "load_end": load_end,
                    "summary": [{"chromium": c, "pages": k, **m} for (c, k), m in summary.items()],
                    "repetitions": [f for r in reps.values() for f in r],
                },
                indent=2,
            )
        )
        sys.exit(130 if interrupted else 0)
    print(
        f"\nmedians of the repetitions (reps), load average at end {load_end}; RSS-sum counts "
        "memory shared between Chromium's processes once per process, PSS-sum splits it"
    )
    print(HEADER.format(base=setting_name(base), target=target_s))
    for (c, k), r in before_reps.items():
        if r:
            m = medians(r)
            label = f"{k} (x{m['reps']}) before {before_ref}"
            print(row(build_name(c), label, m, n=artifacts, target_s=target_s))
    for (c, k), m in summary.items():
        print(row(build_name(c), f"{k} (x{m['reps']})", m, n=artifacts, target_s=target_s))
    for (c, k), m in summary.items():
        if m["failed_checks"] or m["browser_errors"]:
            print(
                f"{build_name(c)} pages={k}, all repetitions: failed checks "
                f"{m['failed_checks']}, browser errors {m['browser_errors']}"
            )
    sys.exit(130 if interrupted else 0)


if __name__ == "__main__":
    main()
