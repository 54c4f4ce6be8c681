"""The README and docs/ checked against the code: the commands and options
they name, the environment variables they document, the files and links
they point to."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest

import motir_supervisor
from motir_supervisor import assertions, cli, registry, testing

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIGURATION = ROOT / "docs" / "configuration.md"
THIS_FILE = Path(__file__).resolve()

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
INVOCATION = re.compile(r"(?<![\w/-])motir-supervisor((?:[ \t]+[^\s`#]+)*)")
MOTIR_VARIABLE = re.compile(r"\bMOTIR_[A-Z0-9_]+\b")
VARIABLE = re.compile(r"`([A-Z][A-Z0-9_]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PYTHON_FILE = re.compile(r"^[\w./-]*\w\.py$")
FENCE = re.compile(r"^\s*```")

#: The tools beside the command whose options the docs may name: bin/bench
#: and bin/demo (their argument parsers are read).
TOOLS = (ROOT / "benchmarks" / "bench.py", ROOT / "examples" / "demo.py")
#: Where the MOTIR_ variables of the tools beside the command are read.
TOOL_SOURCES = ("benchmarks", "tests", "examples", "bin", ".ci")


# -- what the code has ---------------------------------------------------------


def options_of(command: click.Command) -> dict[str, click.Option]:
    """Each option string of ``command`` (``--listen`` and ``--no-listen``
    alike), and ``--help``."""
    found: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                found[name] = param
    found["--help"] = None
    return found


COMMANDS = dict(cli.main.commands)
GROUP_OPTIONS = options_of(cli.main)
CLI_OPTIONS = set(GROUP_OPTIONS).union(*(options_of(c) for c in COMMANDS.values()))


def tool_options() -> set[str]:
    found = set()
    for path in TOOLS:
        found |= set(re.findall(r'add_argument\(\s*"(--[a-z][\w-]*)"', path.read_text()))
    return found


def variables_of(param: click.Option | None) -> set[str]:
    if param is None or param.envvar is None:
        return set()
    return {param.envvar} if isinstance(param.envvar, str) else set(param.envvar)


# -- what the documents say ------------------------------------------------------


class Document:
    """A Markdown file split into its fenced code lines, its prose, the
    inline code spans of its prose, its headings and its tables."""

    def __init__(self, path: Path):
        self.path = path
        self.text = path.read_text()
        self.code_lines: list[str] = []
        prose: list[str] = []
        #: (heading, [rows of cells]) for each table, under its nearest heading.
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.headings: list[str] = []
        #: Each heading's level: 1 for ``#``, 2 for ``##``, ...
        self.levels: list[int] = []
        fenced = False
        heading = ""
        table: list[list[str]] | None = None
        for line in self.text.splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                self.code_lines.append(line)
                continue
            prose.append(line)
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
                self.headings.append(heading)
                self.levels.append(len(line) - len(line.lstrip("#")))
            if line.startswith("|"):
                if table is None:
                    table = []
                    self.tables.append((heading, table))
                cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
                if not all(set(cell) <= set("-: ") for cell in cells):
                    table.append(cells)
            else:
                table = None
        self.prose = "\n".join(prose)
        # A span may run over a line break; the HTML comments are not shown.
        shown = re.sub(r"<!--.*?-->", "", self.prose, flags=re.S)
        self.spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", shown)]

    def anchors(self) -> set[str]:
        return set(self.heading_anchors())

    def heading_anchors(self) -> list[str]:
        """The anchor GitHub makes of each heading, in order: lower case,
        punctuation dropped, spaces to hyphens, a repeated one numbered."""
        seen: dict[str, int] = {}
        found = []
        for heading in self.headings:
            slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.append(f"{slug}-{count}" if count else slug)
        return found


def invocations(document: Document) -> list[tuple[str | None, list[str]]]:
    """Each ``motir-supervisor ...`` of a code line or span: the command it
    runs (None for a placeholder such as COMMAND) and the options it passes.
    ``a | b`` alternatives each name their own command."""
    found = []
    # A comment of a code line may speak of the command without running it.
    lines = [re.sub(r"(^|\s)#.*", "", line) for line in document.code_lines]
    for text in [*lines, *document.spans]:
        for match in INVOCATION.finditer(text):
            for number, part in enumerate(match.group(1).split("|")):
                words = [w.strip("[]()") for w in part.split()]
                words = [w for w in words if w]
                i = 0
                while i < len(words) and words[i].split("=")[0] in GROUP_OPTIONS:
                    i += 1 if "=" in words[i] else 2
                first = words[i] if i < len(words) else ""
                if number and first not in COMMANDS:
                    continue  # an alternative value, not another command
                if first in COMMANDS:
                    command = first
                elif first.isupper() or first == "...":
                    command = None
                elif not first or first.startswith("-"):
                    command = "run"  # `motir-supervisor --workers 4` runs
                else:
                    command = f"unknown command {first!r}"
                found.append((command, OPTION.findall(" ".join(words[i:]))))
    return found


def table_commands(heading: str) -> list[click.Command]:
    """The commands a table of options belongs to, from its heading: the
    commands it names (`motir-supervisor pause` and `resume`), the group's
    own options before the command, or else `run`'s."""
    if heading.lower().startswith("before the command"):
        return [cli.main]
    named = [word for span in re.findall(r"`([^`]+)`", heading)
             for word in span.replace("motir-supervisor", "").split() if word in COMMANDS]
    return [COMMANDS[name] for name in named] or [COMMANDS["run"]]


def option_tables(document: Document):
    """(heading, header, row) for each row of a table whose first column is
    options."""
    for heading, rows in document.tables:
        if rows and rows[0][0].lower() == "option":
            for row in rows[1:]:
                yield heading, rows[0], row


# -- the checks ------------------------------------------------------------------


@pytest.fixture(params=DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def document(request) -> Document:
    return Document(request.param)


def test_every_invocation_names_a_command_and_its_options(document):
    problems = []
    for command, options in invocations(document):
        if command is None:
            known = CLI_OPTIONS
        elif command not in COMMANDS:
            problems.append(f"motir-supervisor: {command}")
            continue
        else:
            known = set(options_of(COMMANDS[command])) | set(GROUP_OPTIONS)
        problems += [f"motir-supervisor {command or 'COMMAND'} {option}"
                     for option in options if option not in known]
    assert not problems, f"{document.path.name} names what the command lacks: {problems}"


def test_every_option_named_belongs_to_the_command_or_a_tool_beside_it(document):
    named = set(OPTION.findall(document.prose)) | set(OPTION.findall("\n".join(
        document.code_lines)))
    unknown = sorted(named - CLI_OPTIONS - tool_options())
    assert not unknown, f"{document.path.name} names options nothing has: {unknown}"


def test_every_option_table_matches_its_commands_options_and_variables(document):
    problems = []
    for heading, header, row in option_tables(document):
        options = OPTION.findall(row[0])
        if not options:
            problems.append(f"a row of options names none: {row[0]}")
        for command in table_commands(heading):
            known = options_of(command)
            for option in options:
                if option not in known:
                    problems.append(f"{command.name} has no {option}")
                elif "environment" in header:
                    documented = set(VARIABLE.findall(row[header.index("environment")]))
                    if documented != variables_of(known[option]):
                        problems.append(
                            f"{command.name} {option}: {sorted(documented)} in the table,"
                            f" {sorted(variables_of(known[option]))} in cli.py")
    assert not problems, f"{document.path.name}: {problems}"


def test_the_configuration_lists_every_option_of_every_command():
    document = Document(CONFIGURATION)
    listed: dict[str, set[str]] = {}
    for heading, _, row in option_tables(document):
        for command in table_commands(heading):
            listed.setdefault(command.name, set()).update(OPTION.findall(row[0]))
    missing = []
    for command in (cli.main, *COMMANDS.values()):
        wanted = set(options_of(command)) - {"--help"}
        missing += [f"{command.name} {option}"
                    for option in sorted(wanted - listed.get(command.name, set()))]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_every_motir_variable_named_is_read_by_the_code(document):
    read_by_cli = set(MOTIR_VARIABLE.findall(Path(cli.__file__).read_text()))
    read_by_tools = set()
    for folder in TOOL_SOURCES:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in ("", ".py", ".sh") and path != THIS_FILE:
                read_by_tools |= set(MOTIR_VARIABLE.findall(path.read_text(errors="replace")))
    named = set(MOTIR_VARIABLE.findall(document.text))
    unknown = sorted(named - read_by_cli - read_by_tools)
    assert not unknown, f"{document.path.name} documents variables nothing reads: {unknown}"


def test_every_variable_of_an_option_is_documented():
    text = CONFIGURATION.read_text()
    params = [*cli.main.params, *(p for c in COMMANDS.values() for p in c.params)]
    missing = sorted({name for param in params if isinstance(param, click.Option)
                      for name in variables_of(param) if f"`{name}`" not in text})
    assert not missing, f"docs/configuration.md lacks the variables {missing}"


def test_every_relative_link_reaches_a_file_and_its_heading(document):
    problems = []
    for target in LINK.findall(document.prose):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        path = (document.path.parent / path_part).resolve() if path_part else document.path
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in Document(path).anchors():
            problems.append(f"{target}: no such heading")
    assert not problems, f"{document.path.name}: {problems}"


def test_every_python_file_named_exists(document):
    # Not in .venv, .git or .bench: the project's own files only.
    files = {path.name for path in ROOT.rglob("*.py")
             if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)}
    problems = []
    for span in document.spans:
        for word in span.split():
            if not PYTHON_FILE.match(word):
                continue
            if "/" in word:
                if not (ROOT / word).exists() and not (document.path.parent / word).exists():
                    problems.append(word)
            elif word not in files:
                problems.append(word)
    assert not problems, f"{document.path.name} names files that do not exist: {problems}"


# -- the API reference -------------------------------------------------------------

API = ROOT / "docs" / "api.md"
#: A documented name: a bold code span, ``**`enqueue(conn, ...) -> Enqueued`**``.
ENTRY = re.compile(r"\*\*`([^`]+)`\*\*")


def api_sections() -> dict[str, str]:
    """The prose of each level-2 section of docs/api.md, by its heading."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in Document(API).prose.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        else:
            current.append(line)
    return {heading: "\n".join(lines) for heading, lines in sections.items()}


def entries(section: str) -> dict[str, str]:
    """Each entry of a section: its name (``enqueue``, ``Job.transaction``)
    and what its span says (the signature, for a function)."""
    found = {}
    for span in ENTRY.findall(section):
        span = " ".join(span.split())
        found[re.split(r"[( ]", span, maxsplit=1)[0]] = span
    return found


def parameters_named(signature: str) -> list[str]:
    """The parameter names of a documented signature, in order."""
    inside, depth = "", 0
    for char in signature[signature.index("(") + 1:]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        inside += char if depth or char != "," else "\n"
    names = [re.sub(r"^\*+", "", part.strip()) for part in inside.split("\n")]
    return [re.match(r"\w+", name).group(0) for name in names if name and name not in "*/"]


def undocumented(module, documented: dict[str, str]) -> list[str]:
    problems = []
    for name in module.__all__:
        if name not in documented:
            problems.append(f"{module.__name__}.{name} is not in docs/api.md")
            continue
        value = getattr(module, name)
        if inspect.isfunction(value):
            wanted = list(inspect.signature(value).parameters)
            if "(" not in documented[name]:
                problems.append(f"{name}: no signature in docs/api.md")
            elif parameters_named(documented[name]) != wanted:
                problems.append(f"{name}: docs/api.md says {documented[name]!r},"
                                f" the code takes {wanted}")
    return problems


def test_the_api_reference_lists_every_public_name_with_its_signature():
    sections = api_sections()
    problems = undocumented(motir_supervisor, entries(sections["`motir_supervisor`"]))
    problems += undocumented(testing, entries(sections["`motir_supervisor.testing`"]))
    assert not problems, problems


def test_the_public_names_are_the_ones_exported():
    # A name made public without a place in __all__ would escape the test above.
    exported = [name for name, value in vars(motir_supervisor).items()
                if not name.startswith("_") and not inspect.ismodule(value)]
    assert sorted(exported) == sorted(motir_supervisor.__all__)
    defined = [name for name, value in vars(testing).items()
               if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
               and value.__module__ in (testing.__name__, assertions.__name__)]
    assert set(defined) <= set(testing.__all__), sorted(set(defined) - set(testing.__all__))


def test_the_api_reference_lists_every_option_of_job():
    rows = next(rows for heading, rows in Document(API).tables
                if heading == "The options of `@job`")
    listed = [row[0].strip("`") for row in rows[1:]]
    assert listed == list(inspect.signature(registry.job).parameters)


# -- tables of contents ------------------------------------------------------------


def test_each_table_of_contents_lists_the_sections_in_order(document):
    """A page that opens with a list of links to its own sections lists every
    one of them (its level-2 headings), in the order they come."""
    own = []
    for line in document.prose.splitlines():
        if line.startswith("##"):
            break  # the contents come before the first section
        if line.lstrip().startswith("- "):
            own += [target[1:] for target in LINK.findall(line) if target.startswith("#")]
    if not own:
        return  # no table of contents
    sections = [anchor for anchor, level in zip(document.heading_anchors(), document.levels)
                if level == 2]
    listed = [anchor for anchor in own if anchor in sections]
    assert listed == sections, f"{document.path.name}: its contents list {listed}, its" \
                               f" sections are {sections}"
