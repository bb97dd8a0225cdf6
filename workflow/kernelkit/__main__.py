import sys

from kernelkit.worker_client import PRESTART_COMMAND, SANITIZER_CHILD_COMMAND, delegated_exit_code, start_pool

if sys.argv[1:] == [PRESTART_COMMAND]:
    from kernelkit.warm_sanitizer import start_children

    start_pool()
    start_children()
    raise SystemExit(0)
if sys.argv[1:2] == [SANITIZER_CHILD_COMMAND] and len(sys.argv) == 4:
    from kernelkit.warm_sanitizer import serve_one

    raise SystemExit(serve_one(sys.argv[2], sys.argv[3]))
# A GPU stage in a workflow job runs in the GPU's worker pool (kernelkit.worker) before the kit's
# own imports are paid for here.
code = delegated_exit_code(sys.argv[1:])
if code is None:
    from kernelkit.cli import main

    code = main()
raise SystemExit(code)
