"""check_no_op_builds.py — checks run_deepspeed.forbid_op_builds(): once installed, an attempt to
JIT-compile a DeepSpeed op fails at once with an error naming the op, through both paths a build
can take (OpBuilder.load -> jit_load for an op not installed prebuilt; a builder's own call of
torch.utils.cpp_extension.load). Runs on the CPU accelerator (DS_ACCELERATOR=cpu), where the
deepspeed wheel has no prebuilt ops, so each attempt below would otherwise start a compile.

  DS_ACCELERATOR=cpu python check_no_op_builds.py [--no-guard]

--no-guard skips forbid_op_builds() (the planted gap): each attempt then reaches the compiler
entry point, which here is a stub that raises instead of compiling (no 40 s g++ run in a test),
and the check fails (tests/test_crossval.cpp runs both). Exit 0: every attempt refused by the
guard, each printed; 1: an attempt was not refused.
"""
import argparse
import sys

import run_deepspeed

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--no-guard", action="store_true", help="do not install the guard (planted gap)")
args = p.parse_args()

from deepspeed.accelerator import get_accelerator  # noqa: E402
import torch.utils.cpp_extension as cpp_extension  # noqa: E402

if args.no_guard:
    def compile_started(*a, **k):
        raise RuntimeError("a compile would start here (stub compiler entry, --no-guard)")
    cpp_extension.load = compile_started
    cpp_extension.load_inline = compile_started
else:
    run_deepspeed.forbid_op_builds()

failed = False
attempts = [
    ("CPUAdamBuilder.load()", lambda: get_accelerator().create_op_builder("CPUAdamBuilder").load(), "cpu_adam"),
    ("cpp_extension.load", lambda: cpp_extension.load(name="zb_planted_op", sources=["/nonexistent/op.cpp"]),
     "zb_planted_op"),
]
for what, attempt, name in attempts:
    try:
        attempt()
        print(f"check_no_op_builds: {what}: loaded, not refused")
        failed = True
    except run_deepspeed.OpBuildForbidden as e:
        ok = f"'{name}'" in str(e)
        print(f"check_no_op_builds: {what}: refused: {e}" + ("" if ok else f" (does not name '{name}')"))
        failed = failed or not ok
    except Exception as e:  # noqa: BLE001  (anything else means the guard did not stop it)
        print(f"check_no_op_builds: {what}: not refused by the guard: {type(e).__name__}: {str(e)[:200]}")
        failed = True
print("check_no_op_builds: " + ("an op build was not refused" if failed else "every op build refused"))
sys.exit(1 if failed else 0)
