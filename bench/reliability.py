"""Reliability figures (issue 17): random SIGKILLs of Wren processes, and concurrent CLI and
window processes on one database.

(a) `--kills N` (default 30): `wren ask` (and, for title generation, a process driving the
    Engine the way the window does: an answer, then `generate_title`) is killed with SIGKILL
    at a random moment in one of four phases: the first-run import of the starter model,
    prefill of a long prompt, streaming, and title generation. After each kill:
      - PRAGMA integrity_check on the database, before and after the next start;
      - no process of that run outlives it by 2 s (every process started carries a tag in
        its environment; /proc is searched for it);
      - the next start (Engine.open) leaves no `.partial-…` folder in models/;
      - the question is kept whenever it had been committed (seen in the database before
        the kill), and no answer is left `streaming`.
(b) `--pairs N` (default 20): a "window" (a second engine process streaming an answer) and
    `wren ask` run at once on one database, the CLI started while the window's answer
    streams. Clobbered: the window's answer seen `interrupted` while its process lived, or
    either answer's stored text not the text its process streamed, or not `complete`.

Prints one JSON object. Slow (every run loads the starter model): about 15-25 minutes on
two cores. `--kills 0` or `--pairs 0` skips a part.

    .venv/bin/python bench/reliability.py [--kills 30] [--pairs 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
PHASES = ("import", "prefill", "streaming", "title")
LONG_QUESTION = "Summarise these notes. " + " ".join(
    f"Note {i}: the harbour master logged ship {i} arriving with cargo of timber and salt." for i in range(90)
)
STORY = "Write a long story about a lighthouse keeper and a storm."

# The window, emulated: one Engine in its own process, as the desktop app holds one.
WINDOW = r"""
import asyncio, json, sys
from wren.engine.api import Engine
from wren.engine.records import SendOptions
from wren.engine.events import Delta, Started

async def main():
    question, max_tokens, seed, then = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    engine = Engine.open()
    try:
        await engine.models.load(backend="torch-cpu")
        params = (await engine.settings.default_sampling()).with_(max_tokens=max_tokens, seed=seed, temperature=0.8)
        conv = await engine.conversations.create("window")
        parts, answer = [], None
        async for event in engine.chat.send(conv.id, question, SendOptions(sampling=params)):
            if isinstance(event, Started):
                answer = event.assistant_message_id
                print(json.dumps({"started": answer, "conversation": conv.id}), flush=True)
            elif isinstance(event, Delta):
                parts.append(event.text)
        print(json.dumps({"answer": answer, "text": "".join(parts)}), flush=True)
        if then == "title":
            print(json.dumps({"title_start": True}), flush=True)
            print(json.dumps({"title": await engine.chat.generate_title(conv.id)}), flush=True)
    finally:
        await engine.close()

asyncio.run(main())
"""

NEXT_START = r"""
import asyncio, json
from wren.engine.api import Engine

async def main():
    engine = Engine.open()
    print(json.dumps({"removed": list(engine.leftovers.removed), "bytes_freed": engine.leftovers.bytes_freed}))
    await engine.close()

asyncio.run(main())
"""


def _env(home: Path, tag: str) -> dict[str, str]:
    return dict(os.environ, WREN_HOME=str(home), PYTHONPATH=str(REPO), WREN_BENCH_TAG=tag,
                PYTHONUNBUFFERED="1")


def _ask(question: str, seed: int, max_tokens: int) -> list[str]:
    return [PY, "-m", "wren.engine.terminal", "ask", "--backend", "torch-cpu", "--seed", str(seed),
            "--temperature", "0.8", "--max-tokens", str(max_tokens), question]


def _query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    """A read-only look at the database, as another program would take it."""
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []


def _integrity(db: Path) -> str:
    if not db.exists():
        return "no database"
    con = sqlite3.connect(db, timeout=10)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries `tag` (zombies excluded)."""
    found = []
    needle = f"WREN_BENCH_TAG={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found


def _kill_group(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _prepare_models(root: Path) -> Path:
    """A models folder with the starter imported once, shared (by symlink) by the runs."""
    models = root / "shared-models"
    env = _env(root / "prep-home", "prep-" + uuid.uuid4().hex)
    code = ("from wren.engine.modelhub.registry import ModelRegistry; import sys; "
            "ModelRegistry(sys.argv[1]).ensure_starter()")
    subprocess.run([PY, "-c", code, str(models)], env=env, cwd=REPO, check=True)
    return models


def _home(root: Path, models: Path | None) -> Path:
    home = root / f"home-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    if models is not None:
        (home / "models").symlink_to(models, target_is_directory=True)
    return home


def kill_run(root: Path, models: Path, phase: str, rng: random.Random, seed: int) -> dict:
    tag = uuid.uuid4().hex
    home = _home(root, None if phase == "import" else models)
    db = home / "wren.sqlite3"
    env = _env(home, tag)
    question = {"import": STORY, "prefill": LONG_QUESTION, "streaming": STORY, "title": STORY}[phase]
    if phase == "title":
        cmd = [PY, "-c", WINDOW, question, "24", str(seed), "title"]
    else:
        cmd = _ask(question, seed, 200)
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    os.set_blocking(proc.stdout.fileno(), False)
    out = b""
    threshold = rng.randint(10, 120)
    delay = {"import": rng.uniform(0.0, 0.3), "prefill": rng.uniform(0.0, 0.4),
             "streaming": 0.0, "title": rng.uniform(0.0, 0.15)}[phase]
    deadline = time.monotonic() + 300
    fired_at = None
    committed = False
    seen_phase = None
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
        try:
            out += proc.stdout.read() or b""
        except (BlockingIOError, TypeError):
            pass
        if fired_at is None:
            if (phase == "import" and any((home / "models").glob(".partial-*"))) or (phase == "prefill" and _query(db, "SELECT 1 FROM message WHERE role='user'")):
                fired_at = time.monotonic() + delay
            elif phase == "streaming":
                rows = _query(db, "SELECT length(content) FROM message WHERE role='assistant' AND status='streaming'")
                if rows and rows[0][0] >= threshold:
                    fired_at = time.monotonic()
            elif phase == "title" and b"title_start" in out:
                fired_at = time.monotonic() + delay
        if fired_at is not None and time.monotonic() >= fired_at:
            committed = bool(_query(db, "SELECT 1 FROM message WHERE role='user' AND content=?", (question,)))
            partial = any((home / "models").glob(".partial-*")) if (home / "models").is_dir() else False
            streaming = _query(db, "SELECT length(content) FROM message WHERE role='assistant' AND status='streaming'")
            seen_phase = ("import" if partial else "title" if b"title_start" in out
                          else "streaming" if streaming and streaming[0][0] > 0
                          else "prefill" if committed else "load")
            proc.send_signal(signal.SIGKILL)
            break
    killed = seen_phase is not None
    if proc.poll() is None and not killed:
        proc.kill()
    proc.wait(30)
    time.sleep(2.0)
    orphans = _tagged_processes(tag)
    _kill_group(orphans)
    integrity_before = _integrity(db)
    start = subprocess.run([PY, "-c", NEXT_START], env=_env(home, tag + "-next"), cwd=REPO,
                           capture_output=True, text=True, timeout=300, check=False)
    swept = json.loads(start.stdout.strip().splitlines()[-1]) if start.returncode == 0 and start.stdout.strip() else {}
    integrity_after = _integrity(db)
    stale = [p.name for p in (home / "models").glob(".partial-*")] if (home / "models").is_dir() else []
    kept = bool(_query(db, "SELECT 1 FROM message WHERE role='user' AND content=?", (question,)))
    left_streaming = _query(db, "SELECT count(*) FROM message WHERE status='streaming'")
    left_streaming = left_streaming[0][0] if left_streaming else 0
    ok = (killed and integrity_before in ("ok", "no database") and integrity_after in ("ok", "no database")
          and not orphans and not stale and (kept or not committed) and left_streaming == 0
          and start.returncode == 0)
    return {
        "phase": phase, "killed_in": seen_phase, "killed": killed, "committed": committed,
        "question_kept": kept, "integrity_before": integrity_before, "integrity_after": integrity_after,
        "orphans": len(orphans), "stale_partials": stale, "swept": swept.get("removed", []),
        "bytes_freed": swept.get("bytes_freed", 0), "left_streaming": left_streaming,
        "next_start_ok": start.returncode == 0, "survived": ok,
        "next_start_error": start.stderr.strip().splitlines()[-1] if start.returncode else None,
    }


def pair_run(home: Path, index: int, seed: int) -> dict:
    tag = uuid.uuid4().hex
    env = _env(home, tag)
    db = home / "wren.sqlite3"
    window_q = f"Window question {index}: write a short poem about the sea."
    cli_q = f"CLI question {index}: name three colours."
    # The window's answer is long enough that the CLI process starts (and runs its start-up
    # sweep) while it streams.
    window = subprocess.Popen([PY, "-c", WINDOW, window_q, "64", str(seed), "none"], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = json.loads(window.stdout.readline() or "{}")
    answer_id = started.get("started")
    cli = subprocess.Popen(_ask(cli_q, seed, 16), env=env, cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    flipped = False
    statuses = set()
    while window.poll() is None:
        rows = _query(db, "SELECT status FROM message WHERE id=?", (answer_id,))
        if rows:
            statuses.add(rows[0][0])
            if rows[0][0] == "interrupted" and window.poll() is None:
                flipped = True
        time.sleep(0.05)
    window_out, window_err = window.communicate(timeout=300)
    cli_out, cli_err = cli.communicate(timeout=300)
    final = next((json.loads(line) for line in window_out.splitlines() if line.startswith('{"answer"')), {})
    w_row = _query(db, "SELECT status, content FROM message WHERE id=?", (answer_id,))
    c_row = _query(db, "SELECT a.status, a.content FROM message a JOIN message q ON a.parent_id = q.id "
                       "WHERE q.content=? AND a.role='assistant'", (cli_q,))
    window_ok = bool(w_row) and w_row[0][0] == "complete" and w_row[0][1] == final.get("text")
    cli_ok = bool(c_row) and c_row[0][0] == "complete" and c_row[0][1].strip() == cli_out.strip()
    return {
        "pair": index, "window_exit": window.returncode, "cli_exit": cli.returncode,
        "window_statuses_seen": sorted(statuses), "flipped_to_interrupted": flipped,
        "window_ok": window_ok, "cli_ok": cli_ok, "clobbered": flipped or not window_ok or not cli_ok,
        "errors": [e.strip().splitlines()[-1] for e in (window_err, cli_err) if e.strip() and
                   (window.returncode or cli.returncode)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="wren-reliability-"))
    started = time.time()
    models = _prepare_models(root)
    kills = []
    phases = [PHASES[i % len(PHASES)] for i in range(args.kills)]
    rng.shuffle(phases)
    for i, phase in enumerate(phases):
        for attempt in range(3):  # a process that finished before its moment came is run again
            result = kill_run(root, models, phase, rng, args.seed + i + 1000 * attempt)
            if result["killed"]:
                break
        result["attempts"] = attempt + 1
        kills.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
    pairs = []
    if args.pairs:
        home = _home(root, models)
        for i in range(args.pairs):
            result = pair_run(home, i, args.seed + i)
            pairs.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
        final_integrity = _integrity(home / "wren.sqlite3")
    else:
        final_integrity = None
    by_phase = {}
    for r in kills:
        key = r["killed_in"] or "not killed"
        entry = by_phase.setdefault(key, {"runs": 0, "survived": 0})
        entry["runs"] += 1
        entry["survived"] += r["survived"]
    summary = {
        "cpu": _cpu(), "seconds": round(time.time() - started, 1),
        "kills": {
            "runs": len(kills), "survived": sum(r["survived"] for r in kills), "by_phase": by_phase,
            "integrity_ok": sum(r["integrity_before"] in ("ok", "no database") and r["integrity_after"] in ("ok", "no database") for r in kills),
            "orphans": sum(r["orphans"] for r in kills),
            "stale_partials_after_next_start": sum(len(r["stale_partials"]) for r in kills),
            "partials_swept": sum(len(r["swept"]) for r in kills),
            "bytes_freed": sum(r["bytes_freed"] for r in kills),
            "committed": sum(r["committed"] for r in kills),
            "committed_and_kept": sum(r["committed"] and r["question_kept"] for r in kills),
            "left_streaming": sum(r["left_streaming"] for r in kills),
        },
        "pairs": {
            "runs": len(pairs), "clobbered": sum(r["clobbered"] for r in pairs),
            "flipped_to_interrupted": sum(r["flipped_to_interrupted"] for r in pairs),
            "failed_processes": sum(bool(r["window_exit"] or r["cli_exit"]) for r in pairs),
            "database_integrity": final_integrity,
        },
        "failures": [r for r in kills if not r["survived"]] + [r for r in pairs if r["clobbered"]],
    }
    print(json.dumps(summary, indent=2))
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()
