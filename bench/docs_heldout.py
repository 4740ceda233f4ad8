"""A held-out library checked through the CLI (issue 30): files on topics the project's test
set does not touch (bicycles, sourdough, bees, trains, houseplants, a tenancy, a Python
module), in other formats and layouts, with distractors on near topics, and questions
written apart from the files in other words. Each question goes through `wren docs search
--json` (recall@5: a passage of the right file holding the answer's words among the first
five) and, unless --no-ask, `wren ask --json --docs` with the starter model (cite rate: a
`citation` event for the right file) and precision (the share of citations naming the right
file), "before" counting only citations by [n] or quote, "after" those matched by meaning too
(engine/library/matched.py). Everything lives in a fresh WREN_HOME; prints JSON.

    .venv/bin/python bench/docs_heldout.py [--no-ask] [--limit N] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cite_rates import rates  # noqa: E402
from cpuinfo import cpu  # noqa: E402

from tests.engine.docs.makers import write_docx, write_pdf  # noqa: E402

WREN = [sys.executable, "-m", "wren.engine.terminal"]

# (question, file, words the answer holds) — questions phrased unlike the files
QUESTIONS = [
    ("How tight should the bolts that hold the stem be?", "bike_service.html", "5 newton metres"),
    ("My chain keeps jumping off the small cog, what should I adjust?", "bike_service.html", "high limit screw"),
    ("How often do the brake pads need to be looked at?", "bike_service.html", "every 500 kilometres"),
    ("What should the water temperature be when mixing the dough?", "sourdough.txt", "26 degrees"),
    ("How long does the levain need before it is ready?", "sourdough.txt", "six to eight hours"),
    ("At what oven heat is the loaf baked with the lid on?", "sourdough.txt", "250 degrees"),
    ("When is it too cold to open a beehive?", "beekeeping.pdf", "below 14 degrees"),
    ("How many frames of brood does a colony need before splitting?", "beekeeping.pdf", "eight frames"),
    ("What is the treatment for varroa mites in winter?", "beekeeping.pdf", "oxalic acid"),
    ("Which platform does the 07:42 departure to Eastwick use?", "timetable.csv", "Platform 4"),
    ("When does the last train to Millbrook leave?", "timetable.csv", "23:18"),
    ("How often should a fiddle leaf fig get water?", "houseplants.md", "every ten days"),
    ("Which houseplant is poisonous to cats?", "houseplants.md", "peace lily"),
    ("How much notice must the tenant give before leaving?", "tenancy.docx", "two months"),
    ("Who pays for fixing the boiler?", "tenancy.docx", "the landlord"),
    ("What happens to the deposit when the lease ends?", "tenancy.docx", "within 14 days"),
    ("What does the retry helper do after the final attempt fails?", "retry.py", "raises RetryExhausted"),
    ("How long does the retry helper wait the first time?", "retry.py", "0.5 seconds"),
]


def make_library(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "bike_service.html").write_text(
        "<html><head><title>Bike care</title></head><body><nav><a href='/'>Home</a> | <a href='/shop'>Shop</a></nav>"
        "<h1>Servicing your bicycle</h1><h2>Stem and handlebars</h2><p>Tighten the stem bolts to 5 newton metres "
        "in turn, a little at a time, so the faceplate gap stays even.</p><h2>Gears</h2><p>If the chain falls off "
        "the smallest sprocket, turn the high limit screw a quarter turn clockwise and test again.</p>"
        "<h2>Brakes</h2><p>Inspect the brake pads every 500 kilometres and replace them when the grooves are "
        "gone.</p><footer>Copyright Bike care shop. Subscribe to our newsletter.</footer></body></html>")
    (folder / "sourdough.txt").write_text(
        "Country sourdough\n\nThe levain\nFeed the starter and leave the levain for six to eight hours at room "
        "temperature, until it has doubled and smells sweet.\n\nMixing\nUse water at 26 degrees so the dough "
        "ends near 25. Add the salt after a 40 minute rest.\n\nBaking\nBake in a covered pot at 250 degrees for "
        "20 minutes, then uncover and bake 25 minutes more at 230.\n")
    write_pdf(folder / "beekeeping.pdf", [
        "Inspections. Do not open the hive below 14 degrees or in rain: the brood chills quickly.",
        "Swarm control. Split a colony once it has eight frames of brood and queen cells appear.",
        "Mites. In the broodless weeks of winter, treat varroa with oxalic acid by dribbling or vapour."])
    with (folder / "timetable.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["departs", "destination", "platform", "calls at"])
        for row in (["07:42", "Eastwick", "Platform 4", "Ashford, Linton"], ["08:15", "Millbrook", "Platform 2",
                    "Ashford"], ["17:30", "Eastwick", "Platform 1", "Linton"], ["23:18", "Millbrook", "Platform 3",
                    "all stations (last train)"]):
            w.writerow(row)
    (folder / "houseplants.md").write_text(
        "# Houseplants\n\n## Fiddle leaf fig\n\nWater every ten days, when the top 5 cm of soil are dry. Bright, "
        "indirect light.\n\n## Pets\n\nKeep the peace lily away from cats: every part of it is toxic to them.\n\n"
        "## Repotting\n\nRepot in spring, one size up.\n")
    write_docx(folder / "tenancy.docx", [
        ("Heading1", "Tenancy agreement"), ("Heading2", "Ending the tenancy"),
        ("", "The tenant may end the tenancy by giving two months' notice in writing."),
        ("Heading2", "Repairs"), ("", "Repairs to the boiler, wiring and roof are the responsibility of the landlord."),
        ("Heading2", "Deposit"), ("", "The deposit is returned within 14 days of the end of the tenancy, less "
                                      "agreed deductions.")])
    (folder / "retry.py").write_text(
        '"""Retrying calls that fail for a while."""\n\nimport time\n\n\nclass RetryExhausted(Exception):\n'
        '    """Every attempt failed."""\n\n\ndef retry(call, attempts=4, first_wait=0.5):\n'
        '    """Call `call` up to `attempts` times, waiting 0.5 seconds first and twice as long after each\n'
        '    failure; when the last attempt fails too, raises RetryExhausted from its error."""\n'
        '    wait = first_wait\n    for n in range(attempts):\n        try:\n            return call()\n'
        '        except Exception as exc:\n            if n == attempts - 1:\n'
        '                raise RetryExhausted() from exc\n            time.sleep(wait)\n            wait *= 2\n')
    # distractors on near topics
    (folder / "car_service.md").write_text("# Car service\n\nTighten the wheel nuts to 110 newton metres. Check "
                                           "the brake fluid every 20,000 kilometres.\n")
    (folder / "bread_faq.txt").write_text("Yeast bread\n\nProve a yeasted loaf for one hour. Bake at 220 degrees "
                                          "for 35 minutes. Water should be lukewarm.\n")
    (folder / "garden_pests.md").write_text("# Garden pests\n\nAphids on roses: spray soapy water. Slugs: beer "
                                            "traps. Wasps nest in sheds in summer.\n")


def cli(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "WREN_HOME": str(home)}
    return subprocess.run([*WREN, *args], env=env, capture_output=True, text=True, timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-ask", action="store_true")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wren-heldout-"))
    home, folder = tmp / "home", tmp / "library"
    make_library(folder)
    report: dict = {"machine": cpu()}
    added = cli(home, "docs", "add", str(folder))
    if added.returncode != 0:
        raise SystemExit(f"wren docs add failed: {added.stderr}")
    rows = []
    for q, name, has in QUESTIONS[:args.limit]:
        found = cli(home, "docs", "search", q, "--json", "--limit", "5")
        passages = [json.loads(line) for line in found.stdout.splitlines() if line.strip()]
        row = {"q": q, "file": name, "recall_at_5": any(Path(p["path"]).name == name and has in p["text"]
                                                        for p in passages)}
        if not args.no_ask:
            began = time.perf_counter()
            asked = cli(home, "ask", "--json", "--docs", "--temperature", "0", "--max-tokens", str(args.max_tokens), q)
            events = [json.loads(line) for line in asked.stdout.splitlines() if line.startswith("{")]
            cited = [Path(e.get("path", "")).name for e in events if e.get("type") == "citation"]
            row.update(cited_files=cited, cited_by=[e.get("cited_by") for e in events if e.get("type") == "citation"],
                       cites_file=name in cited, seconds=round(time.perf_counter() - began, 1),
                       answer="".join(e.get("text", "") for e in events if e.get("type") == "delta"),
                       error=asked.stderr.strip()[-300:] if asked.returncode else None)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    n = len(rows)
    report.update(files=sorted(p.name for p in folder.iterdir()), questions=n,
                  recall_at_5=round(sum(r["recall_at_5"] for r in rows) / n, 3))
    if not args.no_ask:
        report["cites_file_rate"] = round(sum(r["cites_file"] for r in rows) / n, 3)
        report["before"] = rates(rows, lambda r: [f for f, by in zip(r["cited_files"], r["cited_by"]) if by != "matched"])
        report["after"] = rates(rows, lambda r: r["cited_files"])
    report.update(rows=rows, machine_after=cpu().get("load_average_1_5_15"))
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
