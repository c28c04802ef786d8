"""Commit subjects of at most 72 characters, so that `git log --oneline` can be scanned.

Every commit after BASE (the last commit whose subject was longer) is checked, merges included; the
subject is what `git log --format=%s` shows. The same rule refuses a longer subject at commit time:
`.githooks/commit-msg`, enabled by `make hooks` (`git config core.hooksPath .githooks`). Where the
checkout has no git history (an unpacked archive, an installed wheel, a shallow clone that stops after
BASE) the history check is skipped and says why.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / ".githooks" / "commit-msg"
LIMIT = 72
BASE = "b84df9af79930f39d22f34a4019ee4447c93ef5f"   # the last commit with a subject over the limit


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=60)


def subjects_since_base() -> list[tuple[str, str]]:
    """(short hash, subject) of each commit on HEAD after BASE; skips where that cannot be known."""
    if shutil.which("git") is None:
        pytest.skip("no git on this machine")
    top = git("rev-parse", "--show-toplevel").stdout.strip()
    if not top or Path(top).resolve() != ROOT:
        pytest.skip("the project's folder is not a git checkout (an archive or an installed copy)")
    if git("cat-file", "-e", f"{BASE}^{{commit}}").returncode != 0:
        pytest.skip(f"the checkout's history does not reach the base commit {BASE[:12]} (shallow clone?)")
    if git("merge-base", "--is-ancestor", BASE, "HEAD").returncode != 0:
        pytest.skip(f"the base commit {BASE[:12]} is not an ancestor of HEAD")
    out = git("log", "--format=%h%x00%s", f"{BASE}..HEAD")
    assert out.returncode == 0, out.stderr
    return [tuple(line.split("\0", 1)) for line in out.stdout.splitlines() if line]   # type: ignore[misc]


def test_commit_subjects_since_base_fit_the_limit() -> None:
    long = [f"{h} ({len(s)} characters): {s}" for h, s in subjects_since_base() if len(s) > LIMIT]
    assert not long, (
        f"commit subjects over {LIMIT} characters (a short subject, a blank line, details in the body; "
        "`make hooks` refuses them at commit time):\n" + "\n".join(long))


def run_hook(message: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(message, encoding="utf-8")
    return subprocess.run([sys.executable, str(HOOK), str(msg)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_hook_is_executable() -> None:
    assert HOOK.is_file() and HOOK.stat().st_mode & 0o111, f"{HOOK.relative_to(ROOT)} is not an executable file"


@pytest.mark.parametrize("message", [
    "x" * 72 + "\n",
    "Short subject\n\n" + "a body line far longer than the limit " * 10 + "\n",
    "# a comment line longer than the limit " + "x" * 80 + "\n\nSubject after a comment and a blank line\n",
    "é" * 72 + "\n",   # characters, not bytes
])
def test_hook_accepts_a_subject_within_the_limit(message: str, tmp_path: Path) -> None:
    result = run_hook(message, tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("message,length", [
    ("x" * 73 + "\n\nbody\n", 73),
    ("A subject that runs on\nover a second line without a blank line between them, as git joins them\n",
     len("A subject that runs on") + 1 + len("over a second line without a blank line between them, as git joins them")),
])
def test_hook_refuses_a_longer_subject_with_the_limit_and_the_fix(message: str, length: int, tmp_path: Path) -> None:
    result = run_hook(message, tmp_path)
    assert result.returncode == 1
    assert f"the subject is {length} characters; the limit is {LIMIT}" in result.stderr
    assert "blank line" in result.stderr and "git commit -e -F" in result.stderr


def hook_module() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("commit_msg_hook", str(HOOK))
    spec = importlib.util.spec_from_loader("commit_msg_hook", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def scratch_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    if shutil.which("git") is None:
        pytest.skip("no git on this machine")
    repo = tmp_path / "repo"
    repo.mkdir()
    assert git("init", "-q", cwd=repo).returncode == 0
    return repo, ["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]


def test_hook_measures_what_git_log_shows(tmp_path: Path) -> None:
    """The hook's subject of a message equals git's own %s for a commit with that message."""
    repo, ident = scratch_repo(tmp_path)
    message = "\n\nFirst line of a paragraph\nsecond line of it   \n\nThe body.\n"
    done = git(*ident, "-c", f"core.hooksPath={tmp_path / 'none'}", "commit", "-q", "--allow-empty", "-m",
               message, cwd=repo)
    assert done.returncode == 0, done.stderr
    shown = git("log", "-1", "--format=%s", cwd=repo).stdout.rstrip("\n")
    assert hook_module().subject(message) == shown == "First line of a paragraph second line of it"


def test_git_with_the_hooks_path_refuses_a_long_subject(tmp_path: Path) -> None:
    """What `make hooks` sets up: git itself runs the hook, refuses 73 characters and takes 72."""
    repo, ident = scratch_repo(tmp_path)
    hooked = [*ident, "-c", f"core.hooksPath={HOOK.parent}"]
    refused = git(*hooked, "commit", "-q", "--allow-empty", "-m", "y" * 73, cwd=repo)
    assert refused.returncode != 0 and "the limit is 72" in refused.stderr
    taken = git(*hooked, "commit", "-q", "--allow-empty", "-m", "y" * 72, cwd=repo)
    assert taken.returncode == 0, taken.stderr
    assert git("log", "--format=%s", cwd=repo).stdout.splitlines() == ["y" * 72]
