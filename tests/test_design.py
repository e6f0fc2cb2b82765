"""The layer diagram of ``design/overview.md`` cannot drift from the code.

The diagram is a fenced block of layers (one line per layer, top to bottom, ``|`` between independent modules,
``[name]`` starting one import-linter contract's layers). It must list the same layers in the same order as
the ``layers`` contracts in setup.cfg (which ``lint-imports`` enforces on the imports), and every module under
zcache/ exactly once: by name, or inside a package named whole that has no section of its own. The modules
are read from the file system when the test runs, so a module that moves only needs the diagram (and the
contract) updated. Needs nothing beyond the standard library.
"""

from __future__ import annotations

import configparser
import pathlib
import re

import pytest

import zcache

PACKAGE = pathlib.Path(zcache.__file__).parent
ROOT = PACKAGE.parent
OVERVIEW = ROOT / "design" / "overview.md"
SETUP = ROOT / "setup.cfg"

Layers = list[frozenset[str]]


def _layer(line: str) -> frozenset[str]:
    return frozenset(name.strip() for name in line.split("|") if name.strip())


def parse_diagram(text: str) -> dict[str, Layers]:
    """The diagram's layers per section (``"zcache"``, ``"zcache.amplitude"``): the first ``text`` block whose
    first line is a ``[section]``; within ``[zcache]`` names are without ``zcache.``, within another section
    relative to that package."""
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
        lines = [line for line in lines if line]
        if lines and re.fullmatch(r"\[[\w.]+\]", lines[0]):
            break
    else:
        raise AssertionError(f"{OVERVIEW.relative_to(ROOT)} has no layer diagram (a ```text block starting with [zcache])")
    sections: dict[str, Layers] = {}
    for line in lines:
        if match := re.fullmatch(r"\[([\w.]+)\]", line):
            section = match.group(1)
            assert section not in sections, f"the diagram has two [{section}] sections"
            sections[section] = []
        else:
            sections[section].append(_layer(line))
    return sections


def parse_contracts(text: str) -> dict[str, Layers]:
    """The ``layers`` contracts of setup.cfg's import-linter section, keyed as the diagram's sections: the root
    contract (no ``containers``) under the root package with ``zcache.`` dropped from its names, a contract with
    ``containers`` under each container."""
    config = configparser.ConfigParser()
    config.read_string(text)
    root = config["importlinter"]["root_package"]
    contracts: dict[str, Layers] = {}
    for name in config.sections():
        section = config[name]
        if not name.startswith("importlinter:contract:") or section.get("type") != "layers":
            continue
        layers = [_layer(line) for line in section["layers"].splitlines() if line.strip()]
        containers = section.get("containers", "").split()
        if not containers:
            prefix = root + "."
            layers = [frozenset(m[len(prefix):] if m.startswith(prefix) else m for m in layer) for layer in layers]
            containers = [root]
        for container in containers:
            contracts[container] = layers
    return contracts


def modules(package: pathlib.Path = PACKAGE) -> set[str]:
    """Every module and package under zcache/, dotted, without ``zcache.`` (``_engine.function``, ``amplitude``,
    ``amplitude._fused``); the top-level ``__init__`` is not one."""
    out = set()
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out.add(".".join(parts))
    return out


def coverage_problems(sections: dict[str, Layers], existing: set[str], root: str = "zcache") -> list[str]:
    """What the diagram lacks or has too much of, against the modules that exist: each a sentence saying what
    to add or remove."""
    listed: dict[str, int] = {}
    for section, layers in sections.items():
        prefix = "" if section == root else section[len(root) + 1:] + "."
        for layer in layers:
            for name in layer:
                listed[prefix + name] = listed.get(prefix + name, 0) + 1
    problems = [f"{name!r} appears {n} times in the diagram: list it once" for name, n in sorted(listed.items()) if n > 1]
    problems += [f"remove {name!r} from the diagram: there is no such module under zcache/"
                 for name in sorted(set(listed) - existing)]
    with_section = {section[len(root) + 1:] for section in sections if section != root}

    def covered(module: str) -> bool:
        if module in listed:
            return True
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        # a package named whole covers its modules, unless the diagram gives the package a section of its own
        return any(parent in listed and parent not in with_section for parent in parents)

    packages = {m for m in existing if (PACKAGE / m.replace(".", "/")).is_dir()}
    for module in sorted(existing - packages):
        if not covered(module):
            section = next((s for s in sorted(with_section, key=len, reverse=True) if module.startswith(s + ".")), None)
            where = f"[zcache.{section}] as {module[len(section) + 1:]!r}" if section else f"[zcache] as {module!r}"
            problems.append(f"add the module {module!r} to the diagram: in {where}, in the layer of the contract")
    return problems


def order_problems(sections: dict[str, Layers], contracts: dict[str, Layers]) -> list[str]:
    """Where the diagram's layers differ from the contracts' (setup.cfg is what lint-imports enforces)."""
    problems = []
    for name in sorted(set(contracts) - set(sections)):
        problems.append(f"add a [{name}] section to the diagram: setup.cfg has a layers contract for it")
    for name in sorted(set(sections) - set(contracts)):
        problems.append(f"the diagram's [{name}] section has no layers contract in setup.cfg: add one or remove it")
    for name in sorted(set(sections) & set(contracts)):
        drawn, contract = sections[name], contracts[name]
        for i in range(max(len(drawn), len(contract))):
            d = drawn[i] if i < len(drawn) else frozenset()
            c = contract[i] if i < len(contract) else frozenset()
            if d != c:
                problems.append(
                    f"[{name}] layer {i + 1} from the top: the contract has {' | '.join(sorted(c)) or 'nothing'}, "
                    f"the diagram {' | '.join(sorted(d)) or 'nothing'}"
                    + (f" (add {', '.join(sorted(c - d))})" if c - d else "")
                    + (f" (remove {', '.join(sorted(d - c))})" if d - c else ""))
                break  # one layer off shifts the rest: the first difference is what to fix
    return problems


def test_the_layer_diagram_is_the_import_contract():
    problems = order_problems(parse_diagram(OVERVIEW.read_text()), parse_contracts(SETUP.read_text()))
    assert not problems, "design/overview.md's layer diagram and setup.cfg's contracts differ:\n" + "\n".join(problems)


def test_the_layer_diagram_lists_every_module_once():
    problems = coverage_problems(parse_diagram(OVERVIEW.read_text()), modules())
    assert not problems, "design/overview.md's layer diagram:\n" + "\n".join(problems)


# -- the checks themselves fail where they should ----------------------------------------------------------------
DIAGRAM = """
```text
[zcache]
plot            # a comment
loss | binned
exceptions
[zcache.amplitude]
_b
_a | _c
```
"""


def test_parse_diagram_reads_sections_layers_and_comments():
    sections = parse_diagram(DIAGRAM)
    assert sections == {"zcache": [{"plot"}, {"loss", "binned"}, {"exceptions"}],
                        "zcache.amplitude": [{"_b"}, {"_a", "_c"}]}


def test_parse_contracts_drops_the_root_prefix_and_keys_containers():
    cfg = """
[importlinter]
root_package = zcache
[importlinter:contract:main]
type = layers
layers =
    zcache.plot
    zcache.loss | zcache.binned
[importlinter:contract:inner]
type = layers
containers = zcache.amplitude
layers =
    _b
    _a | _c
[importlinter:contract:other]
type = forbidden
"""
    assert parse_contracts(cfg) == {"zcache": [{"plot"}, {"loss", "binned"}],
                                    "zcache.amplitude": [{"_b"}, {"_a", "_c"}]}


@pytest.mark.parametrize(("contract", "expected"), [
    ({"zcache": [{"plot"}, {"loss", "binned"}, {"exceptions"}], "zcache.amplitude": [{"_b"}, {"_a", "_c"}]}, []),
    ({"zcache": [{"plot"}, {"loss", "binned", "chunks"}, {"exceptions"}], "zcache.amplitude": [{"_b"}, {"_a", "_c"}]},
     ["[zcache] layer 2 from the top: the contract has binned | chunks | loss, the diagram binned | loss (add chunks)"]),
    ({"zcache": [{"loss", "binned"}, {"plot"}, {"exceptions"}], "zcache.amplitude": [{"_b"}, {"_a", "_c"}]},
     ["[zcache] layer 1 from the top: the contract has binned | loss, the diagram plot (add binned, loss) (remove plot)"]),
    ({"zcache": [{"plot"}, {"loss", "binned"}, {"exceptions"}]},
     ["the diagram's [zcache.amplitude] section has no layers contract in setup.cfg: add one or remove it"]),
    ({"zcache": [{"plot"}, {"loss", "binned"}, {"exceptions"}, {"types"}], "zcache.amplitude": [{"_b"}, {"_a", "_c"}],
      "zcache.inference": [{"_x"}]},
     ["add a [zcache.inference] section to the diagram: setup.cfg has a layers contract for it",
      "[zcache] layer 4 from the top: the contract has types, the diagram nothing (add types)"]),
])
def test_order_problems_name_what_to_change(contract, expected):
    assert order_problems(parse_diagram(DIAGRAM), contract) == expected


def test_coverage_problems_name_missing_extra_and_repeated_modules():
    sections = parse_diagram(DIAGRAM)
    existing = {"plot", "loss", "binned", "exceptions", "amplitude", "amplitude._a", "amplitude._b", "amplitude._c"}
    assert coverage_problems(sections, existing) == []
    assert coverage_problems(sections, existing | {"_engine.collector"}) == [
        "add the module '_engine.collector' to the diagram: in [zcache] as '_engine.collector', in the layer of the contract"]
    assert coverage_problems(sections, existing | {"amplitude._jets"}) == [
        "add the module 'amplitude._jets' to the diagram: in [zcache.amplitude] as '_jets', in the layer of the contract"]
    assert coverage_problems(sections, existing - {"binned"}) == [
        "remove 'binned' from the diagram: there is no such module under zcache/"]
    twice = {**sections, "zcache": [*sections["zcache"], frozenset({"plot"})]}
    assert coverage_problems(twice, existing) == ["'plot' appears 2 times in the diagram: list it once"]


def test_a_package_named_whole_covers_its_modules():
    sections = {"zcache": [frozenset({"inference"}), frozenset({"exceptions"})]}
    assert coverage_problems(sections, {"inference", "inference._core", "exceptions"}) == []
