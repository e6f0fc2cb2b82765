"""One docstring convention (numpy) for the public API, checked with numpydoc (run by `make lint`).

Checked objects: every non-module name in ``zcache.__all__`` and in ``__all__`` of the public
modules below, and the public methods and properties of the public classes among them (those
defined in zcache, inherited ones once, under the class that defines them; dunders and wrappers
that carry another package's docstring, e.g. ``FitMinuit.migrad`` from iminuit, are skipped).
The docstrings of the public modules themselves are checked too (sections only). Constants
(``IDENTIFIERS``, ...) carry no docstring of their own and are skipped.

Checks, each reported as ``object: code: message``:

- ``GOOGLE``: a Google-style section header ("Args:", "Returns:", ...) on a line of its own.
- ``PR01`` / ``PR02``: a parameter of the signature is not documented / a documented parameter
  does not exist (numpydoc's codes). Functions and methods document theirs in their own
  docstring, classes in the class docstring (for a dataclass or NamedTuple the "Attributes"
  section counts too). ``self``/``cls`` and ``*args``/``**kwargs`` may be left out; exception
  and warning classes are not checked for parameters.
- ``GL06`` / ``GL07`` / ``PR10``: an unknown section, sections in the wrong order, a parameter
  line without a space before the colon (numpydoc's codes).
- ``PARSE``: numpydoc's parser warned about or rejected the docstring.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
import warnings

import pytest
from numpydoc.docscrape import NumpyDocString, get_doc_object
from numpydoc.validate import Validator, error, validate

PUBLIC_MODULES = (
    "zcache",
    "zcache.loss",
    "zcache.binned",
    "zcache.models",
    "zcache.shapes",
    "zcache.plot",
    "zcache.minimize",
    "zcache.toys",
    "zcache.amplitude",
    "zcache.inference",
    "zcache.scale",
    "zcache.types",
    "zcache.exceptions",
)

GOOGLE_HEADERS = ("Args", "Arguments", "Returns", "Raises", "Yields", "Example", "Examples", "Attributes", "Note", "Notes")
_GOOGLE_RE = re.compile(r"^[ \t]*(" + "|".join(GOOGLE_HEADERS) + r"):[ \t]*$", re.MULTILINE)

# numpydoc codes reported from numpydoc.validate.validate (PR01/PR02 are computed below, so that
# *args/**kwargs may be left out and a dataclass may document its fields as Attributes).
VALIDATE_CODES = {"GL06", "GL07", "PR10"}

MIN_OBJECTS = 50


def _label(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', repr(obj)))}"


def _is_exception_class(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseException)


def _has_generated_init(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))


def _members(cls: type) -> list[tuple[str, object]]:
    """The public methods and properties of ``cls`` that zcache defines: (label, function)."""
    out = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("zcache"):
            continue
        raw = vars(owner)[name]
        if isinstance(raw, property):
            func = raw.fget
        elif isinstance(raw, functools.cached_property):
            func = raw.func
        elif isinstance(raw, staticmethod | classmethod):
            func = raw.__func__
        elif inspect.isfunction(raw):
            func = raw
        else:
            continue  # class attributes, nested classes
        if func is not None and getattr(inspect.unwrap(func), "__module__", "").startswith("zcache"):
            out.append((f"{owner.__module__}.{owner.__qualname__}.{name}", func))
    return out


def public_objects() -> list[tuple[str, object]]:
    """All objects the convention applies to, as (label, object), each object once."""
    seen: set[int] = set()
    out: list[tuple[str, object]] = []

    def add(label: str, obj: object) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            out.append((label, obj))

    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        add(module_name, module)  # its docstring: headers and sections only (no signature)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            if inspect.isclass(obj):
                add(_label(obj), obj)
                for label, func in _members(obj):
                    add(label, func)
            elif inspect.isroutine(obj):
                add(_label(obj), obj)
            # else: a constant, whose docstring is that of its type
    return out


class _Validator(Validator):
    """numpydoc's Validator, also for a module without any def or class (numpydoc 1.x raises StopIteration)."""

    def __init__(self, obj_name):
        super().__init__(obj_name)

    @property
    def source_file_def_line(self):
        try:
            return super().source_file_def_line
        except StopIteration:
            return None


def _names(items) -> str:
    return "{" + ", ".join(repr(n) for n in sorted(items)) + "}"


def check(obj: object) -> list[tuple[str, str]]:
    """The (code, message) problems of the docstring of ``obj``."""
    problems: list[tuple[str, str]] = []
    raw = inspect.cleandoc(getattr(obj, "__doc__", None) or "")  # its own docstring, not an inherited one
    for match in _GOOGLE_RE.finditer(raw):
        header = match.group(1)
        numpy = {"Args": "Parameters", "Arguments": "Parameters", "Example": "Examples", "Note": "Notes"}.get(header, header)
        problems.append(("GOOGLE", f'Google-style section header "{header}:"; use "{numpy}" underlined with dashes'))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            doc = get_doc_object(obj)
            result = validate(doc, validator_cls=_Validator)
            validator = _Validator(doc)
            signature = validator.signature_parameters
            documented = [p.replace("\\", "") for p in validator.doc_all_parameters]
            written = NumpyDocString(inspect.getdoc(obj) or "")  # without the members ClassDoc adds
            attributes = [n for names, _, _ in written["Attributes"] for n in names.split(", ")]
        except Exception as exc:  # numpydoc raises ValueError on a malformed section
            problems.append(("PARSE", f"{type(exc).__name__}: {exc}"))
            return problems
    problems += [("PARSE", str(w.message)) for w in caught if not str(w.message).startswith("Unknown section")]  # GL06
    problems += [(code, msg) for code, msg in result["errors"] if code in VALIDATE_CODES]

    if _is_exception_class(obj) or inspect.ismodule(obj):  # a callable module (zcache.run) too
        return problems
    # A dataclass / NamedTuple may document its fields as Attributes (which may list properties too,
    # so an Attributes entry is never "unknown").
    covered = documented + attributes if inspect.isclass(obj) and _has_generated_init(obj) else documented
    bare = {p.lstrip("*") for p in signature}
    # a dataclass's private fields (``_name``) are its maker's plumbing, not a user's parameters
    generated = inspect.isclass(obj) and _has_generated_init(obj)
    missing = [p for p in signature if not p.startswith("*") and p not in covered and p.lstrip("*") not in covered
               and not (generated and p.startswith("_"))]
    unknown = [p for p in documented if p.lstrip("*") not in bare]
    if missing:
        problems.append(error("PR01", missing_params=_names(missing)))
    if unknown:
        problems.append(error("PR02", unknown_params=_names(set(unknown))))
    return problems


# Positive controls: the checker must flag these, and pass the numpy-style one.


def _google_style(x, y, *args, **kwargs):
    """Add two numbers.

    Args:
        x: The first number.
        y: The second number.

    Returns:
        The sum.

    Example:
        >>> _google_style(1, 2)
        3
    """
    return x + y


def _numpy_style(x, y, *args, **kwargs):
    """Add two numbers.

    Parameters
    ----------
    x : float
        The first number.
    y : float
        The second number.

    Returns
    -------
    float
        The sum.

    Examples
    --------
    >>> _numpy_style(1, 2)
    3
    """
    return x + y


def _numpy_style_wrong(x):
    """Return a number.

    Parameters
    ----------
    x : float
        A number.
    z : float
        Not a parameter.

    Note
    ----
    Not a numpy section name ("Notes" is).
    """
    return x


class _NumpyClass:
    """A class.

    Parameters
    ----------
    a : int
        A number.
    """

    def __init__(self, a, b):
        self.a = a


def test_checker_flags_google_style_and_passes_numpy_style():
    codes = [code for code, _ in check(_google_style)]
    assert codes.count("GOOGLE") == 3, codes
    assert "PR01" in codes, codes
    assert check(_numpy_style) == []
    codes = [code for code, _ in check(_numpy_style_wrong)]
    assert sorted(codes) == ["GL06", "GL07", "PR02"], codes
    assert [code for code, _ in check(_NumpyClass)] == ["PR01"]


@pytest.mark.slow  # about 8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); static; `make lint` runs it
def test_public_docstrings_are_numpy_style():
    objects = public_objects()
    assert sum(not inspect.ismodule(obj) for _, obj in objects) > MIN_OBJECTS, f"only {len(objects)} objects found to check"
    failures = []
    for label, obj in objects:
        failures += [f"{label}: {code}: {message}" for code, message in check(obj)]
    if failures:
        pytest.fail(
            f"{len(failures)} docstring problems in {len(objects)} public objects:\n" + "\n".join(sorted(failures)),
            pytrace=False,
        )
