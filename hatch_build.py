"""Build hook: the compiled hot path (issue 17).

Compiles the modules listed under ``[tool.hatch.build.targets.wheel.hooks.custom]
modules`` with mypyc and ships them, with a manifest, in a ``gateway_native/``
directory beside the package (in the wheel, and in the editable install that
``uv sync`` makes).  ``gateway/native.py`` loads them in place of the same-named
pure-Python modules only while every one of those sources is byte-identical to what
was compiled, and never with ``GATEWAY_PURE_PYTHON=1``; the pure-Python modules are
the fallback and stay the source of truth.

``GATEWAY_BUILD_NATIVE=0`` builds without compiling.  A failed compile is reported
and the package is built without the compiled modules: installing never fails for
want of a compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: What the compile runs in the build environment (mypy and setuptools are the hook's
#: build dependencies).  The gateway's own dependencies are not installed there, so
#: their types are unknown (Any) to the compile: it checks nothing, it only compiles.
_COMPILE = """
import sys
from setuptools import setup
from mypyc.build import mypycify

out, temp, *modules = sys.argv[1:]
setup(
    name="gateway-native",
    py_modules=[],
    packages=[],
    ext_modules=mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *modules],
        opt_level="3",
        group_name="gateway_native_rt",
    ),
    script_args=["build_ext", "--build-lib", out, "--build-temp", temp],
)
"""

NATIVE_DIR = "gateway_native"


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if os.environ.get("GATEWAY_BUILD_NATIVE", "1") == "0":
            return
        modules: list[str] = list(self.config.get("modules", []))
        if not modules:
            return
        root = Path(self.root)
        out = Path(self.directory) / ".gateway-native"
        shutil.rmtree(out, ignore_errors=True)
        try:
            files = self._compile(root, modules, out)
        except Exception as exc:
            sys.stderr.write(f"gateway: compiling the hot path failed, pure Python only: {exc}\n")
            return
        key = "force_include_editable" if version == "editable" else "force_include"
        include = build_data.setdefault(key, {})
        for path in files:
            include[str(path)] = f"{NATIVE_DIR}/{path.relative_to(out).as_posix()}"
        if version != "editable":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def _compile(self, root: Path, modules: list[str], out: Path) -> list[Path]:
        with tempfile.TemporaryDirectory() as temp:
            # The build reads [tool.mypy] from the project's pyproject.toml (strict, on
            # the whole package); compile from a copy of the package without it.
            work = Path(temp) / "src"
            shutil.copytree(root / "gateway", work / "gateway")
            subprocess.run(
                [sys.executable, "-c", _COMPILE, str(out), str(Path(temp) / "build"), *modules],
                cwd=work,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        manifest: dict[str, Any] = {"suffix": suffix, "modules": {}, "runtime": []}
        for module in modules:
            name = module.removesuffix(".py").replace("/", ".")
            compiled = out / (module.removesuffix(".py") + suffix)
            if not compiled.is_file():
                raise RuntimeError(f"mypyc produced no {compiled.name} for {module}")
            source = (root / module).read_bytes()
            manifest["modules"][name] = {
                "file": compiled.relative_to(out).as_posix(),
                "source": module,
                "sha256": hashlib.sha256(source).hexdigest(),
            }
        for shared in sorted(out.glob(f"*__mypyc{suffix}")):
            manifest["runtime"].append(
                {"name": shared.name.removesuffix(suffix), "file": shared.name}
            )
        if not manifest["runtime"]:
            raise RuntimeError("mypyc produced no runtime library")
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return sorted(p for p in out.rglob("*") if p.is_file())
