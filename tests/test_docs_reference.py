"""The generated reference pages (``tools/gen_docs.py``) say what the code says: the
command-line page every command and option of ``build_parser()``, the kernel profiles
page each release's switch changes and the commits ``kernel_model/profiles.py`` cites,
and the site's navigation only pages that exist or are generated."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from emu.frontends.cli import build_parser
from kernel_model.profiles import KernelProfile

ROOT = Path(__file__).resolve().parent.parent


def load_gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN_DOCS = load_gen_docs()
COMMANDS = GEN_DOCS.subcommands(build_parser())


def section(page: str, heading: str) -> str:
    start = page.index(f"\n## {heading}\n")
    end = page.find("\n## ", start + 1)
    return page[start:] if end < 0 else page[start:end]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_cli_page_gives_each_command_its_usage(name):
    usage = COMMANDS[name].format_usage().strip()
    assert f"```text\n{usage}\n```" in section(GEN_DOCS.render_cli(), name)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_cli_page_lists_every_option_of_each_command(name):
    text = section(GEN_DOCS.render_cli(), name)
    strings = [s for a in COMMANDS[name]._actions for s in a.option_strings if s not in ("-h", "--help")]
    missing = [s for s in strings if not re.search(rf"`(?:[^`]*, )?{re.escape(s)}[ `,]", text)]
    assert missing == [], f"uprobe-emu {name}: options missing from the page: {missing}"


def test_the_cli_page_lists_every_command():
    listed = re.findall(r"^\| \[`([a-z]+)`\]", GEN_DOCS.render_cli(), re.M)
    assert listed == list(COMMANDS)


def profile_row(page: str, name: str) -> str:
    return next(line for line in page.splitlines() if line.startswith(f"| {name} | "))


@pytest.mark.parametrize(
    "profile, shown",
    [
        ("6.10", "`args_buffer=lazy`"),
        ("6.10", '1b8f85defbc8 "uprobes: prepare uprobe args buffer lazily"'),
        ("6.11", "`uretprobe_trampoline=syscall`, `has_uretprobe_syscall=True`"),
        ("6.11", "ff474a78cef5"),
        ("6.14", "`ri_alloc=pool`, `vma_lookup=speculative`"),
        ("6.18", "`optimize=nop5`"),
        ("6.19", "`nop_emulation=insn_is_nop` | 8a5c6cbfe4a3"),
        ("7.2", "| none | 7.2's uprobes changes were fixes"),
        ("7.3", "`optimize=nop10`"),
        ("latest", "| none |"),
    ],
)
def test_the_profiles_page_gives_what_each_release_changed(profile, shown):
    row = profile_row(GEN_DOCS.render_profiles(), profile)
    assert shown in row, row


def test_the_profiles_page_cites_every_commit_the_profiles_cite():
    cited = set(re.findall(r"\b[0-9a-f]{12}\b", (ROOT / "kernel_model" / "profiles.py").read_text()))
    page = GEN_DOCS.render_profiles()
    assert sorted(c for c in cited if c not in page) == []


@pytest.mark.parametrize("switch", KernelProfile.SWITCHES)
def test_the_profiles_page_gives_every_profile_s_value_of_each_switch(switch):
    row = next(line for line in GEN_DOCS.render_profiles().splitlines() if line.startswith(f"| `{switch}` | "))
    values = [c.strip().replace("\\", "") for c in row.split("|")[2:-1]]
    expected = [
        "—" if v is None else str(v) for v in (getattr(KernelProfile.get(n), switch) for n in KernelProfile.names())
    ]
    assert values[: len(expected)] == expected, row


def test_notes_join_a_comment_with_the_comment_lines_under_it():
    source = """
def _build():
    b = {}
    out = {}
    b.update(x=1)        # aaaaaaaaaaaa "first title
                         # continued"
    b.update(y=2)        # bbbbbbbbbbbb
    out["1"] = b
    # a note above
    # on two lines
    b.update(z=3)
    out["2"] = b
    out["3"] = b
"""
    assert GEN_DOCS.profile_changes(source) == {
        "1": ['aaaaaaaaaaaa "first title continued"', "bbbbbbbbbbbb"],
        "2": ["a note above on two lines"],
        "3": [],
    }


def nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


@pytest.mark.parametrize("page", nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))
def test_every_page_of_the_navigation_exists_or_is_generated(page):
    assert (ROOT / "docs" / page).is_file() or page in GEN_DOCS.PAGES, page
