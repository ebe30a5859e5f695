"""``meclaw init DIR``: a starter colony that validates and answers a question end to end."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from colony.init import STARTER
from scripted import ScriptedOpenAI, text_reply

MECLAW = str(Path(sys.executable).with_name("meclaw"))


def meclaw(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MECLAW, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def env_from_example(root: Path, **values: str) -> Path:
    """``.env`` made from the starter's ``.env.example`` as its reader would, with ``values``."""
    lines = []
    for line in (root / ".env.example").read_text(encoding="utf-8").splitlines():
        name = line.partition("=")[0]
        lines.append(f"{name}={values[name]}" if name in values else line)
    env = root / ".env"
    env.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return env


def test_init_writes_the_starter_and_it_validates_with_an_env_made_from_the_example(
    tmp_path: Path,
) -> None:
    root = tmp_path / "starter"
    done = meclaw("init", str(root))
    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == sorted(
        STARTER
    )
    assert f"meclaw --root {root} --validate" in done.stdout
    env_from_example(root)
    checked = meclaw("--root", str(root), "--validate-strict")
    assert checked.returncode == 0, checked.stderr


def test_the_starter_without_its_env_file_names_the_missing_key(tmp_path: Path) -> None:
    root = tmp_path / "starter"
    assert meclaw("init", str(root)).returncode == 0
    checked = meclaw("--root", str(root), "--validate")
    assert checked.returncode == 1
    assert "LLM_API_KEY" in checked.stderr


def test_init_refuses_a_folder_that_is_not_empty_and_force_writes_only_its_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    refused = meclaw("init", str(tmp_path))
    assert refused.returncode == 2
    assert f"{tmp_path} is not empty" in refused.stderr
    assert "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    forced = meclaw("init", str(tmp_path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert (tmp_path / "main" / "assistant" / "config.json").is_file()


def test_init_refuses_a_file_in_place_of_the_folder(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("", encoding="utf-8")
    refused = meclaw("init", str(target))
    assert refused.returncode == 2
    assert "is not a folder" in refused.stderr


def test_init_where_no_folder_can_be_made_is_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    for target in (tmp_path / "a-file" / "colony", Path("/proc/no-colony-here")):
        refused = meclaw("init", str(target))
        assert refused.returncode == 2, refused.stderr
        assert "cannot write the starter" in refused.stderr
        assert "bug in meclaw" not in refused.stderr
        assert "Traceback" not in refused.stderr


async def test_the_starter_answers_a_question_through_an_openai_compatible_server(
    tmp_path: Path,
) -> None:
    root = tmp_path / "starter"
    assert meclaw("init", str(root)).returncode == 0
    answer = "A colony is a tree of cells that pass messages along edges."
    async with ScriptedOpenAI([text_reply(answer)]) as model:
        env_from_example(root, LLM_BASE_URL=model.url, LLM_API_KEY="sk-test", LLM_MODEL="m-1")
        proc = await asyncio.create_subprocess_exec(
            MECLAW,
            "--root",
            str(root),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(b"What is a colony?\n"), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == [answer]
    [request] = model.requests
    assert request["model"] == "m-1"
    assert request["messages"][-1] == {"role": "user", "content": "What is a colony?"}
    assert model.headers[0]["authorization"] == "Bearer sk-test"
