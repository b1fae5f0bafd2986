"""The register window's layout is searched for once per Unicorn library and kept in the
user's cache directory; a later process checks the cached layout (through
``/proc/self/mem``, then both ways) instead of searching.  A cached layout that is wrong
- written for another build, or by anyone - is found out without touching memory that
is not the CPU's, and searched for again.  Each case runs a fresh interpreter with its
own ``XDG_CACHE_HOME``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LAYOUT = (
    "import json\nfrom emu.engine import regfile\n"
    "print(json.dumps([regfile.cpu_window_layout(), regfile._library_identity()]))"
)
NO_SEARCH = (
    "from emu.engine import regfile\n"
    "def refuse(fd):\n    raise AssertionError('searched although the cache holds the layout')\n"
    "regfile._search_layout = refuse\n" + LAYOUT
)


def layout_in(cache_home: str, code: str = LAYOUT) -> tuple[list | None, str]:
    env = dict(os.environ, XDG_CACHE_HOME=cache_home)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    layout, identity = json.loads(out.stdout)
    return layout, identity


def cache_file(cache_home) -> str:
    return os.path.join(str(cache_home), "uprobe-emu", "register-window.json")


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[list, str]:
    """The layout as a search finds it, with no cache."""
    layout, identity = layout_in(str(tmp_path_factory.mktemp("fresh")))
    assert layout is not None, "this Unicorn build's register window is not recognised"
    return layout, identity


def test_a_search_stores_the_layout_under_the_library(tmp_path, searched):
    layout, identity = layout_in(str(tmp_path))
    with open(cache_file(tmp_path)) as f:
        assert json.load(f) == {identity: layout}


def test_a_cached_layout_is_used_without_a_search(tmp_path, searched):
    layout_in(str(tmp_path))
    layout, _ = layout_in(str(tmp_path), NO_SEARCH)
    assert layout == searched[0]


@pytest.mark.parametrize("wrong", [[8, 0], [0, 35408], [440, 0xFFFFF0], [440, 8], "x", [1, 2, 3]])
def test_a_wrong_cached_layout_is_searched_again_and_replaced(tmp_path, searched, wrong):
    os.makedirs(os.path.dirname(cache_file(tmp_path)))
    with open(cache_file(tmp_path), "w") as f:
        json.dump({searched[1]: wrong}, f)
    layout, identity = layout_in(str(tmp_path))
    assert layout == searched[0], f"with {wrong!r} cached: {layout}, the search finds {searched[0]}"
    with open(cache_file(tmp_path)) as f:
        assert json.load(f)[identity] == searched[0]


def test_another_librarys_entry_is_kept_beside_this_ones(tmp_path, searched):
    os.makedirs(os.path.dirname(cache_file(tmp_path)))
    with open(cache_file(tmp_path), "w") as f:
        json.dump({"/elsewhere/libunicorn.so.2:1:2:3": [1, 2]}, f)
    layout_in(str(tmp_path))
    with open(cache_file(tmp_path)) as f:
        assert json.load(f) == {"/elsewhere/libunicorn.so.2:1:2:3": [1, 2], searched[1]: searched[0]}


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"a": '])
def test_an_unreadable_cache_is_searched_over(tmp_path, searched, content):
    os.makedirs(os.path.dirname(cache_file(tmp_path)))
    with open(cache_file(tmp_path), "w") as f:
        f.write(content)
    assert layout_in(str(tmp_path))[0] == searched[0]


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path, searched):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert layout_in(str(blocker))[0] == searched[0]
