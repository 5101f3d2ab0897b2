"""Check the release artifacts that .ci/build-wheel wrote into OUTDIR.

    python .ci/check_dist.py OUTDIR

The wheel: named for CPython >= 3.10 abi3 and a manylinux tag no newer than
glibc 2.28, the tag auditwheel reports (OUTDIR/auditwheel.txt) is the one in
the name, and its files are exactly the package's Python sources and stubs
from python/fairq, py.typed, its data (fairq/sim/data: the built-in
traces), the one extension module fairq/_core.abi3.so and the dist-info
(no tests, benches, caches, build debris); its version is Cargo.toml's.
The sdist: carries what builds fairq (Cargo.toml, Cargo.lock,
pyproject.toml, rust/, python/fairq) and no build output or environments.
Prints a short report (sizes, tag) and exits 1 listing every problem found.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GLIBC_FLOOR = (2, 28)  # the newest glibc the wheel may require (RHEL 8)


def cargo_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    if m is None:
        raise SystemExit("Cargo.toml: no [package] version")
    return m.group(1)


#: package data shipped in the wheel whatever its suffix (the built-in traces)
DATA_DIRS = ("fairq/sim/data/",)


def package_sources() -> set[str]:
    """Files under python/fairq that belong in the wheel, as wheel paths."""
    src = ROOT / "python"
    keep = {".py", ".pyi", ".typed"}
    out = set()
    for p in (src / "fairq").rglob("*"):
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        name = p.relative_to(src).as_posix()
        if p.suffix in keep or name.startswith(DATA_DIRS):
            out.add(name)
    return out


def check_wheel(wheel: Path, version: str, report: Path, problems: list[str]) -> None:
    # fairq-<ver>-cp310-abi3-<platform tags>.whl
    m = re.fullmatch(rf"fairq-{re.escape(version)}-cp310-abi3-(.+)\.whl", wheel.name)
    if m is None:
        problems.append(f"{wheel.name}: not fairq-{version}-cp310-abi3-*.whl")
        return
    platforms = m.group(1).split(".")
    newest = None
    for tag in platforms:
        pm = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)|manylinux2014_(\w+)", tag)
        if pm is None:
            problems.append(f"{wheel.name}: platform tag {tag} is not manylinux")
            continue
        glibc = (2, 17) if pm.group(4) else (int(pm.group(1)), int(pm.group(2)))
        newest = glibc if newest is None else max(newest, glibc)
    if newest is not None and newest > GLIBC_FLOOR:
        problems.append(f"{wheel.name}: needs glibc {newest}, newer than {GLIBC_FLOOR}")

    audit = report.read_text() if report.exists() else ""
    am = re.search(r'consistent with the following platform tag:\s*"([^"]+)"', audit)
    if am is None:
        problems.append(f"{report}: no auditwheel platform tag")
    elif am.group(1) not in platforms:
        problems.append(f"auditwheel says {am.group(1)}, the wheel is named {platforms}")

    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = f"fairq-{version}.dist-info/"
    expected = package_sources() | {"fairq/_core.abi3.so"}
    for required in ("fairq/_core.abi3.so", "fairq/_core.pyi", "fairq/py.typed"):
        if required not in names:
            problems.append(f"wheel lacks {required}")
    for meta in ("METADATA", "WHEEL", "RECORD", "entry_points.txt"):
        if dist_info + meta not in names:
            problems.append(f"wheel lacks {dist_info}{meta}")
    for name in sorted(n for n in names if not n.startswith(dist_info)):
        if name not in expected:
            problems.append(f"wheel carries {name}, which is not part of the package")
    for name in sorted(expected - names):
        problems.append(f"wheel lacks {name} (in python/fairq)")

    metadata = zipfile.ZipFile(wheel).read(dist_info + "METADATA").decode()
    if f"\nVersion: {version}\n" not in metadata:
        problems.append(f"METADATA version is not Cargo.toml's {version}")
    if "\nRequires-Python: >=3.10" not in metadata:
        problems.append("METADATA lacks Requires-Python: >=3.10")
    so = (
        zipfile.ZipFile(wheel).getinfo("fairq/_core.abi3.so").file_size
        if ("fairq/_core.abi3.so" in names)
        else 0
    )
    floor = f"glibc >= {newest[0]}.{newest[1]}" if newest else "no manylinux tag"
    print(
        f"wheel  {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB "
        f"({so / 1024:.0f} KiB extension unpacked), {len(names)} files, {floor}"
    )


def check_sdist(sdist: Path, version: str, problems: list[str]) -> None:
    if sdist.name != f"fairq-{version}.tar.gz":
        problems.append(f"{sdist.name}: not fairq-{version}.tar.gz")
    top = f"fairq-{version}/"
    with tarfile.open(sdist) as tar:
        names = {n[len(top) :] if n.startswith(top) else "/" + n for n in tar.getnames()}
    for required in (
        "PKG-INFO",
        "pyproject.toml",
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "rust/lib.rs",
        "python/fairq/__init__.py",
        "python/fairq/_core.pyi",
        "python/fairq/py.typed",
    ):
        if required not in names:
            problems.append(f"sdist lacks {required}")
    debris = re.compile(r"(^|/)(target|\.venv[^/]*|dist|\.git|__pycache__)(/|$)|\.(so|pyc)$")
    for name in sorted(names):
        if name.startswith("/"):
            problems.append(f"sdist entry {name[1:]} is outside {top}")
        elif debris.search(name):
            problems.append(f"sdist carries build debris: {name}")
    print(f"sdist  {sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB, {len(names)} files")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    version = cargo_version()
    problems: list[str] = []
    wheels = sorted(out.glob("fairq-*.whl"))
    sdists = sorted(out.glob("fairq-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        problems.append(f"{out}: want one wheel and one sdist, found {wheels + sdists}")
    else:
        check_wheel(wheels[0], version, out / "auditwheel.txt", problems)
        check_sdist(sdists[0], version, problems)
    for p in problems:
        print(f"check_dist: {p}", file=sys.stderr)
    if not problems:
        print(f"check_dist: wheel and sdist of fairq {version} OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
