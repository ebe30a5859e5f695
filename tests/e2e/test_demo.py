"""``make run`` runs ``meclaw demo``: the research bot, offline, on a fresh checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from colony.demo import ANSWER

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_answers_the_chat_with_no_dead_letters_and_leaves_the_tree_untouched() -> None:
    before = sorted(p.relative_to(REPO) for p in (REPO / "topologies").rglob("*"))
    done = subprocess.run(
        [sys.executable, "-m", "colony", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"answer: {ANSWER}" in lines
    assert "dead letters: 0" in lines
    hops = [line for line in lines if " -> " in line and " ttl " in line]
    assert hops[0].split()[2:5] == ["@external", "->", "/prep"]
    assert any("/planner" in h and "/proxy" in h for h in hops)  # the answer left for the chat
    summary = next(line for line in lines if "routing decisions," in line)
    assert "3 model calls, 2 searches, 2 pages fetched" in summary
    assert int(summary.split()[0]) == len(hops)
    assert "meclaw --root topologies/telegram-research" in done.stdout
    assert "Traceback" not in done.stderr
    assert sorted(p.relative_to(REPO) for p in (REPO / "topologies").rglob("*")) == before
