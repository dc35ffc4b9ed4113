"""tests/python/hostile/test_hostile_shutdown.py: the interpreter exits cleanly while daemon threads
are inside kffi calls that run Python (issue 29, class 5). CPython ends such a thread, when it wants
the GIL back during finalization, with a forced unwind (pthread_exit); every catch-all on the way
(kffi's safe calls, exports, contract wrappers, the extension) must let it through, or glibc aborts
the process ("FATAL: exception not rethrown").

Each path runs in a subprocess with a timeout: the threads are parked inside their calls, the
main thread exits, and the process must end with status 0 and nothing on stderr about it. A
static check keeps every catch-all of the sources in the one form (KFFI_CATCH_ALL, kffi/base.h).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, TESTING_LIB_SOURCE, LibraryBuilder

LIBS = Path(__file__).resolve().parent / "hostile_libs"

# Each scenario: Python that starts daemon threads which enter a kffi call running `cb` (or
# blocking natively), with `entered` set from inside. {lib} and {testing} are library paths.
SCENARIOS = {
    # A typed global function (the typed safe call) calling a Python callback in a loop.
    "typed_global": "threading.Thread(target=t('call_n_times'), args=(cb, 10**9, 1), daemon=True)",
    # A packed global function calling a callback that never returns.
    "packed_global": "threading.Thread(target=t('apply'), args=(forever, 1), daemon=True)",
    # A KFFI_EXPORT export calling a callback.
    "export": "threading.Thread(target=mod.call_back, args=(cb, 10**9), daemon=True)",
    # A KFFI_EXPORT_CONTRACT export calling a registered global Python function.
    "contract_export": "threading.Thread(target=mod.call_global, args=(10**9,), daemon=True)",
    # kffi.with_contract around a Python function, nested, called from C++ in a loop.
    "with_contract": (
        "threading.Thread(target=t('call_n_times'), args=(checked, 10**9, 1), daemon=True)"
    ),
    # The callback runs on a native thread the call started.
    "native_thread": "threading.Thread(target=t('call_in_thread'), args=(forever, 1), daemon=True)",
    # The environment's signal hook, polled by C++ (it takes the GIL).
    "signal_hook": "threading.Thread(target=spin, daemon=True)",
    # A call that released the GIL and returns while the interpreter ends.
    "gil_released": "threading.Thread(target=t('sleep'), args=(0.5,), daemon=True)",
}

_SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import kffi

    kffi.load_module({testing!r})
    mod = kffi.load_module({lib!r})
    t = lambda name: kffi.get_global_func("testing." + name)
    entered = threading.Semaphore(0)

    def cb(x):
        entered.release()
        time.sleep(0.001)
        return x

    def forever(*args):
        entered.release()
        while True:
            time.sleep(0.001)

    kffi.register_global_func("hostile.callback", cb)
    checked = cb
    for _ in range(3):
        checked = kffi.with_contract(kffi.Function(checked), "x: int64")

    def spin():
        entered.release()
        t("spin_until_signal")(1e9)

    THREADS = 4
    threads = [{make} for _ in range(THREADS)]
    for th in threads:
        th.start()
    if {scenario!r} == "gil_released":
        for _ in range(THREADS):
            entered.release()
        time.sleep(0.1)  # the threads are in their calls, the GIL released
    for _ in range(THREADS):
        assert entered.acquire(timeout=60), "a thread never entered its call"
    print("exiting", flush=True)
""")


@pytest.fixture(scope="module")
def libs() -> dict:
    return LibraryBuilder().build_all(
        {
            "testing": TESTING_LIB_SOURCE,
            "shutdown_kernels": LIBS / "shutdown_kernels.cc",
        }
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_exit_with_daemon_threads_inside_kffi_calls(libs, scenario):
    script = _SCRIPT.format(
        testing=str(libs["testing"]),
        lib=str(libs["shutdown_kernels"]),
        make=SCENARIOS[scenario],
        scenario=scenario,
    )
    for _ in range(3):  # the abort came every time; three runs catch an unlucky interleaving
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
        )
        assert proc.stdout == "exiting\n", proc.stdout + proc.stderr
        assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
        assert "FATAL" not in proc.stderr and "terminate" not in proc.stderr, proc.stderr


# ---- the static check ---------------------------------------------------------------------------

_SOURCES = ["include/kffi", "src", "python/src"]


def _catch_alls():
    """(file, line number, handler text, text before) of every `catch (...)` in the sources."""
    for root in _SOURCES:
        for path in sorted((REPO / root).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".cuh") or not path.is_file():
                continue
            text = path.read_text()
            for m in re.finditer(r"catch\s*\(\s*\.\.\.\s*\)", text):
                line_start = text.rfind("\n", 0, m.start()) + 1
                line = text[line_start : text.find("\n", m.end())]
                if line.lstrip().startswith(("//", "/*", "*")) or "#define KFFI_CATCH_ALL" in line:
                    continue
                if "#define KFFI_CATCH_ALL" in text[max(0, m.start() - 200) : m.start()]:
                    continue  # the macro itself
                # The handler: from the brace after the clause to its match.
                i = text.index("{", m.end())
                depth, j = 0, i
                while True:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    if depth == 0:
                        break
                    j += 1
                yield (
                    path,
                    text.count("\n", 0, m.start()) + 1,
                    line,
                    text[i : j + 1],
                    text[max(0, m.start() - 2000) : m.start()],
                )


def test_every_catch_all_lets_a_forced_unwind_through():
    offenders = []
    for path, lineno, line, handler, before in _catch_alls():
        if "KFFI_CATCH_ALL" in line:  # the macro's own expansion site
            continue
        if re.search(r"\bthrow\s*;", handler):
            continue  # rethrows
        if "in a noexcept function that runs no foreign code" in line:
            continue  # no forced unwind can start there; rethrowing would terminate
        # A classifier (`try { throw; } catch (...) ...`): its callers' KFFI_CATCH_ALL come first.
        last_try = before.rfind("try {")
        if last_try >= 0 and re.match(r"try\s*\{\s*throw;\s*\}", before[last_try:]):
            continue
        offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not offenders, (
        "catch (...) that would swallow a thread's forced unwind (use KFFI_CATCH_ALL, "
        "kffi/base.h):\n" + "\n".join(offenders)
    )
    uses = sum(
        p.read_text().count("KFFI_CATCH_ALL")
        for root in _SOURCES
        for p in (REPO / root).rglob("*")
        if p.suffix in (".h", ".cc") and p.is_file()
    )
    assert uses >= 30  # the safe-call macros, exports, contracts, the runtime, the extension
