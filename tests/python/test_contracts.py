"""The facts C++ and Python share come from one place, through the extension: the trace schema
(src/store/schema.sql) and its version, and the site, escape and loss kinds
(include/tokentrace/kinds.h). Python keeps no copy of them.

And the package's layout (python/README.md): imports go one way through the layers, between
subpackages only through their faces, and tests, benches and docs use public names and faces.
"""

import ast
import os
import re
import sqlite3
import subprocess
import sys

import pytest

from tokentrace._common import loader
from tokentrace._file import write_schema
from tt_testutil import ROOT

native = loader.load()


def test_the_schema_is_the_one_file():
    with open(os.path.join(ROOT, "src", "store", "schema.sql")) as f:
        assert native.SCHEMA_SQL == f.read()
    # the readers' tokens SELECT is the view's, cut from the same text
    assert native.SCHEMA_SQL.rstrip().endswith(native.TOKENS_SELECT_SQL + ";")
    assert native.OLDEST_READABLE_SCHEMA <= native.SCHEMA_VERSION


def test_a_hand_made_file_matches_the_shims(tmp_path):
    """tests build files with write_schema (_file/schema.py): the same tables, indices and view
    as the shim's (no index the shim leaves out, no tokens view that drops graph replays)."""
    path = str(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    write_schema(con)
    objects = dict(con.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE "
                               "'sqlite_%'"))
    con.close()
    # no index on calls since schema 4 (token_stats' first and last call ids window them)
    assert "calls_by_token" not in objects and "calls_site_k" not in objects
    assert objects["tokens"] == "view"
    assert {"saved_outputs", "escape_sites", "call_inputs"} <= set(objects)


def test_kinds_come_from_the_header():
    with open(os.path.join(ROOT, "include", "tokentrace", "kinds.h")) as f:
        header = f.read()

    def listed(prefix):
        return {name: int(value) for value, name in
                re.findall(r'X\(TOKENTRACE_%s_\w+, (\d+), "(\w+)"\)' % prefix, header)}
    assert native.SITE_KINDS == listed("SITE") == {"root": 0, "module": 1, "range": 2, "op": 3}
    assert native.ESCAPE_KINDS == listed("ESCAPE") and native.ESCAPE_KINDS["host_read"] == 4
    assert native.LOSS_KINDS == listed("LOSS")
    assert {"buffer_full", "save_failed", "inputs_failed"} <= set(native.LOSS_KINDS)


def test_every_loss_kind_is_documented():
    with open(os.path.join(ROOT, "docs", "trace-file.md")) as f:
        page = f.read()
    section = page[page.index("A **loss** is"):page.index("The file is plain SQLite")]
    documented = set(re.findall(r"`(\w+)`", section))
    for name in ("calls", "kernels", "escapes", "outputs", "links", "inputs", "saved",
                 "escape_sites", "steps", "requests", "token_text"):  # "..._calls`, `_kernels"
        documented.add("write_failed_" + name)
    assert set(native.LOSS_KINDS) <= documented


def test_the_python_layer_writes_only_known_loss_kinds(tmp_path):
    from tokentrace._common import add_losses
    path = str(tmp_path / "t.sqlite")
    native.start(path, "off", None)
    try:
        with pytest.raises(ValueError, match="unknown loss kinds"):
            add_losses({"saved_failed": 1})
        add_losses({"save_failed": 2})
    finally:
        native.stop()
    con = sqlite3.connect(path)
    assert con.execute("SELECT count FROM losses WHERE kind = 'save_failed'").fetchone() == (2,)
    con.close()


def test_row_tables_are_the_headers(tmp_path):
    with open(os.path.join(ROOT, "include", "tokentrace", "kinds.h")) as f:
        header = f.read()
    listed = {name: int(value) for value, name in
              re.findall(r'X\(TOKENTRACE_ROWS_\w+, (\d+), "(\w+)"', header)}
    assert native.ROW_TABLES == listed
    assert set(listed) == {"call_inputs", "saved_outputs", "escape_sites", "step_requests",
                           "request_events", "token_text"}


@pytest.mark.parametrize("text", ["off", "summary", "full", "sample:1", "sample:007", "sample:0",
                                  "sample:", "sample:-1", "sample:\u00b2", "sample:1000000000000",
                                  "Full", "everything", ""])
def test_kernel_modes_are_judged_by_the_cpp_parser(text):
    """Python keeps no list of kernel modes: check_kernel_mode accepts exactly what the
    C++ parser (src/core/config.cc, through _native.parse_kernel_mode) accepts, with its
    message, and never fails with a stack trace of ours ("sample:\u00b2" is a digit to
    str.isdigit)."""
    from tokentrace import TokentraceError
    from tokentrace._backend import check_kernel_mode
    try:
        native.parse_kernel_mode(text, "kernels")
        cpp_error = None
    except ValueError as exc:
        cpp_error = str(exc)
    if cpp_error is None:
        assert check_kernel_mode(text) == text
    else:
        with pytest.raises(TokentraceError) as raised:
            check_kernel_mode(text)
        assert str(raised.value) == "tokentrace: " + cpp_error
        assert native.KERNEL_MODES_ACCEPTED in cpp_error


def test_kernel_mode_default_and_non_strings():
    from tokentrace import TokentraceError
    from tokentrace._backend import check_kernel_mode
    assert native.DEFAULT_KERNEL_MODE == "summary"
    assert check_kernel_mode(None) is None  # the shim then reads TOKENTRACE_KERNELS
    with pytest.raises(TokentraceError, match="kernels=5 is not a kernel mode"):
        check_kernel_mode(5)


def test_current_gives_the_call_and_its_token(tmp_path):
    """tokentrace_current has no call number k (the background thread numbers calls; API
    version 1 returned k = 0 always): the extension gives (call id, token)."""
    assert native.API_VERSION == 2
    native.start(str(tmp_path / "current.sqlite"), "off", None)
    try:
        root = native.site("self", native.SITE_KINDS["root"])
        inner = native.site("inner", native.SITE_KINDS["module"])
        assert native.current() == (0, 0)
        for token in (1, 2):
            native.push(root)
            root_call = native.current()[0]
            native.push(inner)
            inner_call, inner_token = native.current()
            assert root_call and inner_call and inner_call != root_call
            assert inner_token == token
            native.pop()
            assert native.current() == (root_call, token)
            native.pop()
        assert native.current() == (0, 0)
    finally:
        native.stop()


def test_the_extension_sees_the_core_only_through_the_c_api():
    """python/src/ includes one header of the native core, include/tokentrace/tokentrace.h
    (besides nanobind, Python, NVTX and its own files), and links libtokentrace.so alone: the
    kernel-mode parser, the schema text and the op observer's entry table are asked of the C
    API, so no object of tt_core is compiled into the extension."""
    src = os.path.join(ROOT, "python", "src")
    own = set(os.listdir(src))
    allowed_prefixes = ("nanobind/", "nvtx3/")
    core_folders = set(os.listdir(os.path.join(ROOT, "src"))) | {"preload"}
    for name in sorted(own):
        if not name.endswith((".cc", ".h")):
            continue
        with open(os.path.join(src, name), encoding="utf-8") as f:
            text = f.read()
        quoted = re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)
        for header in quoted:
            assert (header == "tokentrace/tokentrace.h" or header in own
                    or header.startswith(allowed_prefixes)), (name, header)
        angled = re.findall(r"^\s*#\s*include\s+<([^>]+)>", text, re.M)
        assert not [h for h in angled if h.split("/")[0] in core_folders], (name, angled)
    with open(os.path.join(ROOT, "python", "CMakeLists.txt"), encoding="utf-8") as f:
        links = re.findall(r"target_link_libraries\(_native\s+PRIVATE\s+([^)]*)\)", f.read())
    assert [text.split() for text in links] == [["tokentrace_shim"]]


# --- the package's layers and faces (python/README.md) -------------------------------------
# Bottom to top; a file imports only from layers below its own (or its own subpackage, or, at
# the top, other top-level files). _record, _edit and _read share a layer: none imports another.
PKG = os.path.join(ROOT, "python", "tokentrace")
LAYER = {"_errors": 1, "_common": 2, "_file": 3, "_backend": 3, "_compiled": 4, "_engines": 4,
         "_record": 5, "_edit": 5, "_read": 5, "top": 6}
SUBPACKAGES = ("_common", "_file", "_backend", "_compiled", "_engines", "_record", "_edit",
               "_read")
# Module names the package gives as strings that are not files of it: the extension.
NAMED_MODULES = {"tokentrace._native"}


def _unit(module):
    """The layer unit of a module name: a subpackage, "_errors", or "top"."""
    parts = module.split(".")
    if len(parts) > 1 and (parts[1] in SUBPACKAGES or parts[1] == "_errors"):
        return parts[1]
    return "top"


def _is_module(module):
    """Whether `module` (tokentrace.x.y) is a file or folder of the package."""
    rest = os.path.join(PKG, *module.split(".")[1:])
    return os.path.isfile(rest + ".py") or os.path.isfile(os.path.join(rest, "__init__.py"))


def _face_imports(path):
    """{name: (module, name in it or None for the module itself)} of a face's one statement:
    the imports of its module-level `if TYPE_CHECKING:` blocks (what type checkers read and
    lazy_face offers), read here on their own; and the public names its body defines."""
    package = "tokentrace" + "".join(
        f".{p}" for p in os.path.relpath(os.path.dirname(path), PKG).split(os.sep) if p != ".")
    names, own = {}, set()
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1, (path, imp.lineno)
                for alias in imp.names:
                    names[alias.asname or alias.name] = (
                        (f"{package}.{imp.module}", alias.name) if imp.module
                        else (f"{package}.{alias.name}", None))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            own.add(node.name)
    return names, own


def _faces():
    """{subpackage: the names its face offers (__all__)}, read from each __init__.py."""
    faces = {}
    for sub in SUBPACKAGES:
        names, own = _face_imports(os.path.join(PKG, sub, "__init__.py"))
        faces[sub] = set(names) | own
    return faces


def _imports(module, source, faces):
    """(line, target module, name or None, name is an attribute) of every import in `source`
    (the file of `module`), those inside functions included; relative ones made absolute. A
    name a face offers is the face's, a module's own file among its siblings, else the file."""
    is_package = module.split(".")[-1] == "__init__"
    module = module.removesuffix(".__init__")
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            sub = _unit(base)
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                is_file = base.startswith("tokentrace") and _is_module(inner)
                if is_file and (_unit(inner) == _unit(module) or base != f"tokentrace.{sub}"
                                or alias.name not in faces.get(sub, ())):
                    out.append((node.lineno, inner, None, False))
                else:
                    out.append((node.lineno, base, alias.name, True))
    return out


def package_violations(module, source, faces):
    """What the import rule refuses in the package file of `module` ("tokentrace._edit.hooks",
    "tokentrace._read.__init__"), whose text is `source`."""
    here = _unit(module)
    face_of_file = module.endswith(".__init__")
    bad = []
    for line, target, name, is_attr in _imports(module, source, faces):
        if not target.startswith("tokentrace"):
            continue
        where = f"{module}:{line} imports {target}" + (f".{name}" if name else "")
        if is_attr and name.startswith("_") and not name.startswith("__"):
            bad.append(f"{where}: another module's underscore name")
        unit = _unit(target)
        if unit != here:
            if LAYER[unit] >= LAYER[here]:
                bad.append(f"{where}: {here} may import only layers below it, not {unit}")
            if unit in SUBPACKAGES and target != f"tokentrace.{unit}":
                bad.append(f"{where}: outside {unit}, import its face (tokentrace.{unit})")
            elif unit in SUBPACKAGES and is_attr and name not in faces[unit]:
                bad.append(f"{where}: {name} is not on the face of {unit} (its __all__)")
        elif unit in SUBPACKAGES and target == f"tokentrace.{unit}" and is_attr \
                and not face_of_file:
            bad.append(f"{where}: inside {unit}, import the sibling file, not the face")
    return bad


def user_violations(where, source, faces, strings=True):
    """What the import rule refuses in a test, bench, script or docs example: tokentrace's
    public modules and names, and the subpackages' faces (their __all__), nothing else; and
    no string that names a subpackage's inner file (a monkeypatch target, say)."""
    bad = []
    for line, target, name, is_attr in _imports("outside.file", source, faces):
        if not target.startswith("tokentrace"):
            continue
        text = f"{where}:{line} imports {target}" + (f".{name}" if name else "")
        parts = target.split(".")
        if is_attr and name.startswith("_") and not name.startswith("__"):
            bad.append(f"{text}: an underscore name")
        if len(parts) == 2 and parts[1] in SUBPACKAGES:
            if is_attr and name not in faces[parts[1]]:
                bad.append(f"{text}: {name} is not on the face of {parts[1]} (its __all__)")
        elif len(parts) > 2 and parts[1] in SUBPACKAGES:
            bad.append(f"{text}: an inner file of {parts[1]}; import its face")
        elif any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
            bad.append(f"{text}: a private module; use tokentrace.X or a subpackage's face")
    texts = [n.value for n in ast.walk(ast.parse(source))
             if strings and isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for m in re.finditer(r"tokentrace\.(_[a-z]\w*)\.(\w+)", "\n".join(texts)):
        if m.group(1) in SUBPACKAGES and _is_module(f"tokentrace.{m.group(1)}.{m.group(2)}"):
            bad.append(f"{where}: a string names the inner file {m.group(0)}")
    return bad


def _package_files():
    for folder, _, files in os.walk(PKG):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(PKG))[:-3]
                yield rel.replace(os.sep, "."), path


def _user_files():
    for folder in ("tests/python", "tests/torch_op", "bench", "scripts"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                path = os.path.join(ROOT, folder, name)
                yield os.path.relpath(path, ROOT), open(path, encoding="utf-8").read()
    docs = ["README.md", "bench/README.md", "python/README.md"] + [
        os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(ROOT, "docs")))]
    for rel in docs:
        text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        lines = re.findall(r"^\s*((?:from\s+tokentrace\S*\s+import\s+[^#\n]+)|"
                           r"(?:import\s+tokentrace\S*(?:\s+as\s+\w+)?))", text, re.M)
        yield rel, "\n".join(line.strip().rstrip("\\") for line in lines if "(" not in line)


def test_imports_go_one_way_through_the_faces():
    faces = _faces()
    bad = []
    for module, path in _package_files():
        bad += package_violations(module, open(path, encoding="utf-8").read(), faces)
    assert bad == []


def test_tests_benches_and_docs_use_public_names_and_faces():
    faces = _faces()
    bad = []
    for where, source in _user_files():  # this file's cases name inner files on purpose
        bad += user_violations(where, source, faces, not where.endswith("test_contracts.py"))
    assert bad == []


@pytest.mark.parametrize("module, source, refused", [
    ("tokentrace._common.paths", "from .._record import InputRecorder", "layers below"),
    ("tokentrace._edit.hooks", "def f():\n    from .._read import load", "layers below"),
    ("tokentrace._read.trace", "from .._compiled.join import join_kernels", "its face"),
    ("tokentrace._read.trace", "import tokentrace._common.store", "its face"),
    ("tokentrace._record.attach", "from .._common import site_name", "not on the face"),
    ("tokentrace._record.attach", "from .inputs import _text", "underscore"),
    ("tokentrace._edit.spec", "from . import when", "sibling file"),
    ("tokentrace._errors", "from ._common import ROOT", "layers below"),
    ("tokentrace._api", "from ._edit.spec import check_edits", "its face"),
])
def test_the_rule_refuses_what_it_says(module, source, refused):
    """The checker itself: each kind of forbidden import is found (the rule is not vacuous)."""
    bad = package_violations(module, source, _faces())
    assert len(bad) == 1 and refused in bad[0], bad


@pytest.mark.parametrize("source, refused", [
    ("from tokentrace import _api", "private module"),
    ("from tokentrace._errors import TokentraceError", "private module"),
    ("from tokentrace._edit.hooks import EditHooks", "inner file"),
    ("from tokentrace._common import store", "inner file"),
    ("from tokentrace._record import Nothing", "not on the face"),
    ("from tokentrace.plot import _figure", "underscore"),
    ("monkeypatch.setattr('tokentrace._record.inputs.x', 1)", "inner file"),
])
def test_the_rule_refuses_what_it_says_outside(source, refused):
    bad = user_violations("t.py", source, _faces())
    assert len(bad) == 1 and refused in bad[0], bad


def test_the_faces_offer_what_they_name():
    """Every name on a face resolves; a name that is also a file's is that file (else the
    module, once imported, would hide the name: `from pkg import join` would give join.py)."""
    import importlib
    for sub, names in _faces().items():
        face = importlib.import_module(f"tokentrace.{sub}")
        assert sorted(face.__all__) == sorted(names)
        for name in names:
            value = getattr(face, name)
            if _is_module(f"tokentrace.{sub}.{name}"):
                assert value is importlib.import_module(f"tokentrace.{sub}.{name}"), name
    import tokentrace
    names, own = _face_imports(os.path.join(PKG, "__init__.py"))
    assert sorted(tokentrace.__all__) == sorted(set(names) | own)
    for name, (target, attr) in names.items():  # the top's names: from faces or top files
        face_or_top = _unit(target) == "top" or target == f"tokentrace.{_unit(target)}"
        assert attr is not None and face_or_top, (name, target)
        assert getattr(tokentrace, name) is getattr(importlib.import_module(target), attr)


def _defines(path, name):
    """Whether the module-level body of the file at `path` binds `name` (def, class,
    assignment or import), its `if`/`try` blocks included."""
    def bound(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield node.name
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in getattr(node, "targets", [getattr(node, "target", None)]):
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            yield n.id
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                yield from ((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                yield from bound(node.body)
                yield from bound(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    yield from bound(handler.body)
    return name in set(bound(ast.parse(open(path, encoding="utf-8").read()).body))


def test_what_type_checkers_see_on_a_face_is_what_it_offers():
    """A face's one statement, its TYPE_CHECKING imports (what type checkers read and what
    lazy_face offers), names only modules of the package and names their files define: read
    from the files themselves, so a name on a face that its file lacks fails here, before any
    import. The faces offer nothing else (their __all__)."""
    import importlib
    for init in [os.path.join(PKG, "__init__.py")] + [
            os.path.join(PKG, sub, "__init__.py") for sub in SUBPACKAGES]:
        names, own = _face_imports(init)
        assert names, init
        for name, (target, attr) in names.items():
            assert _is_module(target), (init, name, target)
            if attr is not None:
                rest = os.path.join(PKG, *target.split(".")[1:])
                path = rest + ".py" if os.path.isfile(rest + ".py") else os.path.join(
                    rest, "__init__.py")
                faced = path.endswith("__init__.py") and _face_imports(path)[0]
                assert _defines(path, attr) or (faced and attr in faced), (init, name, target)
        face = importlib.import_module(os.path.relpath(os.path.dirname(init), os.path.dirname(
            PKG)).replace(os.sep, "."))
        assert sorted(face.__all__) == sorted(set(names) | own), init


def test_the_module_names_given_as_strings_exist():
    """Names the package looks modules up by (importlib, the loader's spec, the alias for the
    extension): files of the package, or the ones listed in NAMED_MODULES."""
    named = set()
    for _, path in _package_files():
        named |= set(re.findall(r"[\"'](tokentrace(?:\.\w+)+)[\"']", open(path).read()))
    for name in named:
        assert _is_module(name) or name in NAMED_MODULES, name


def test_what_the_extension_imports_by_name_is_there():
    """python/src/*.cc import Python functions by module name (PyImport_ImportModule, then
    PyObject_GetAttrString): the module and the function must exist."""
    import importlib
    src = os.path.join(ROOT, "python", "src")
    found = []
    for name in sorted(os.listdir(src)):
        text = open(os.path.join(src, name), encoding="utf-8").read()
        found += re.findall(r'PyImport_ImportModule\("([\w.]+)"\).*?'
                            r'PyObject_GetAttrString\(\w+, "(\w+)"\)', text, re.S)
    assert found
    from tokentrace._record import HookSet  # noqa: F401  (hooks.py makes the alias)
    for module, attr in found:
        assert callable(getattr(importlib.import_module(module), attr)), (module, attr)


def test_faces_and_the_console_script_import_neither_torch_nor_the_extension():
    """`import tokentrace` imports only itself and the faces' lazy import (_common's face and
    lazy.py); the subpackages' faces, `tokentrace --version`'s path (__main__, the loader's
    program lookup) and tt.load import no torch."""
    code = ("import sys, tokentrace; first = sorted(m for m in sys.modules if "
            "m.startswith('tokentrace'));"
            + "".join(f"import tokentrace.{sub};" for sub in SUBPACKAGES)
            + "import tokentrace.__main__; from tokentrace._common import loader; "
            "loader.find_program(); tokentrace.load;"
            "print(first, 'torch' in sys.modules, 'tokentrace._native' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    # the top's face needs the faces' lazy import, nothing else
    assert res.stdout.split() == [
        "['tokentrace',", "'tokentrace._common',", "'tokentrace._common.lazy']", "False", "False"]


def test_the_package_folder_is_where_the_native_files_are_installed():
    import tokentrace
    from tokentrace._common import PACKAGE_DIR
    assert PACKAGE_DIR == os.path.dirname(os.path.abspath(tokentrace.__file__))


def test_only_the_file_room_speaks_sqlite():
    """One room of the package speaks SQL (_file/): no other file imports sqlite3, so the
    opening rules and the queries of a damaged file are kept in one place, and nothing else
    can write the trace (the session's writer owns it)."""
    speaks = [module for module, path in _package_files()
              if re.search(r"^\s*(import sqlite3|from sqlite3 )",
                           open(path, encoding="utf-8").read(), re.M)]
    assert speaks and all(m.startswith("tokentrace._file.") for m in speaks), speaks


def test_no_file_but_trace_py_reaches_into_a_trace():
    """A Trace's underscore attributes are trace.py's own: what the other readers need of an
    opened trace (the site table, the outputs, the GPU totals, the per-trace caches) is
    TraceState's public interface (_read/state.py), handed to them as trace.state."""
    bad = []
    for module, path in _package_files():
        if module == "tokentrace._read.trace":
            continue
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            held = node.value
            name = (held.id if isinstance(held, ast.Name) else
                    held.attr if isinstance(held, ast.Attribute) else "")
            if name in ("trace", "_trace"):
                bad.append(f"{module}:{node.lineno} uses {name}.{node.attr}")
    assert bad == []


def test_the_readers_of_read_never_import_trace_py():
    """trace.py imports the other files of _read (as it needs them); none of them imports it
    back, not even for annotations (no circle): they take a TraceState (state.py)."""
    faces = _faces()
    bad = []
    for module, path in _package_files():
        if not module.startswith("tokentrace._read.") or module in (
                "tokentrace._read.__init__", "tokentrace._read.trace"):
            continue
        for line, target, _, _ in _imports(module, open(path, encoding="utf-8").read(), faces):
            if target == "tokentrace._read.trace":
                bad.append(f"{module}:{line} imports trace.py")
    assert bad == []


def test_the_readers_ask_for_their_sql_by_name():
    """SQL text lives in the file room (_file/queries.py: fixed texts asked for by name,
    TraceFile.ask, and the functions that build the texts that depend on the file or the
    question): no string literal of a file outside _file/ holds a SELECT (or a PRAGMA)."""
    found = set()
    for module, path in _package_files():
        if module.startswith("tokentrace._file."):
            continue
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.search(r"\b(SELECT|PRAGMA)\s", node.value):
                found.add(f"{module}:{node.lineno}")
    assert found == set()


def test_the_layout_map_names_every_file_of_the_package():
    """python/README.md's layout map: every file of the package, in its folder."""
    with open(os.path.join(ROOT, "python", "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = text[text.index("```\ntokentrace/"):]
    block = block[:block.index("```", 4)]
    named, folder = set(), ""
    for line in block.splitlines()[2:]:
        m = re.match(r"(\s*)(\S+)", line)
        if not m or not re.search(r"\.py$|/$|py\.typed$", m.group(2)):
            continue
        if len(m.group(1)) == 2:
            folder = m.group(2) if m.group(2).endswith("/") and "/" == m.group(2)[-1] else ""
            if not m.group(2).endswith("/"):
                named.add(m.group(2))
        else:
            named.add(folder + m.group(2))
    files = set()
    for where, _, names in os.walk(PKG):
        for name in names:
            if name.endswith(".py") and name != "__init__.py" or name == "py.typed":
                files.add(os.path.relpath(os.path.join(where, name), PKG))
    files.add("__init__.py")
    assert files - named == set(), "files the map lacks"
    assert named - files == set(), "names in the map that are no file"


def test_meta_keys_are_the_headers_and_the_writer_refuses_others(tmp_path):
    """One list of meta keys (kinds.h TOKENTRACE_META_KEYS), read by the extension; a key the
    Python layer hands over that is not in it is refused in one line, never written."""
    from tokentrace import TokentraceError
    from tokentrace._common import add_meta
    with open(os.path.join(ROOT, "include", "tokentrace", "kinds.h")) as f:
        header = f.read()
    listed = re.findall(r'X\(TOKENTRACE_META_\w+, "(\w+)"\)', header)
    assert list(native.META_KEYS) == listed and len(set(listed)) == len(listed)
    native.start(str(tmp_path / "m.sqlite"), "off", None)
    try:
        add_meta({"model": "M"})
        with pytest.raises(TokentraceError, match="'modle' is not a meta key"):
            add_meta({"modle": "M"})
    finally:
        native.stop()
    con = sqlite3.connect(tmp_path / "m.sqlite")
    keys = {k for (k,) in con.execute("SELECT key FROM meta")}
    con.close()
    assert "model" in keys and "modle" not in keys
    assert keys <= set(listed), keys - set(listed)


def _doc_pages():
    pages = ["README.md", "python/README.md", "include/README.md", "bench/README.md"]
    pages += [os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(ROOT, "docs")))]
    return [p for p in pages if os.path.isfile(os.path.join(ROOT, p))]


def test_the_readme_is_a_front_page_whose_links_and_schema_are_current():
    """The README stays a front page (the detail is in docs/), every relative link of the
    docs names a file that is there, and the schema version the README's report shows is
    the one this build writes (it is stated nowhere else in prose)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert readme.count("\n") <= 300
    assert re.findall(r"schema (\d+), written by tokentrace", readme) == \
        [str(native.SCHEMA_VERSION)]
    broken = []
    for page in _doc_pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)  # links, not code
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            if not os.path.exists(os.path.join(ROOT, os.path.dirname(page), target)):
                broken.append(f"{page}: {target}")
    assert broken == []

