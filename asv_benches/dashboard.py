"""Record asv history for the last commits of a branch, publish the dashboard, check it.

Three commands, run from anywhere in the repository:

``record``
    For each of the last ``--commits`` first-parent commits of ``--branch`` (oldest
    first): check the commit out in one build clone, build its Cython kernels in place,
    and run the current benchmark suite against that code with
    ``asv run --set-commit-hash`` in the Python that runs this script. Commits that
    already have results for ``--machine`` are skipped (``--force`` reruns them).
    Then ``asv publish``.
``publish``
    ``asv publish`` only; ``--offline`` also copies the pages' JavaScript and CSS
    (kept in ``asv_benches/dashboard_assets/``) next to ``index.html``, for a machine
    without the CDNs.
``check``
    Publish the recorded results into a temporary folder with local assets, serve it
    over HTTP, open it in headless Chromium, and fail unless the benchmark list and a
    history graph with data points render. Saves a screenshot of the graph.

The build clone is ``git clone --shared`` of this repository (no copy of its objects,
no worktree registered in it) that stays between runs: checking out the next commit
touches only the files that changed, so ``build_ext --inplace`` recompiles only the
extensions whose sources or headers changed; a change to ``setup.py`` rebuilds all.

>>> commit_label("0123456789abcdef0123")
'01234567'
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # dashboard_browser beside this file, also when loaded by path
from dashboard_browser import Browser, find_chromium, serve  # noqa: E402

REPO = HERE.parent
DEFAULT_WORK_DIR = HERE / "env" / "dashboard"
ASSET_DIR = "vendor"
ASSET_SOURCE = HERE / "dashboard_assets"

# The files asv's pages load from CDNs, by the URL's file name: the npm package that
# ships them and the file inside it. Copies of these files (all MIT-licensed) are kept in
# ASSET_SOURCE, so publishing offline needs no network.
ASSETS = {
    "jquery-3.3.1.min.js": ("jquery@3.3.1", "dist/jquery.min.js"),
    "jquery.flot.min.js": ("flot@0.8.3", "jquery.flot.js"),
    "jquery.flot.time.min.js": ("flot@0.8.3", "jquery.flot.time.js"),
    "jquery.flot.selection.min.js": ("flot@0.8.3", "jquery.flot.selection.js"),
    "jquery.flot.categories.min.js": ("flot@0.8.3", "jquery.flot.categories.js"),
    "jquery.flot.orderBars.js": ("flot-orderbars@1.0.0", "js/jquery.flot.orderBars.js"),
    "stupidtable.min.js": ("stupid-table-plugin@1.1.3", "stupidtable.min.js"),
    "md5.min.js": ("blueimp-md5@2.19.0", "js/md5.min.js"),
    "bootstrap.min.js": ("bootstrap@3.1.1", "dist/js/bootstrap.min.js"),
    "bootstrap.min.css": ("bootstrap@3.1.1", "dist/css/bootstrap.min.css"),
}
CDN_TAG = re.compile(r"""<(script|link)\b[^>]*?(?:src|href)="(https://[^"]+)"[^>]*>""")

HEADERS = "dyntile/cpu/include/"


def commit_label(sha: str) -> str:
    """The commit prefix asv names result files with.

    >>> commit_label("ca9fd04e" + "0" * 32)
    'ca9fd04e'
    """
    return sha[:8]


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def asv(*args: str, env: dict[str, str] | None = None, check: bool = True) -> int:
    """Run ``python -m asv ARGS`` in this folder (where asv.conf.json lies)."""
    cmd = [sys.executable, "-m", "asv", *args]
    print("+", " ".join(cmd), flush=True)
    status = subprocess.run(cmd, cwd=HERE, env=env).returncode
    if check and status != 0:
        raise SystemExit(f"dashboard: {' '.join(cmd)} exited with status {status}")
    return status


def last_commits(branch: str, count: int) -> list[str]:
    """The last ``count`` first-parent commits of ``branch``, oldest first."""
    out = git("rev-list", "--first-parent", f"-n{count}", branch)
    if not out:
        raise SystemExit(f"dashboard: branch {branch!r} has no commits")
    return out.split()[::-1]


def ensure_machine(machine: str | None) -> str:
    """The asv machine name, described once in ~/.asv-machine.json."""
    path = Path(os.environ.get("ASV_MACHINE_FILE", Path.home() / ".asv-machine.json"))
    known = json.loads(path.read_text()) if path.exists() else {}
    if machine is None:
        machine = socket.gethostname()
    if machine not in known:
        asv("machine", "--machine", machine, "--yes")
    return machine


def recorded(machine: str, sha: str) -> bool:
    return bool(glob.glob(str(HERE / "results" / machine / f"{commit_label(sha)}-*.json")))


def prepare_clone(work_dir: Path) -> Path:
    """The build clone: shares this repository's objects, so any commit checks out."""
    src = work_dir / "src"
    if not (src / ".git").exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--shared", "--no-checkout", str(REPO), str(src)], check=True
        )
    return src


def checkout_and_build(src: Path, sha: str, jobs: int) -> float:
    """Check ``sha`` out in the build clone and build its extensions in place.

    Returns the build's wall time in seconds; raises ``CalledProcessError`` when the
    build fails.
    """
    previous = git("rev-parse", "HEAD", cwd=src) if (src / "setup.py").exists() else None
    git("checkout", "--quiet", "--force", "--detach", sha, cwd=src)
    force = previous is None
    if previous is not None:
        changed = git("diff", "--name-only", previous, sha, cwd=src).splitlines()
        # setup.py lists each extension's headers as its depends (setuptools then rebuilds
        # the ones that include a changed header); one that does not, or a changed
        # setup.py (flags, extensions), rebuilds everything
        declares_depends = "depends=" in (src / "setup.py").read_text()
        force = "setup.py" in changed or (
            not declares_depends and any(path.startswith(HEADERS) for path in changed)
        )
    cmd = [sys.executable, "setup.py", "build_ext", "--inplace", f"-j{jobs}"] + (["--force"] if force else [])
    start = time.perf_counter()
    subprocess.run(cmd, cwd=src, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def check_shadowing(src: Path) -> None:
    """Fail unless ``import dyntile`` with the clone on PYTHONPATH imports the clone."""
    env = dict(os.environ, PYTHONPATH=str(src))
    code = "import dyntile, loaders; print(dyntile.__file__); print(loaders.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=src.parent, check=True, capture_output=True, text=True
    ).stdout.split()
    if not all(Path(p).resolve().is_relative_to(src.resolve()) for p in out):
        raise SystemExit(f"dashboard: the build clone does not shadow the installed dyntile: {out}")


def record(args: argparse.Namespace) -> None:
    machine = ensure_machine(args.machine)
    commits = last_commits(args.branch, args.commits)
    src = prepare_clone(Path(args.work_dir))
    env_spec = f"existing:{sys.executable}"
    todo = [sha for sha in commits if args.force or not recorded(machine, sha)]
    print(f"dashboard: {len(commits)} commits of {args.branch}, {len(todo)} to record on {machine}")
    timings = []
    for i, sha in enumerate(todo, 1):
        subject = git("log", "-1", "--format=%s", sha)
        print(f"\n== [{i}/{len(todo)}] {commit_label(sha)} {subject}", flush=True)
        try:
            build_s = checkout_and_build(src, sha, args.jobs)
        except subprocess.CalledProcessError:
            print(f"dashboard: {commit_label(sha)} does not build; no results for it", file=sys.stderr)
            continue
        if i == 1:
            check_shadowing(src)
        # asv drops PYTHONPATH from the benchmark processes but passes ASV_PYTHONPATH as it
        run_env = dict(os.environ, ASV_PYTHONPATH=str(src))
        cmd = ["run", "--set-commit-hash", sha, "-E", env_spec, "--machine", machine]
        cmd += ["--show-stderr"] if args.show_stderr else []
        cmd += ["--quick"] if args.quick else []
        cmd += ["--bench", args.bench] if args.bench else []
        start = time.perf_counter()
        asv(*cmd, *args.asv_args, env=run_env, check=False)
        run_s = time.perf_counter() - start
        timings.append((commit_label(sha), build_s, run_s))
        print(
            f"dashboard: {commit_label(sha)} built in {build_s:.0f} s, benchmarked in {run_s:.0f} s",
            flush=True,
        )
    if timings:
        print("\ndashboard: commit, build s, benchmark s")
        for label, build_s, run_s in timings:
            print(f"  {label} {build_s:7.1f} {run_s:7.1f}")
    if not args.no_publish:
        publish(args)


def localize_assets(html_dir: Path) -> None:
    """Point the published pages at local copies of their CDN scripts and styles."""
    (html_dir / ASSET_DIR).mkdir(exist_ok=True)
    index = html_dir / "index.html"
    text = index.read_text()

    def local(match: re.Match[str]) -> str:
        url = match.group(2)
        name = url.rsplit("/", 1)[1]
        if name not in ASSETS:
            raise SystemExit(f"dashboard: index.html loads {url}, which has no local copy in ASSETS")
        shutil.copyfile(ASSET_SOURCE / name, html_dir / ASSET_DIR / name)
        tag = match.group(0).replace(url, f"{ASSET_DIR}/{name}")
        return re.sub(r'\s(integrity|crossorigin|referrerpolicy)="[^"]*"', "", tag)

    index.write_text(CDN_TAG.sub(local, text))


def config_for(results_dir: Path, folder: Path) -> Path:
    """A copy of asv.conf.json in ``folder`` that reads results from ``results_dir``."""
    from asv.util import load_json  # reads the comments asv.conf.json holds

    conf = load_json(str(HERE / "asv.conf.json"), js_comments=True)
    # a checkout without a local main (CI's detached clones) draws the history of HEAD
    has_main = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "main"], cwd=REPO, capture_output=True
    )
    conf["branches"] = conf["branches"] if has_main.returncode == 0 else ["HEAD"]
    conf.update(
        repo=str(REPO),
        results_dir=str(results_dir.resolve()),
        benchmark_dir=str(HERE / conf["benchmark_dir"]),
        env_dir=str(HERE / conf["env_dir"]),
    )
    path = folder / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def publish(args: argparse.Namespace) -> Path:
    html_dir = Path(args.html_dir) if args.html_dir else HERE / "html"
    with tempfile.TemporaryDirectory(prefix="dashboard-conf-") as tmp:
        results = getattr(args, "results_dir", None)
        conf = ["--config", str(config_for(Path(results), Path(tmp)))] if results else []
        asv("publish", "--html-dir", str(html_dir), *conf)
    if args.offline:
        localize_assets(html_dir)
    print(f"dashboard: {html_dir / 'index.html'}; view it with `asv preview` (from {HERE})")
    return html_dir


# The summary page: one box per benchmark, each with its small history plot.
SUMMARY_JS = "document.querySelectorAll('a.benchmark-container').length"
# A benchmark's page: the points flot drew, per line, counting only measured values.
GRAPH_JS = """(() => {
  const plot = window.$ && $('#main-graph').data('plot');
  if (!plot) return null;
  const series = plot.getData();
  const xs = new Set();
  let points = 0;
  for (const s of series) for (const p of s.data) if (p && p[1] !== null) { points++; xs.add(p[0]); }
  return {lines: series.length, points: points, commits: xs.size};
})()"""


def first_with_history(html_dir: Path, names: list[str]) -> str:
    """The first benchmark whose published graph has values at two commits or more
    (the first benchmark when none has)."""
    for name in names:
        for graph in sorted(html_dir.glob(f"graphs/**/{name}.json")):
            # a point is [commit, value], its value a list for parametrized benchmarks
            values = [
                point[1] if isinstance(point[1], list) else [point[1]]
                for point in json.loads(graph.read_text())
            ]
            if sum(any(v is not None for v in vs) for vs in values) >= 2:
                return name
    return names[0]


def check(args: argparse.Namespace) -> dict:
    """Publish, open in headless Chromium, verify the list and one graph; a summary dict."""
    chromium = args.chromium or find_chromium()
    if chromium is None:
        raise SystemExit("dashboard: no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="dashboard-html-") as tmp:
        results_dir = args.results_dir or HERE / "results"
        publish_args = argparse.Namespace(
            html_dir=tmp, offline=True, work_dir=args.work_dir, results_dir=results_dir
        )
        html_dir = publish(publish_args)
        index = json.loads((html_dir / "index.json").read_text())
        names = sorted(index["benchmarks"])
        if not names:
            raise AssertionError("dashboard check: the published index lists no benchmarks")
        benchmark = args.benchmark or first_with_history(html_dir, names)
        start = time.perf_counter()
        with serve(html_dir) as base:
            browser = Browser(chromium)
            try:
                browser.call("Page.enable")
                browser.goto(base + "index.html")
                listed = browser.wait_for(SUMMARY_JS, "the benchmark list")
                browser.goto(f"{base}index.html#{benchmark}")
                graph = browser.wait_for(GRAPH_JS, f"the graph of {benchmark}")
                time.sleep(0.5)  # let flot finish drawing before the screenshot
                browser.screenshot(Path(args.screenshot))
            finally:
                browser.close()
        summary = {
            "benchmarks_listed": listed,
            "published": len(names),
            "benchmark": benchmark,
            **graph,
            "browser_s": round(time.perf_counter() - start, 1),
            "screenshot": str(args.screenshot),
        }
    print("dashboard check:", json.dumps(summary))
    if listed != len(names):
        raise AssertionError(f"dashboard check: the page lists {listed} benchmarks, index.json {len(names)}")
    if graph["points"] < 2 or graph["commits"] < 2:
        raise AssertionError(f"dashboard check: the graph of {benchmark} has no history: {graph}")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--work-dir", default=str(DEFAULT_WORK_DIR), help="build clone (default: %(default)s)"
    )

    rec = sub.add_parser("record", parents=[common], help="benchmark the last commits, then publish")
    rec.add_argument("--commits", type=int, default=20, help="how many first-parent commits (default 20)")
    rec.add_argument("--branch", default="main")
    rec.add_argument("--bench", "-b", help="benchmarks to run (regex, as asv run -b); default: all")
    rec.add_argument("--quick", action="store_true", help="one sample per benchmark (asv run --quick)")
    rec.add_argument("--machine", help="asv machine name (default: this host's name)")
    rec.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    rec.add_argument("--force", action="store_true", help="rerun commits that already have results")
    rec.add_argument("--show-stderr", action="store_true")
    rec.add_argument("--no-publish", action="store_true")
    rec.add_argument("--html-dir")
    rec.add_argument("--offline", action="store_true", help="publish with local copies of the CDN assets")
    rec.add_argument("asv_args", nargs="*", help="after --: more `asv run` arguments")
    rec.set_defaults(func=record)

    pub = sub.add_parser("publish", parents=[common], help="asv publish (and local assets)")
    pub.add_argument("--html-dir")
    pub.add_argument("--offline", action="store_true", help="copy the CDN assets next to index.html")
    pub.add_argument("--results-dir", help="asv results to publish (default: results/ beside asv.conf.json)")
    pub.set_defaults(func=publish)

    chk = sub.add_parser("check", parents=[common], help="open the published dashboard in headless Chromium")
    chk.add_argument("--screenshot", default=str(HERE / "html" / "dashboard-check.png"))
    chk.add_argument("--chromium", help="the browser executable (default: chromium on PATH)")
    chk.add_argument("--benchmark", help="the benchmark whose graph to check (default: the first)")
    chk.add_argument("--results-dir", help="asv results to publish (default: results/ beside asv.conf.json)")
    chk.set_defaults(func=check)

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
