import sys

from kernelkit.worker_client import delegated_exit_code

# A GPU stage in a workflow job runs in the GPU's worker pool (kernelkit.worker) before the kit's
# own imports are paid for here.
code = delegated_exit_code(sys.argv[1:])
if code is None:
    from kernelkit.cli import main

    code = main()
raise SystemExit(code)
