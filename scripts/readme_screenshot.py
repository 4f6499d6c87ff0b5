"""Re-renders the report of a committed H200 run and saves its roofline section as the README's screenshot.

    PYTHONPATH=src python3 scripts/readme_screenshot.py [--run tests/data/runs/h200-qwen2-1.5b-slim]
        [--out docs/images/report-roofline.png]

Needs playwright and a Chromium (the test dependencies install Debian's); the run is copied, never changed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIP = """() => {
  const heading = document.getElementById('roofline');
  let block = heading.nextElementSibling;
  while (block && !block.querySelector('img')) block = block.nextElementSibling;
  const figure = block.querySelector('img').getBoundingClientRect();
  return {top: heading.getBoundingClientRect().top + scrollY - 12, bottom: figure.bottom + scrollY + 12};
}"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "tests/data/runs/h200-qwen2-1.5b-slim")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/report-roofline.png")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / args.run.name
        shutil.copytree(args.run, run, ignore=shutil.ignore_patterns("report"))
        subprocess.run([sys.executable, "-m", "kernelscope", "-q", "report", str(run), "--lang", "en"], check=True,
                       stdout=subprocess.DEVNULL)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 1000}, device_scale_factor=1)
            page.goto((run / "report" / "report.html").as_uri())
            box = page.evaluate(CLIP)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True,
                            clip={"x": 0, "y": box["top"], "width": 1100, "height": box["bottom"] - box["top"]})
            browser.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
