"""Build hook: the compiled kernel, built only when asked for.

With ``GATEWAY_BUILD_NATIVE=1`` it compiles the modules listed under
``[tool.hatch.build.targets.wheel.hooks.custom] modules`` (the kernel:
CONTRIBUTING.md, "Building and the compiled kernel") with mypyc and ships them, with a
manifest, in a ``gateway_native/`` directory beside the package: in the wheel (then
tagged for this interpreter and platform; CI repairs it to a manylinux tag with
auditwheel), or in the editable install that ``GATEWAY_BUILD_NATIVE=1 uv sync`` makes.
``gateway/native.py`` loads them in place of the same-named pure-Python modules only
while every source of the package is byte-identical to what was compiled (the compiled
code also relies on the types and constants of the modules it imports), and never with
``GATEWAY_PURE_PYTHON=1``; the pure-Python modules are the fallback and stay the source
of truth.

Without it (the default: ``uv sync``, ``pip install``, ``uv build``) the package is
pure Python, built without a compiler and without the build dependencies.  A failed
compile is reported and the package is built without the compiled modules: installing
never fails for want of a compiler.
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

#: What the compile needs in the build environment, pinned: the mypy and msgspec of
#: uv.lock.
BUILD_DEPENDENCIES = ["mypy==2.4.1", "setuptools==84.2.1", "msgspec==0.23.0"]

#: Most seconds the compile may take before the package is built without it.
COMPILE_SECONDS = 900

#: What the compile runs in the build environment.  Of the gateway's own dependencies
#: only msgspec is installed there (a compiled module may then define a ``Struct``: mypyc
#: makes it an ordinary Python class); the others' types are unknown (Any) to the
#: compile.  No user or project mypy configuration applies: it checks nothing, it only
#: compiles.  The C files of the one extension (``multi_file``) are compiled in
#: parallel, one gcc per core: setuptools compiles an extension's files one by one.
_COMPILE = """
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from setuptools import setup
from setuptools.command.build_ext import build_ext
from mypyc.build import mypycify


class ParallelBuildExt(build_ext):
    def build_extensions(self):
        compiler = self.compiler
        serial, one = compiler.compile, compiler._compile

        def compile(*args, **kwargs):
            jobs = []
            compiler._compile = lambda *job: jobs.append(job)
            try:
                objects = serial(*args, **kwargs)
            finally:
                del compiler._compile
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                for done in [pool.submit(one, *job) for job in jobs]:
                    done.result()
            return objects

        compiler.compile = compile
        super().build_extensions()


out, temp, *modules = sys.argv[1:]
setup(
    name="gateway-native",
    py_modules=[],
    packages=[],
    ext_modules=mypycify(
        [
            "--config-file=" + os.devnull,
            "--ignore-missing-imports",
            "--follow-imports=silent",
            *modules,
        ],
        opt_level="3",
        group_name="gateway_native_rt",
        multi_file=True,
    ),
    cmdclass={"build_ext": ParallelBuildExt},
    script_args=["build_ext", "--build-lib", out, "--build-temp", temp],
)
"""

NATIVE_DIR = "gateway_native"


def _enabled() -> bool:
    return os.environ.get("GATEWAY_BUILD_NATIVE") == "1"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def dependencies(self) -> list[str]:
        return list(BUILD_DEPENDENCIES) if _enabled() else []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._out: Path | None = None
        if not _enabled():
            return
        modules: list[str] = list(self.config.get("modules", []))
        if not modules:
            return
        root = Path(self.root)
        out = Path(tempfile.mkdtemp(prefix="gateway-native-"))
        self._out = out
        editable = version == "editable"
        try:
            files = self._compile(root, modules, out, str(root) if editable else None)
        except Exception as exc:  # any failure: build the pure package
            sys.stderr.write(f"gateway: compiling the kernel failed, pure Python only: {exc}\n")
            return
        include = build_data.setdefault(
            "force_include_editable" if editable else "force_include", {}
        )
        for path in files:
            include[str(path)] = f"{NATIVE_DIR}/{path.relative_to(out).as_posix()}"
        if not editable:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._out is not None:
            shutil.rmtree(self._out, ignore_errors=True)

    def _compile(self, root: Path, modules: list[str], out: Path, home: str | None) -> list[Path]:
        """Compile ``modules`` into ``out``; ``home`` is the checkout an editable install
        runs from (None: the package sits beside ``gateway_native`` in the install)."""
        with tempfile.TemporaryDirectory() as temp:
            # A copy of the package, away from the project's pyproject.toml ([tool.mypy]
            # is strict over the whole package); its files are hashed as compiled.
            work = Path(temp) / "src"
            shutil.copytree(root / "gateway", work / "gateway")
            subprocess.run(
                [sys.executable, "-c", _COMPILE, str(out), str(Path(temp) / "build"), *modules],
                cwd=work,
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=COMPILE_SECONDS,
            )
            sources = {
                path.relative_to(work).as_posix(): _sha256(path)
                for path in sorted((work / "gateway").rglob("*.py"))
            }
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        manifest: dict[str, Any] = {
            "suffix": suffix,
            "home": home,
            "sources": sources,
            "modules": {},
            "runtime": [],
        }
        for module in modules:
            name = module.removesuffix(".py").replace("/", ".")
            compiled = out / (module.removesuffix(".py") + suffix)
            if not compiled.is_file():
                raise RuntimeError(f"mypyc produced no {compiled.name} for {module}")
            manifest["modules"][name] = {
                "file": compiled.relative_to(out).as_posix(),
                "sha256": _sha256(compiled),
            }
        for shared in sorted(out.glob(f"*__mypyc{suffix}")):
            manifest["runtime"].append(
                {
                    "name": shared.name.removesuffix(suffix),
                    "file": shared.name,
                    "sha256": _sha256(shared),
                }
            )
        if not manifest["runtime"]:
            raise RuntimeError("mypyc produced no runtime library")
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return sorted(p for p in out.rglob("*") if p.is_file())
