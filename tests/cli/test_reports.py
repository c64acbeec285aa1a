"""Every command's run folder has a report page (index.html) that draws every figure in a real browser
(headless Chromium) without a JavaScript error, offline and after the folder is moved."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.cli.conftest import RUNS
from tests.helpers import run_cli

pytestmark = pytest.mark.slow  # the heavy tier: every command run, then its page opened in Chromium

REPORTED = [n for n in RUNS if n != "cache"]  # a store has no report page


@pytest.fixture(scope="module")
def runs(cli_runs):
    return {name: folder for name, (folder, _) in cli_runs.items()}


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get when it can)")
    return exe


def render(page) -> str:
    """The DOM of `page` after its scripts ran, from headless Chromium."""
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
                        "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "</html>" in r.stdout, r.stderr[-2000:]
    return r.stdout


def check_page(dom: str) -> list[str]:
    """Problems of a rendered report: a JS error, a figure without a drawn plot, no figures."""
    problems = []
    errs = re.search(r'<pre id="js-errors">(.*?)</pre>', dom, re.S)
    if errs is None or errs.group(1).strip():
        problems.append(f"JavaScript errors: {errs.group(1).strip() if errs else 'the error sink is missing'}")
    figures = re.split(r"<div class=\"figure\" data-figure=", dom)[1:]
    if not figures:
        problems.append("no figures")
    for f in figures:
        name = f.split('"')[1]
        drawn = 'class="main-svg"' in f and re.search(r'class="(trace|heatmaplayer|barlayer|scatterlayer)', f)
        data = re.search(r'class="(point|hm|js-line|trace bars|heatmap)', f) or "<image" in f
        if not (drawn and data):
            problems.append(f"figure {name} did not draw a plot with data")
    return problems


@pytest.mark.parametrize("name", REPORTED)
def test_every_command_writes_a_report_that_draws_in_a_browser(runs, name):
    d = runs[name]
    index = d / "index.html"
    assert index.is_file() and (d / "plotly.min.js").is_file()
    html = index.read_text()
    assert "interp " + RUNS[name][0] in html and "Provenance" in html and "<table" in html
    assert 'src="plotly.min.js"' in html and "cdn.plot.ly" not in html  # offline: plotly.js from the folder
    dom = render(index)
    assert check_page(dom) == []
    n = len(re.findall(r'data-figure="', html))
    assert n == len([f for f in d.glob("*.html") if f.name != "index.html"])  # every figure page is on it


def test_a_moved_folder_still_renders_and_report_rebuilds_it(runs, tmp_path, capsys):
    moved = tmp_path / "elsewhere" / "ablate"
    shutil.copytree(runs["ablate"], moved)
    assert check_page(render(moved / "index.html")) == []
    (moved / "index.html").unlink()
    (moved / "metric_by_condition.html").unlink()
    code, _, err = run_cli(["report", str(moved)], capsys)
    assert code == 0, err
    assert (moved / "metric_by_condition.html").is_file() and check_page(render(moved / "index.html")) == []
    code, _, err = run_cli(["report", str(tmp_path)], capsys)
    assert code == 2 and "holds no interp result file" in err
    # a glob over a parent folder (`interp report runs/*/`): folders without a result are skipped with a note
    code, _, err = run_cli(["report", str(tmp_path / "elsewhere"), str(moved), str(tmp_path / "nope")], capsys)
    flat = " ".join(err.split())
    assert code == 0, err
    assert f"note: skipped {tmp_path / 'elsewhere'} holds no interp result file" in flat
    assert f"note: skipped {tmp_path / 'nope'}: no such run folder" in flat and str(moved / "index.html") in flat


def test_the_browser_check_catches_a_broken_page(runs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(runs["ablate"], broken)
    page = (broken / "index.html").read_text()
    (broken / "index.html").write_text(page.replace("</body>", "<script>undefinedFunction();</script></body>"))
    assert any("JavaScript errors" in p for p in check_page(render(broken / "index.html")))
    (broken / "plotly.min.js").unlink()  # no plotly.js: nothing draws
    assert any("did not draw" in p for p in check_page(render(broken / "index.html")))


def test_figure_functions_take_result_objects_or_their_dicts():
    from interp.figures import experiments as plotting
    from interp.errors import InvalidInputError

    d = {"model": "m", "threshold": 0.1, "sweep": [{"threshold": 0.05, "n_heads": 3}, {"threshold": 0.2, "n_heads": 1}]}

    class Result:
        def to_dict(self):
            return d

    assert plotting.threshold_sweep(Result()).to_json() == plotting.threshold_sweep(d).to_json()
    with pytest.raises(InvalidInputError, match="result object or its dict"):
        plotting.threshold_sweep([1, 2])
