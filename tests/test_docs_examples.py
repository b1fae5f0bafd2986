"""Every shell example of README.md and docs/ runs and prints what the page shows.

An example is a fenced ``console`` block: a line ``$ COMMAND`` is a command, the lines
under it up to the next command are its output (stdout and stderr as one stream). The
commands of a block run in order, each with ``bash -c`` from a fresh temporary
directory, with this environment's ``python`` and ``uprobe-emu`` first on PATH and stdin
empty. Any fenced block of the page whose opening line names a file
(```` ```python title="test_add.py" ````) is written to that file first, so a command
can run it.

The output matches the page's when, after expanding tabs (8 columns) and dropping
trailing whitespace and trailing blank lines on both sides:

- a line that is ``...`` alone stands for any number of lines (none too);
- ``...`` inside a line stands for any text within that line (an address, a timing);
- every other character is equal.

Three forms need more than ``bash -c``:

- ``$ COMMAND &`` runs in the background, as in a shell: the lines shown under it are
  the first it prints (read as they come), the block's next commands run meanwhile, and
  it must have exited by the end of the block (gdb's ``kill`` ends a gdbserver).
- Port 1234 in a block (``--port 1234``, ``target remote :1234``) is replaced by a free
  port, in the commands and in the output.
- ``$ sudo COMMAND`` needs root and tracefs (``diff``): it runs as COMMAND, and only
  where the host tracefs is mounted or can be mounted; elsewhere the example is skipped.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)(.*)$")
TITLE = re.compile(r'title="([^"/]+)"')
PORT = "1234"
COMMAND_TIMEOUT = 120
BACKGROUND_TIMEOUT = 60


@dataclass
class Command:
    text: str
    output: list[str] = field(default_factory=list)


@dataclass
class Example:
    page: Path
    line: int
    commands: list[Command]
    files: dict[str, str]

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def __repr__(self) -> str:
        return f"<example {self.id}>"


def fenced_blocks(text: str) -> list[tuple[int, str, str, list[str]]]:
    """(line of the opening fence, language, rest of the opening line, body lines)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith(m.group(1)):
            body.append(lines[i])
            i += 1
        blocks.append((start + 1, m.group(2), m.group(3), body))
        i += 1
    return blocks


def page_examples(page: Path) -> list[Example]:
    blocks = fenced_blocks(page.read_text())
    files = {t.group(1): "\n".join(body) + "\n" for _, _, info, body in blocks if (t := TITLE.search(info))}
    out = []
    for line, lang, _, body in blocks:
        if lang != "console":
            continue
        commands: list[Command] = []
        for text in body:
            if text.startswith("$ "):
                commands.append(Command(text[2:]))
            else:
                assert commands, f"{page.relative_to(ROOT)}:{line}: output before the first '$ ' command"
                commands[-1].output.append(text)
        out.append(Example(page, line, commands, files))
    return out


EXAMPLES = [ex for page in PAGES for ex in page_examples(page)]


def normalized(lines: list[str]) -> list[str]:
    out = [line.expandtabs().rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def pattern(expected: list[str]) -> re.Pattern:
    parts = []
    for line in normalized(expected):
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(p) for p in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def matches(expected: list[str], actual: str) -> bool:
    text = "".join(line + "\n" for line in normalized(actual.splitlines()))
    return pattern(expected).fullmatch(text) is not None


def environment() -> dict[str, str]:
    beside = Path(sys.executable).parent / "uprobe-emu"
    exe = str(beside) if beside.exists() else shutil.which("uprobe-emu")
    assert exe, "uprobe-emu is not installed (pip install .)"
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(Path(exe).parent), env.get("PATH", "")])
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("COLUMNS", None)
    return env


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def read_lines(proc: subprocess.Popen, n: int) -> list[str]:
    """The first ``n`` lines a background command prints (fewer if it ends first)."""
    got, buf, deadline = [], b"", time.monotonic() + BACKGROUND_TIMEOUT
    fd = proc.stdout.fileno()
    while len(got) < n and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        got += [line.decode(errors="replace") for line in lines]
    return got[:n]


def describe(ex: Example, cmd: Command, actual: str) -> str:
    return f"{ex.id}: `{cmd.text}` printed\n{actual}\n--- but the page shows ---\n" + "\n".join(cmd.output)


@pytest.mark.parametrize("ex", EXAMPLES, ids=[ex.id for ex in EXAMPLES])
def test_example_prints_what_the_page_shows(ex: Example, tmp_path, request):
    if any(c.text.startswith("sudo ") for c in ex.commands) and (
        os.geteuid() != 0 or request.getfixturevalue("host_tracefs") is None
    ):
        pytest.skip("needs root and a tracefs mount")
    for name, content in ex.files.items():
        (tmp_path / name).write_text(content)
    port = free_port()
    env = environment()
    background: list[subprocess.Popen] = []
    try:
        for cmd in ex.commands:
            text = cmd.text.replace(PORT, port)
            expected = [line.replace(PORT, port) for line in cmd.output]
            if text.startswith("sudo "):
                text = text[len("sudo ") :]
            if text.endswith(" &"):
                proc = subprocess.Popen(
                    ["bash", "-c", text[:-2]],
                    cwd=tmp_path,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
                background.append(proc)
                actual = "\n".join(read_lines(proc, len(expected)))
            else:
                done = subprocess.run(
                    ["bash", "-c", text],
                    cwd=tmp_path,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    timeout=COMMAND_TIMEOUT,
                )
                actual = done.stdout.decode(errors="replace")
            assert matches(expected, actual), describe(ex, cmd, actual)
        for proc in background:
            proc.wait(timeout=BACKGROUND_TIMEOUT)
    finally:
        for proc in background:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def test_the_pages_have_examples_of_every_command_the_readme_shows():
    """The README's six examples (run, a register test, trace, gdbserver, bench, diff)
    are console examples the test above runs."""
    readme = [c.text for ex in EXAMPLES if ex.page.name == "README.md" for c in ex.commands]
    shown = {
        word
        for text in readme
        for word in ("run", "pytest", "trace", "gdbserver", "bench", "diff")
        if re.search(rf"(uprobe-emu|python -m) {word}\b", text)
    }
    assert shown == {"run", "pytest", "trace", "gdbserver", "bench", "diff"}, readme


@pytest.mark.parametrize(
    "expected, actual, verdict",
    [
        (["a", "...", "d"], "a\nb\nc\nd\n", True),
        (["a", "...", "b"], "a\nb\n", True),
        (["x=0x...", "y"], "x=0x7fff\ny\n", True),
        (["x=0x...", "y"], "x=0x7fff\nz\n", False),
        (["a\tb"], "a       b  \n\n", True),
        (["a"], "a\nb\n", False),
        (["1 passed in ..."], "1 passed in 0.31s\n", True),
    ],
)
def test_the_matching_rule(expected, actual, verdict):
    assert matches(expected, actual) is verdict, (expected, actual)
