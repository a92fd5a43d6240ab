"""README.md is the short front page: the two commands first, install and the quick start, one line per user
story linking its page of the documentation, and links that work where the README is read (on GitHub: paths
relative to the checkout). Its quick start runs in tests/test_docs_blocks.py, with every block of the pages
it links (the pages whose blocks read the quick start's dataset start from its datasets root there).
"""

from __future__ import annotations

import re

from tests.doc_blocks import REPO, blocks

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"
# The README sections the site includes (docs/index.md, docs/getting-started.md): one text for both
INCLUDED = ("intro", "install", "quick-start")


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.M)


def test_readme_starts_with_the_two_commands() -> None:
    first_block = re.search(r"^```(\w+)\n(.*?)^```$", README, re.M | re.S)
    assert first_block is not None and first_block.group(1) == "bash"
    commands = [line.split("#")[0].strip() for line in first_block.group(2).splitlines()]
    assert commands == ["make demo", "make test"]
    assert README.index("make demo") < README.index("## ")  # before any section


def test_readme_stays_the_short_front_page() -> None:
    assert len(README.splitlines()) <= 250
    assert sections(README)[:3] == ["Install", "Quick start", "What it does"]
    assert [heading for heading, _ in blocks(README, "python")] == ["Quick start"]  # the rest is on the pages


def test_what_it_does_links_every_story_page_and_the_references() -> None:
    section = README.split("\n## What it does\n", 1)[1].split("\n## ", 1)[0]
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", section))
    stories = {path.relative_to(REPO).as_posix() for path in (DOCS / "stories").glob("*.md")}
    assert stories <= linked, f"story pages the README does not link: {sorted(stories - linked)}"
    assert {"docs/cli.md", "docs/performance.md", "docs/api/errors.md", "docs/troubleshooting.md"} <= linked
    assert "`make docs`" in README


def test_every_relative_link_of_the_readme_resolves_in_the_checkout() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert relative, "the README links no page of the documentation"
    missing = [link for link in relative if not (REPO / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_sections_the_site_includes_have_no_links_the_site_cannot_follow() -> None:
    """The intro, install and quick start are also pages of the site, where a path from the checkout's root
    (docs/...) would not resolve: they name pages in words, and link only absolute addresses."""
    for name in INCLUDED:
        text = README.split(f"<!-- --8<-- [start:{name}] -->", 1)[1].split(f"<!-- --8<-- [end:{name}] -->", 1)[0]
        assert not [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", link)], name
    site_pages = (DOCS / "index.md").read_text(encoding="utf-8") + (DOCS / "getting-started.md").read_text(encoding="utf-8")
    for name in INCLUDED:
        assert f'--8<-- "README.md:{name}"' in site_pages, name


def test_the_quick_start_says_why_it_has_the_main_guard() -> None:
    (quick_start,) = [code for heading, code in blocks(README, "python") if heading == "Quick start"]
    assert '"subproc"' in quick_start and 'if __name__ == "__main__":' in quick_start
    assert "starts its workers with forkserver, which re-imports the main module" in " ".join(README.split())


def test_the_quick_start_says_which_pages_read_its_dataset() -> None:
    """The pages whose blocks read ``demo/cartpole-v0`` say so (tests/test_docs_blocks.py checks each)."""
    assert "says so at its top: run the quick start first, with the same datasets root" in " ".join(README.split())
